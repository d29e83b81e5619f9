"""The tasks phase in text: the end-of-run tasks table, compare's columns, and the detail lines
of `macprof show`. Pure functions of the run log's figures (analyse/tasks.py)."""

from __future__ import annotations

from macprof.model.log import RunLog
from macprof.model.tasks import Proportion, TasksPhase
from macprof.render.exporters import Column, Table
from macprof.model.bounds import INVALID, count_ok, share_ok
from macprof.render.text import fmt_bytes, fmt_s
from macprof.sanitise import clean
from macprof.render.report import Charted, PhaseReport, Section, chart_text, label, setting

TASKS_FIELDS = ("accuracy", "accuracy_ci_low", "accuracy_ci_high", "accuracy_first", "tool_valid",
                "time_per_correct_s", "tokens_per_correct", "energy_per_correct_j", "mean_attempts", "tasks_n",
                "tasks_reason")
TASKS_NOTE = ("tasks: accuracy within the attempts allowed (95 % Wilson interval), tool calls with valid arguments, "
              "and the wall time of every attempt, failed ones included, per task solved")


def fmt_pct(x: float | None) -> str:
    """A proportion; one outside 0..1 (no measurement gives it) as INVALID, never as a figure."""
    return "-" if x is None else f"{100 * x:.0f} %" if share_ok(x) else INVALID


def fmt_prop(p: Proportion | None) -> str:
    """'k/n = value (low..high)'; INVALID where any of it is impossible (k above n, a share outside 0..1)."""
    if p is None or not p.n:
        return "-"
    if not (count_ok(p.k, p.n) and all(share_ok(x) for x in (p.value, p.ci_low, p.ci_high))):
        return INVALID
    return f"{p.k}/{p.n} = {fmt_pct(p.value)} ({fmt_pct(p.ci_low)}..{fmt_pct(p.ci_high)})"


def _accuracy(r: dict) -> str:
    if r.get("accuracy") is None:
        return "-"
    if not all(share_ok(r.get(k)) for k in ("accuracy", "accuracy_ci_low", "accuracy_ci_high")):
        return INVALID
    return f"{fmt_pct(r['accuracy'])} ({fmt_pct(r['accuracy_ci_low'])}..{fmt_pct(r['accuracy_ci_high'])})"


def _per_correct(r: dict) -> str:
    if r.get("time_per_correct_s") is None:
        return "-" if r.get("accuracy") is None else "none right"
    return fmt_s(r["time_per_correct_s"])


def _num(key: str, fmt: str = "{:.0f}"):
    return lambda r: "-" if r.get(key) is None else fmt.format(r[key])


TASKS_COLUMNS = (Column("accuracy (95% CI)", _accuracy), Column("tool calls valid", lambda r: fmt_pct(r.get("tool_valid"))),
                 Column("s per correct", _per_correct))


def tasks_table(log: RunLog) -> Section | None:
    """One row per model with the tasks phase."""
    from macprof.analyse.headline import headline
    from macprof.analyse.tasks import tasks_figures

    rows = []
    for m in log.models:
        if m.phases.tasks is None:
            continue
        rows.append({**tasks_figures(m), "model": m.identity.name, "quant": headline(m)["quant"],
                     "peak_rss_bytes": (m.phases.tasks.memory.peak_rss_bytes if m.phases.tasks.memory else None)})
    if not rows:
        return None
    columns = (Column("model", lambda r: r["model"]), Column("quant", lambda r: r["quant"] or "-"),
               Column("tasks", _num("tasks_n")), Column("first try", lambda r: fmt_pct(r.get("accuracy_first"))),
               *TASKS_COLUMNS, Column("attempts to right", _num("mean_attempts", "{:.2f}")),
               Column("tokens per correct", _num("tokens_per_correct")),
               Column("J per correct", _num("energy_per_correct_j", "{:.3g}")),
               Column("peak RSS", lambda r: fmt_bytes(r["peak_rss_bytes"])))
    notes = tuple(f"{r['model']}: {r['tasks_reason']}" for r in rows if r["tasks_reason"] and r["accuracy"] is None)
    return Section("Tasks (right answers)", Table("tasks", columns, tuple(rows), (), (), {}), notes)


def tasks_lines(ph: TasksPhase) -> list[str]:
    """`macprof show`: the phase in a few lines, every refused task one line."""
    t, s = ph.task_set, ph.summary
    lines = [f"   tasks: {clean(t.source) if t else '?'} (sha256 {(t.sha256 or '?')[:12] if t else '?'}; "
             f"{t.tasks if t else 0} tasks, {t.refused if t else 0} lines refused); up to {ph.attempts_allowed} "
             f"attempt(s), temperature {ph.temperature:g}" + (f", seed {ph.seed}" if ph.temperature else "")]
    lines.append(f"   prompts: {clean(ph.prompt_format or '?')}; tool calls read as {ph.tool_format or '-'}")
    lines.append(f"   generation: {clean(ph.generation or '?')}")
    if s is not None and s.tasks:
        lines.append(f"   accuracy first attempt {fmt_prop(s.first)}; within {ph.attempts_allowed}: {fmt_prop(s.within)}")
        if s.tool_calls:
            tc = s.tool_calls
            lines.append(f"   tool calls ({tc.attempts} attempts): parse {fmt_prop(tc.parses)}, right function "
                         f"{fmt_prop(tc.right_function)}, arguments valid {fmt_prop(tc.arguments_valid)}")
        tokens = f"{s.tokens_per_correct:.0f} tokens" if s.tokens_per_correct is not None else "tokens unknown"
        per = (f"{fmt_s(s.time_per_correct_s)} and {tokens} per correct answer, "
               f"{s.mean_attempts_to_correct:.2f} attempts to a right one"
               if s.time_per_correct_s is not None and s.mean_attempts_to_correct is not None else "no task solved")
        lines.append(f"   {s.attempts_run} attempts, {fmt_s(s.wall_s)} and {s.tokens_generated} tokens in all: {per}")
        if s.attempts_cut:
            lines.append(f"   {s.attempts_cut} attempt(s) cut by a timeout or a crash: each a failed attempt of its task, "
                         f"its wall time counted, the tasks after it run ({clean(s.tokens_reason or '')})")
        attempts = [a for r in ph.results for a in r.attempts]
        failed = [a for a in attempts if a.status == "error"]
        if failed:
            lines.append(f"   {len(failed)} attempt(s) failed, each alone (the first: {clean(failed[0].error or '?')})")
        unjudged = [a for a in attempts if a.has("check_error")]
        if unjudged:
            lines.append(f"   {len(unjudged)} repl(ies) the checker could not judge, counted not right (the first: "
                         f"{clean(unjudged[0].check_error or '?')})")
        energy = (f"{s.energy_per_correct_j:.3g} J per correct answer" if s.energy_per_correct_j is not None
                  else f"energy per correct answer unknown: {clean(s.energy_reason or '?')}")
        lines.append(f"   {energy}")
    for r in ph.refusals:
        lines.append(f"   refused: {clean(r.reason)}")
    return lines


# its compare columns, fields and note, summary table and show's lines through the registry
# (render/report.py); the accuracy call against the baseline stays render/compare.py's, since it
# needs the paired test of the whole comparison
def _time_per_correct(ax, rows, many: bool) -> None:
    """Time per correct answer (every attempt's wall time, failed ones included, per task
    solved) against peak memory; point area = accuracy. A model that solved nothing has no time
    per correct answer: listed in the title's note, not drawn at an invented value."""

    drawn = [r for r in rows if r.get("time_per_correct_s") is not None and r.get("peak_memory_bytes")]
    for r in drawn:
        ax.scatter(r["peak_memory_bytes"] / 2**20, r["time_per_correct_s"], s=40 + 400 * (r.get("accuracy") or 0),
                   alpha=0.7)
        ax.annotate(chart_text(label(r, many)), (r["peak_memory_bytes"] / 2**20, r["time_per_correct_s"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    unsolved = [chart_text(label(r, many)) for r in rows if r.get("has_tasks") and r.get("time_per_correct_s") is None]
    ax.set_xlabel("peak memory (MiB)")
    ax.set_ylabel("seconds per correct answer (all attempts)")
    ax.set_title("Time per correct answer vs memory (area = accuracy)"
                 + (f"\nno task solved: {', '.join(unsolved)}" if unsolved else ""), fontsize=9)


def tasks_panel(charted: Charted):
    """`macprof plot`'s panel of the phase, where a model ran it."""
    if not any(r.get("has_tasks") for r in charted.rows):
        return None
    return lambda ax: _time_per_correct(ax, charted.rows, charted.many)


def parameters(s) -> str:
    """The plot caption's words for the phase's settings."""
    which = "the shipped set" if not getattr(s, "tasks", None) else setting(s, "tasks")
    retries = f", retries at temperature {setting(s, 'temperature')}" if getattr(s, "temperature", None) else ""
    return f"{which}, {setting(s, 'attempts')} attempt(s){retries}"


REPORT = PhaseReport(present="has_tasks", columns=TASKS_COLUMNS, fields=TASKS_FIELDS, note=TASKS_NOTE,
                     section=tasks_table, detail=tasks_lines, panel=tasks_panel,
                     parameters=parameters)
