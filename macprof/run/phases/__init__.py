"""The registry of measurement protocols: one function per phase, each taking a PhaseContext.
Adding a phase = a module here with ``run_<name>(ctx)``, an entry below, its builder in
macprof/analyse/build.py and its record in macprof/model/phases.py (new event kinds go to
macprof/model/events.py; docs/design.md walks through it)."""

from __future__ import annotations

from typing import Callable

from macprof.run.phases.cold import run_cold
from macprof.run.phases.common import PhaseContext
from macprof.run.phases.prefix import run_prefix
from macprof.run.phases.sweeps import run_batch, run_depth, run_grid
from macprof.run.phases.warm import run_warm

PHASES: dict[str, Callable[[PhaseContext], None]] = {
    "cold": run_cold, "warm": run_warm, "prefix": run_prefix,
    "grid": run_grid, "depth": run_depth, "batch": run_batch,
}

__all__ = ["PHASES", "PhaseContext"]
