"""`macprof show --format`: a run log as text (the detail, then the summary), as markdown to
paste into an issue, or its summary rows as JSON or CSV."""

from __future__ import annotations

from dataclasses import replace

from macprof.model.log import RunLog
from macprof.render.detail import render_detail
from macprof.render.exporters import export, md_escape, to_markdown
from macprof.render.report import sections
from macprof.render.summary import render_summary, summary_table, warnings
from macprof.render.sweeps import sweep_sections
from macprof.render.text import fmt_bytes


def render_show(log: RunLog, fmt: str = "text") -> str:
    if fmt == "text":
        return render_detail(log) + "\n\n" + render_summary(log)
    if fmt == "markdown":
        return render_markdown(log)
    table = summary_table(log)
    if fmt == "json":  # what the run was, and its warnings: part of what it says about its numbers
        table = replace(table, meta={**_about(log), "warnings": warnings(log)})
    return export(table, fmt)


def render_markdown(log: RunLog) -> str:
    """The summary table, the sweep tables and each phase's own section when present (render/report.py
    ``sections``: speculative, quality, conversation, tasks, as under the text summary) with its
    items' tables (a conversation's turns), and the warnings."""
    a = _about(log)
    m = a["machine"]
    head = (f"**macprof {a['tool_version']}** run of {a['started_utc']} ({'complete' if a['complete'] else 'INCOMPLETE'}) "
            f"on {m['chip'] or m['cpu_model']}, {m['os']} {m['os_version']}, {fmt_bytes(m['memory_bytes'])}")
    parts = [md_escape(head), to_markdown(summary_table(log))]
    for table, line in sweep_sections(log):
        parts.append(f"**{md_escape(table.title)}**\n\n{to_markdown(table)}" + (f"\n\n{md_escape(line)}" if line else ""))
    parts += [sec.markdown() for sec in sections(log, items=True)]
    warns = warnings(log)
    if warns:
        parts.append("**Warnings**\n\n" + "\n".join(f"- {md_escape(w)}" for w in warns))
    return "\n\n".join(parts)


def _about(log: RunLog) -> dict:
    """Which run this is: tool, time, completeness, machine (raw values)."""
    mach = log.machine
    return {"tool_version": log.tool_version, "started_utc": log.started_utc, "complete": bool(log.complete),
            "machine": {k: getattr(mach, k, None) if mach else None
                        for k in ("chip", "cpu_model", "os", "os_version", "memory_bytes")}}
