"""`macprof doctor`'s table: one line a source, its value or the reason it has none, and the
verdict of its check (collect/doctor.py builds them, model/doctor.py declares them)."""

from __future__ import annotations

import json
import io

from macprof.model.doctor import STATUSES, Check
from macprof.render.text import fmt_bytes

# each status as the table shows it, in STATUSES' order: a check (a source read against an expectation) in capitals
VERDICTS = dict(zip(STATUSES, ("PASS", "FAIL", "ok", "n/a", "ERROR"), strict=True))


def fmt_value(c: Check) -> str:
    if c.value is None:
        return "-"
    if c.unit == "bytes" and isinstance(c.value, int):
        return fmt_bytes(c.value) if c.value >= 0 else "-" + fmt_bytes(-c.value)
    if isinstance(c.value, (dict, list)):
        return json.dumps(c.value, separators=(", ", ": "))
    return f"{c.value} {c.unit}".strip()


def doctor_table(checks: list[Check], width: int | None = None) -> str:
    """The rows as a table wrapped to the terminal (rich), each figure over its source, then the
    count of each verdict."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for name, ratio in (("figure / source", 4), ("check", 0), ("value", 3), ("expected / reason", 4)):
        table.add_column(name, ratio=ratio or None, no_wrap=not ratio, overflow="fold")
    for c in checks:
        table.add_row(f"{c.figure}\n  {c.source}", VERDICTS[c.status], fmt_value(c), c.detail)
    console = Console(width=width or 120, record=True, file=io.StringIO(), color_system=None)
    console.print(table)
    counts = {s: sum(1 for c in checks if c.status == s) for s in VERDICTS}
    return console.export_text().rstrip() + "\n\n" + ", ".join(f"{n} {VERDICTS[s]}" for s, n in counts.items() if n)
