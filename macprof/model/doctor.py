"""`macprof doctor`'s row: one source a figure comes from, its value or the reason it has none,
and the verdict of its check. collect/doctor.py exercises the sources and builds them;
render/doctor.py draws them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# a check's verdicts (collect/doctor.py's docstring says what each means), in the order they are counted
STATUSES = ("pass", "fail", "ok", "unavailable", "error")


@dataclass(frozen=True)
class Check:
    figure: str  # what is read: "phys_footprint of a 64 MiB allocation"
    source: str  # where from: the API, command or file
    status: str  # one of STATUSES
    value: Any = None  # the figure itself (JSON), None where there is none
    detail: str = ""  # the expectation, or the reason it is unavailable or failed
    unit: str = ""  # of a numeric value: "bytes", "GB/s", "W", "s", "MB"
