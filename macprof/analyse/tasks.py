"""The tasks phase's record from its events, and the figures compare and plot show (pure).
Every figure recomputes from the attempts the log keeps (docs/tasks.md):

- accuracy at the first attempt and within the attempts allowed: tasks right / tasks run, each
  with its 95 % Wilson interval (refused tasks are not run, and said so, one line each);
- tool-call validity: of the attempts at tool-call tasks, those that parsed, named the right
  function, had arguments valid against its schema;
- mean attempts to a correct answer, over the tasks solved;
- time per correct answer: the wall time of every attempt (from before its prompt is rendered
  to its last token), the failed ones included, divided by the tasks solved; tokens per correct
  answer likewise, of the ids generated; energy per correct answer: the total power domain over
  those windows less the idle baseline, divided by the tasks solved, where power is readable.
"""

from __future__ import annotations

from typing import Sequence

from macprof.analyse import energy as en
from macprof.measure import proportions
from macprof.model import events as ev
from macprof.model.log import ModelResult
from macprof.model.phases import Failure, PhaseMemory
from macprof.model.tasks import (Proportion, TaskAttempt, TaskAttemptDone, TaskRefusal, TaskRefused, TaskResult,
                                 TasksPhase, TasksStart, TasksSummary, ToolValiditySummary)
from macprof.model.telemetry import TelemetryRaw

PHASE = "tasks"
CUT = ("timeout", "crashed")  # an attempt's status where the parent cut it: its wall time is known, its tokens are not


def proportion(k: int, n: int) -> Proportion:
    lo, hi = proportions.wilson(k, n)
    return Proportion(k=k, n=n, value=k / n if n else None, ci_low=lo if n else None, ci_high=hi if n else None)


def attempt_window(a: TaskAttempt) -> tuple[int, int] | None:
    end = a.t_end if a.t_end is not None else a.token_times[-1] if a.token_times else a.t_tokenized
    return (a.t0, end) if a.t0 is not None and end is not None and end >= a.t0 else None


def build_tasks(events: Sequence[ev.Event], failures: list[Failure], memory: PhaseMemory) -> TasksPhase:
    """Every worker's part of the phase: one after a timeout, or a resumed run's, goes on after
    the tasks the journal settled (run/phases/tasks.py settled_tasks); a task begun again at its
    first attempt (cut short by an interruption, not settled) keeps its last run only. A cut
    record the parent wrote for an attempt its worker had recorded (older journals: the parent
    blamed a hang after an attempt on it) is passed over."""
    starts = [i for i, e in enumerate(events) if isinstance(e, TasksStart)]
    if not starts:
        return TasksPhase(failures=tuple(failures), memory=memory)
    head = events[starts[-1]]
    assert isinstance(head, TasksStart)
    tail = events[starts[0]:]
    results: dict[str, TaskResult] = {}
    recorded: set[tuple] = set()  # (worker, task, attempt) the worker itself recorded
    for e in tail:
        if isinstance(e, TaskAttemptDone):
            a = e.record()
            if a.status in CUT and (e.worker, a.task, a.attempt) in recorded:
                # a journal of a macprof that blamed a hang after an attempt on that attempt: the
                # worker's own record stands, the parent's made-up one does not replace it
                continue
            recorded.add((e.worker, a.task, a.attempt))
            r = results.get(a.task) if a.attempt > 1 else None
            r = r or TaskResult(task=a.task, category=e.category, checker=e.checker)
            results[a.task] = r.replace(attempts=(*r.attempts, a),
                                        solved_at=r.solved_at if r.solved_at is not None else (a.attempt if a.correct else None))
    refusals = tuple(dict.fromkeys(  # each worker's tasks_start repeats the file's refused lines
        (*(r for e in tail if isinstance(e, TasksStart) for r in e.record().refusals),
         *(TaskRefusal(line=e.line, task=e.task, reason=e.reason) for e in tail if isinstance(e, TaskRefused)))))
    telemetry = en.telemetry_of(events, PHASE)
    rows = tuple(results.values())
    return head.record().replace(summary=summarize(rows, telemetry), results=rows, refusals=refusals,
                                 failures=tuple(failures), memory=memory)


def summarize(results: Sequence[TaskResult], telemetry: Sequence[TelemetryRaw] = ()) -> TasksSummary:
    n = len(results)
    solved = [r for r in results if r.solved_at is not None]
    first = sum(1 for r in solved if r.solved_at == 1)
    attempts = [a for r in results for a in r.attempts]
    tool = [a for r in results if r.checker == "tool-call" for a in r.attempts if a.status == "ok"]
    windows = [w for w in (attempt_window(a) for a in attempts) if w is not None]
    wall = sum(b - a for a, b in windows) / 1e9 if windows else None
    tokens = sum(a.completion_tokens or 0 if a.has("completion_tokens") else len(a.tokens) for a in attempts)
    cut = sum(1 for a in attempts if a.status in CUT)
    # a server's attempt whose usage gave no count (none, or an impossible one: its claim) generated unknown tokens
    uncounted = [a for a in attempts if a.status == "ok" and a.has("completion_tokens") and a.completion_tokens is None]
    tokens_reason = "; ".join(filter(None, (
        f"{cut} attempt(s) cut by the parent ({', '.join(sorted({a.status for a in attempts if a.status in CUT}))}): "
        f"the tokens they generated are not known" if cut else None,
        f"{len(uncounted)} attempt(s) through the server without a token count"
        f"{' (its usage claimed ' + _claimed(uncounted) + ')' if _claimed(uncounted) else ''}: the tokens they "
        f"generated are not known" if uncounted else None))) or None
    joules, why = _energy(windows, telemetry)
    return TasksSummary(
        tasks=n, first=proportion(first, n), within=proportion(len(solved), n),
        tool_calls=ToolValiditySummary(
            attempts=len(tool), parses=proportion(sum(bool(a.tool and a.tool.parses) for a in tool), len(tool)),
            right_function=proportion(sum(bool(a.tool and a.tool.right_function) for a in tool), len(tool)),
            arguments_valid=proportion(sum(bool(a.tool and a.tool.arguments_valid) for a in tool), len(tool)))
        if tool else None,
        mean_attempts_to_correct=sum(r.solved_at or 0 for r in solved) / len(solved) if solved else None,
        attempts_run=len(attempts), wall_s=wall, tokens_generated=tokens, attempts_cut=cut,
        time_per_correct_s=wall / len(solved) if solved and wall is not None else None,
        tokens_per_correct=tokens / len(solved) if solved and not tokens_reason else None, tokens_reason=tokens_reason,
        energy_per_correct_j=joules / len(solved) if solved and joules is not None else None,
        energy_reason=None if joules is not None and solved else ("no task solved" if joules is not None else why))


def _claimed(attempts: Sequence[TaskAttempt]) -> str:
    """The first impossible usage count these attempts' server claimed, as it claimed it ("" where none did)."""
    return next((f"{key} = {value}" for a in attempts for key, value in sorted((a.claims or {}).items())), "")


def _energy(windows: list[tuple[int, int]], telemetry: Sequence[TelemetryRaw]) -> tuple[float | None, str | None]:
    """Net joules over the attempts' windows, or None and why."""
    raw = en.merged(list(telemetry))
    if raw is None:
        return None, "no telemetry was recorded for this phase"
    if raw.total_domain is None:
        return None, en.power_reason(raw)
    base = en.baseline(raw)
    if base.watts is None:
        return None, f"no idle baseline: {base.reason}"
    total = 0.0
    for a, b in windows:
        joules = en.integrate(raw.samples, raw.total_domain, a, b)
        if joules is None:
            return None, "the telemetry samples do not cover every attempt's window"
        total += joules - base.watts * (b - a) / 1e9
    return total, None


def task_outcomes(m: ModelResult) -> dict[str, tuple[bool, bool]] | None:
    """Per task id: (right at the first attempt, right within the attempts), for paired tests."""
    ph = m.phases.tasks
    if ph is None or not ph.results:
        return None
    return {r.task: (r.solved_at == 1, r.solved_at is not None) for r in ph.results}


def tasks_figures(m: ModelResult) -> dict:
    """The tasks columns of compare and plot, and why a figure is missing."""
    ph = m.phases.tasks
    none = {"accuracy": None, "accuracy_ci_low": None, "accuracy_ci_high": None, "accuracy_first": None,
            "tool_valid": None, "time_per_correct_s": None, "tokens_per_correct": None, "energy_per_correct_j": None,
            "mean_attempts": None, "tasks_n": None, "tasks_reason": None, "has_tasks": ph is not None}
    if ph is None:
        return none
    s = ph.summary
    if s is None or not s.tasks:
        return {**none, "tasks_reason": "; ".join(f.reason or f.status for f in ph.failures) or "no task ran"}
    tv = s.tool_calls.arguments_valid if s.tool_calls else None
    assert s.within is not None and s.first is not None
    return {"accuracy": s.within.value, "accuracy_ci_low": s.within.ci_low, "accuracy_ci_high": s.within.ci_high,
            "accuracy_first": s.first.value, "tool_valid": tv.value if tv else None,
            "time_per_correct_s": s.time_per_correct_s, "tokens_per_correct": s.tokens_per_correct,
            "energy_per_correct_j": s.energy_per_correct_j, "mean_attempts": s.mean_attempts_to_correct,
            "tasks_n": s.tasks, "tasks_reason": None if s.within.k else "no task solved", "has_tasks": True}
