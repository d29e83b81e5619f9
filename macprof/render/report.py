"""What a phase adds to the reports, declared by the phase: its columns and fields in
`macprof compare`, its section under the end-of-run summary, its lines in `macprof show`.
macprof/phases.py names each phase's ``PhaseReport`` (``report``) and its compare figures
(``figures``, in analyse/, merged by phases.figures_of: a row of compare is built before
rendering); compare, summary and
show go through ``reports()`` in the registry's order, so a new phase's report is its own
module and its registry line, not an edit of each renderer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from macprof.render.exporters import Column


@dataclass(frozen=True)
class PhaseReport:
    # the compare row's key (from the phase's figures) that says a model has this phase: where no
    # compared row has it, its columns and note stay out (logs without the phase read as before)
    present: str
    columns: tuple[Column, ...] = ()  # compare's text, after decode, energy and memory
    fields: tuple[str, ...] = ()  # what compare's JSON and CSV carry, always (null where absent)
    note: str | None = None  # compare's note where a row has the phase
    section: Callable[[Any], str | None] | None = None  # (RunLog) -> its table under the end-of-run summary
    detail: Callable[[Any], list[str]] | None = None  # (the phase's record) -> `macprof show`'s lines


def reports() -> list[tuple[str, PhaseReport]]:
    """(phase name, its report) for every phase that declares one, in run order."""
    from macprof.phases import REGISTRY, load

    return [(name, load(p.report)) for name, p in REGISTRY.items() if p.report]


def present(rows, report: PhaseReport) -> bool:
    return any(r.get(report.present) for r in rows)


def columns_of(rows) -> tuple[Column, ...]:
    return tuple(c for _, rep in reports() if present(rows, rep) for c in rep.columns)


def fields_of() -> tuple[str, ...]:
    return tuple(f for _, rep in reports() for f in rep.fields)


def notes_of(rows) -> tuple[str, ...]:
    return tuple(rep.note for _, rep in reports() if rep.note and present(rows, rep))


def detail_lines(phases) -> list[str]:
    """`macprof show`'s lines of every phase with a report and a record in ``phases``."""
    out: list[str] = []
    for name, rep in reports():
        record = getattr(phases, name, None)
        if rep.detail and record:
            out += rep.detail(record)
    return out


def sections(log) -> list[str]:
    return [text for _, rep in reports() if rep.section for text in [rep.section(log)] if text]
