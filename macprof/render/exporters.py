"""One table value, four exporters (as hyperfine's): a text table, markdown, JSON and CSV.

A ``Table`` holds raw values (seconds, bytes, fractions, the strings a log holds) and says how
each column reads as text. The text and markdown exporters show those texts; JSON and CSV
carry the raw values under field names that include their unit (``warm_ttft_s``,
``peak_rss_bytes``), so a script never parses "12.3 ms". Content stays with the renderers
(summary, sweeps, compare); only the formatting lives here.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from macprof.render.text import clean, render_table

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """A column of the text and markdown tables: its header and how a row reads in it, and for a
    format that pads its cells (llama-bench's markdown), its width: negative left-aligned."""

    name: str
    show: Callable[[Row], str]
    width: int = 0


def cell(key: str, fmt: Callable[[Any], str] = str) -> Callable[[Row], str]:
    """The common column: one raw value of the row, formatted (fmt_s, fmt_bytes...)."""
    return lambda row: fmt(row.get(key))


@dataclass(frozen=True)
class Table:
    """Raw rows and how to show them. ``fields``: the raw values JSON and CSV carry, in order
    (a column may combine several, and a field need not be shown). ``notes``: clauses about
    the whole table (the baseline, the test); ``meta``: the same facts as raw values, for JSON."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    fields: tuple[str, ...]
    notes: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)
    # a field's type where a format writes it by type (llama-bench's STRING, BOOL, INT, FLOAT)
    types: dict[str, str] = field(default_factory=dict)

    def texts(self, escape: Callable[[str], str]) -> tuple[list[str], list[list[str]]]:
        """Headers and cells as text, each passed through ``escape``."""
        return ([escape(c.name) for c in self.columns],
                [[escape(c.show(row)) for c in self.columns] for row in self.rows])


def text_table(headers: list[str], rows: list[list[str]], title: str = "") -> Table:
    """A table whose cells are already text (the sweep tables): every format shows those
    texts; a column without a header, or with a repeated one, is named by its position."""
    keys = [h if h and h not in headers[:i] else f"{h or 'column'} ({i + 1})" for i, h in enumerate(headers)]
    columns = tuple(Column(h, cell(k)) for h, k in zip(headers, keys))
    return Table(title, columns, tuple(dict(zip(keys, r)) for r in rows), tuple(keys))


# -- escaping: strings from a log must not break the format they land in ---------------------
def one_line(text: Any) -> str:
    """Line breaks and tabs become spaces, escape sequences and other control characters go
    (the project's one sanitiser, ``clean``)."""
    return clean(text)


def md_escape(text: Any) -> str:
    """One line, with the characters that end or alter a markdown table cell escaped, and "<"
    too: in an issue, "<!--" from a log would hide everything after it, "<details>" fold it."""
    return one_line(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "\\<")


def csv_text(text: str) -> str:
    """One line, and not a spreadsheet formula (a cell starting =, +, - or @ is one)."""
    text = one_line(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


# -- the exporters ---------------------------------------------------------------------------
def to_text(table: Table) -> str:
    """The plain table macprof prints (columns aligned, the first left, the rest right)."""
    headers, rows = table.texts(clean)
    notes = f"\n\n{clean('; '.join(table.notes))}" if table.notes else ""
    return render_table(headers, rows) + notes


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured markdown table, ready to paste into an issue."""
    headers, rows = table.texts(md_escape)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    notes = " ".join(_sentence(md_escape(n)) for n in table.notes)
    return "\n".join(lines) + (f"\n\n{notes}" if notes else "")


def to_json(table: Table) -> str:
    """The title, the table's facts (``meta``) and one object of raw values per row."""
    doc = {"title": table.title, **table.meta, "rows": [{f: _finite(row.get(f)) for f in table.fields}
                                                        for row in table.rows]}
    return json.dumps(doc, indent=1, allow_nan=False)


def to_csv(table: Table) -> str:
    """A header of field names, then one line of raw values per row (empty where unknown)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(table.fields)
    out.writerows([_csv_value(row.get(f)) for f in table.fields] for row in table.rows)
    return buf.getvalue().removesuffix("\n")  # the caller's echo ends the last line


EXPORTERS: dict[str, Callable[[Table], str]] = {
    "text": to_text, "table": to_text, "markdown": to_markdown, "json": to_json, "csv": to_csv}


def export(table: Table, fmt: str) -> str:
    return EXPORTERS[fmt](table)


def export_logs(logs: list, fmt: str) -> tuple[str, list[str]]:
    """`macprof export`: the logs ((name, RunLog) pairs) in format ``fmt`` (render/formats.py), and
    one line per figure the format asks for that they cannot give (never a made-up row)."""
    import importlib

    from macprof.render.formats import LOG_FORMATS

    family = importlib.import_module(LOG_FORMATS[fmt])
    tables, missing = family.tables(logs)
    writer = family.WRITERS[fmt]
    return family.join([writer(t) for t in tables]) if tables else "", missing


def _sentence(text: str) -> str:
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such a figure is unknown (null), not invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _csv_value(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return csv_text("; ".join(str(v) for v in value))
    if isinstance(value, str):
        return csv_text(value)
    return repr(value) if isinstance(value, float) else str(value)
