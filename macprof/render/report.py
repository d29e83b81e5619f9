"""What a phase adds to the reports, declared by the phase: its columns and fields in
`macprof compare`, its section under the end-of-run summary, its lines in `macprof show`, its
panel in `macprof plot`.
macprof/phases.py names each phase's ``PhaseReport`` (``report``) and its compare figures
(``figures``, in analyse/, merged by phases.figures_of: a row of compare is built before
rendering); compare, summary and
show go through ``reports()`` in the registry's order (and plot, after its own panels), so a
new phase's report is its own module and its registry line, not an edit of each renderer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from macprof.render.exporters import Column, Table, md_escape, to_markdown, to_text
from macprof.sanitise import clean


@dataclass(frozen=True)
class Section:
    """A phase's part of the reports under the summary: a heading, its table, the lines under
    it; rendered as text (the end-of-run summary) or markdown (`show --format markdown`)."""

    title: str
    table: Table | None  # None: only notes (every row of the phase failed before a figure)
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        return "\n".join([f"{self.title}:", *([to_text(self.table)] if self.table else []),
                          *(f"  {clean(n)}" for n in self.notes)])

    def markdown(self) -> str:
        return "\n\n".join([f"**{md_escape(self.title)}**", *([to_markdown(self.table)] if self.table else []),
                             *(["\n".join(f"- {md_escape(n)}" for n in self.notes)] if self.notes else [])])


@dataclass(frozen=True)
class Charted:
    """What `macprof plot` gives a phase's panel: the compare rows of every model of every log
    (analyse/compare.py rows_from), each model with its series label, and whether several logs are
    drawn (a label then names its log: render/plot.py chart_text, label)."""

    rows: list[dict]
    models: list[tuple[str, Any]]  # (series label, ModelResult)
    many: bool


# a phase's panel: what it draws on one matplotlib axes from ``Charted``, or None where the logs
# hold nothing of it to draw
Panel = Callable[[Charted], Callable[[Any], None] | None]


@dataclass(frozen=True)
class PhaseReport:
    # the compare row's key (from the phase's figures) that says a model has this phase: where no
    # compared row has it, its columns and note stay out (logs without the phase read as before)
    present: str
    columns: tuple[Column, ...] = ()  # compare's text, after decode, energy and memory
    fields: tuple[str, ...] = ()  # what compare's JSON and CSV carry, always (null where absent)
    note: str | None = None  # compare's note where a row has the phase
    section: Callable[[Any], Section | None] | None = None  # (RunLog) -> its table under the end-of-run summary
    detail: Callable[[Any], list[str]] | None = None  # (the phase's record) -> `macprof show`'s lines
    # (RunLog) -> `show --format markdown`'s sections after the phase's own: its items one by one
    # (the lines `detail` gives the text), too long for the end-of-run summary
    tables: Callable[[Any], list[Section]] | None = None
    panel: Panel | None = None  # its panel in `macprof plot`, after the plot's own
    # (a model's settings) -> what shaped its figures, in words, for the plot's caption ("draft X, k [1, 4]")
    parameters: Callable[[Any], str] | None = None


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


def chart_text(value) -> str:
    """A string from a log as chart text: sanitised (an SVG with a control character in it is
    not XML), and "$" escaped (matplotlib reads "$...$" as TeX, and bad TeX fails the plot)."""
    return clean(value).replace("$", r"\$")


def label(row: dict, many_logs: bool) -> str:
    return f"{chart_text(row['model'])}\n[{chart_text(row['source'])}]" if many_logs else chart_text(row["model"])


def setting(s, name: str):
    """A setting as a caption says it: a tuple as a list, one a log lacks (older logs) "?"."""
    value = getattr(s, name, None)
    return "?" if value is None else list(value) if isinstance(value, tuple) else value


def speed_parameters(s) -> str:
    """A speed phase's lengths and repetitions, as the caption says them."""
    return f"prompt {setting(s, 'prompt_tokens')} / gen {setting(s, 'gen_tokens')} tokens, reps {setting(s, 'reps')}"


def parameters_of(s, phase: str) -> str | None:
    """What phase ``phase``'s report says shaped its figures, or None where it says nothing."""
    from macprof.phases import REGISTRY, load

    entry = REGISTRY.get(phase)
    report = load(entry.report) if entry is not None and entry.report else None
    return report.parameters(s) if report is not None and report.parameters else None


def panels(charted: Charted) -> list[Callable[[Any], None]]:
    """Each phase's panel that has something to draw, in run order."""
    drawn = (rep.panel(charted) for _, rep in reports() if rep.panel)
    return [draw for draw in drawn if draw is not None]


def sections(log, items: bool = False) -> list[Section]:
    """Each phase's section under the summary, in run order; ``items``: each followed by its
    ``tables`` (`show --format markdown`)."""
    out: list[Section] = []
    for _, rep in reports():
        sec = rep.section(log) if rep.section else None
        out += [sec] if sec else []
        if items and rep.tables:
            out += rep.tables(log)
    return out
