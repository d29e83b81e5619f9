"""`macprof run --resume JOURNAL`: whether this command may continue that journal, and what the
journal already holds of each model, so that the resumed run measures only what is missing and
every request measured before the interruption stays in the run log.

A journal is continued only by the command that began it: the same models (names, engines,
files with the same sha256), the same settings, and the same inputs (the task file, a chat
template given, the quality text, the draft's files: collect/facts.py ``input_paths``, each with
its sha256 in the model_start's identity), recorded in its run_start and model_start events.
Anything else would give one "complete" log that mixes two runs.

What counts as done, per model (the orchestrator and the protocols skip it):
- a model with a model_end: the whole model;
- a cold trial whose worker recorded its second request, a failure or its end;
- a phase a worker ended, or that failed (as in the run itself, a failed phase is not retried;
  a failed sweep case is skipped with the cases before it, a case that could not be set up or
  is unsupported is skipped);
- each request and output check recorded (the worker gets them as ``done``; a warm-up is run
  again, unrecorded, when measured requests remain after it; a prefix pair's missing half, a
  speculative request's missing plain or draft one, or a missing check of either, is compared
  with the recorded tokens: the requests of the phases that check outputs keep their tokens,
  ``REPLAYED``);
- a conversation turn whose conversation_turn event was recorded: its two requests, with the
  natural reply's ids and what it left in the cache, so that the resumed conversation's history
  and cache are the interrupted run's (a turn interrupted between its halves is measured again,
  both halves, and its new requests supersede the old in the log);
- a task of the tasks phase whose recorded attempt ends it (right, the last allowed, an engine
  error, or one the parent cut at a timeout or a crash), named as a done request of kind
  "task" (run/phases/tasks.py settled_tasks); a task interrupted between its attempts is run
  again from its first.
A model whose measuring had not begun (no cold trial, no worker) is started afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from macprof.collect import facts
from macprof.config import ModelSpec, settings_dict
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.speculative import SpeculativeCheck
from macprof.model.conversation import ConversationTurn
from macprof.model.tasks import TaskAttemptDone, TasksStart

SUFFIX = ".journal.jsonl"
# the phases whose output checks compare a request with another of the same prompt: a resume
# gives their recorded requests' tokens back, so that a check the interruption left undone is made
REPLAYED = ("prefix", "batch", "speculative")


def plan_of(models: Sequence[ModelSpec]) -> tuple[dict, ...]:
    """What a run measures, as its run_start records it, with how the command named each model
    (its reference, the models.toml it came from, the server --serve started or --endpoint
    named): a bare `--resume JOURNAL` names them again (cli/models.py bare_resume)."""
    return tuple({"name": m.name, "engine": m.engine, "path": str(Path(m.path).resolve()),
                  "settings": settings_dict(m.settings),
                  **({"source": {"ref": m.source.ref, "store": m.source.store}} if m.source else {}),
                  **({"config": str(m.config)} if m.config else {}),
                  **({"server": m.endpoint.origin} if m.endpoint and m.endpoint.origin else {})} for m in models)


def check(path: Path, events: Sequence[ev.Event], models: Sequence[ModelSpec]) -> None:
    """Refuse, in one line, a journal this command cannot continue."""
    if not path.name.endswith(SUFFIX):
        raise MacprofError(f"{path}: not a journal (a journal's name ends in {SUFFIX}: the one beside the run log)")
    if not events:
        raise MacprofError(f"{path}: empty journal: there is nothing to resume; start a new run")
    start = next((e for e in events if isinstance(e, ev.RunStart)), None)
    if start is None:
        raise MacprofError(f"{path}: no run_start event: not the journal of a macprof run")
    end = next((e for e in reversed(events) if isinstance(e, ev.RunEnd)), None)
    if end is not None and end.complete:
        raise MacprofError(f"{path}: that run finished (its log is complete): there is nothing to resume")
    other = _difference(start, events, models)
    if other:
        raise MacprofError(f"{path}: recorded {other}; resume with the config and options of that run")
    changed = _changed_files(events, models)
    if changed:
        raise MacprofError(f"{path}: {changed} since the run began; a resumed log would mix two models: start a new run")
    changed = changed_inputs(events, models)
    if changed:
        raise MacprofError(f"{path}: {changed} since the run began; a resumed log would mix the results of both: "
                           f"start a new run, or put the file back")


def _plain(value):
    return json.loads(json.dumps(value))  # tuples as lists, as a journal line reads back


def _difference(start: ev.RunStart, events: Sequence[ev.Event], models: Sequence[ModelSpec]) -> str | None:
    now = {m["name"]: m for m in _plain(plan_of(models))}
    if start.models is not None:
        then = _plain(start.models)
        if [t["name"] for t in then] != list(now):
            return f"the models {', '.join(t['name'] for t in then)}, not {', '.join(now) or 'none'}"
    else:  # a journal from before run_start named its models: the ones it started
        then = [{"name": e.model, "settings": e.settings.to_json()} for e in events if isinstance(e, ev.ModelStart)]
        missing = [t["name"] for t in then if t["name"] not in now]
        if missing:
            return f"the model {missing[0]}, which this command does not measure"
    for t in then:
        n = now[t["name"]]
        for key in ("engine", "path"):
            if key in t and t[key] != n[key]:
                return f"{t['name']} with {key} {t[key]}, not {n[key]}"
        for key, value in t["settings"].items():
            if n["settings"].get(key) != value:
                return f"{t['name']} with {key} = {value}, not {n['settings'].get(key)}"
    return None


def _changed_files(events: Sequence[ev.Event], models: Sequence[ModelSpec]) -> str | None:
    starts = {e.model: e for e in events if isinstance(e, ev.ModelStart)}
    for m in models:
        start = starts.get(m.name)
        if start is None or start.files_error or facts.file_unknown(m):  # nothing was measured from those files
            continue
        try:
            files = facts.model_files(m)
        except (MacprofError, OSError) as exc:
            return f"the files of model {m.name} changed ({exc})"
        then = {(f.name, f.bytes, f.sha256) for f in start.identity.files}
        now = {(f["name"], f["bytes"], f["sha256"]) for f in files}
        if then != now:
            which = sorted({x[0] for x in then ^ now})
            return f"the files of model {m.name} changed ({', '.join(which)}: other bytes or sha256)"
    return None


def changed_inputs(events: Sequence[ev.Event], models: Sequence[ModelSpec]) -> str | None:
    """Which input of a model's run (its model_start's ``identity.inputs``) is not as it was:
    another size or sha256, gone, unreadable, or one more; None where each is the same (a journal
    from before inputs were recorded has none to compare)."""
    starts = {e.model: e for e in events if isinstance(e, ev.ModelStart)}
    for m in models:
        start = starts.get(m.name)
        if start is None or not start.identity.has("inputs") or start.identity.inputs is None:
            continue
        then = {(f.role, f.path): (f.bytes, f.sha256) for f in start.identity.inputs}
        try:
            now = {(f["role"], f["path"]): (f["bytes"], f["sha256"]) for f in facts.run_inputs(m)}
        except (MacprofError, OSError) as exc:
            return f"an input of model {m.name} changed ({exc})"
        for role, where in sorted(then.keys() ^ now.keys() | {k for k in then.keys() & now.keys() if then[k] != now[k]}):
            what = "gone" if (role, where) not in now else "new" if (role, where) not in then else \
                "other bytes: another size or sha256"
            return f"{role} of model {m.name}, {where}, changed ({what})"
    return None


@dataclass
class ModelPast:
    """What the journal holds of one model (see the module's docstring)."""

    finished: bool = False
    measuring: bool = False
    cold_done: set[int] = field(default_factory=set)
    phases_done: set[str] = field(default_factory=set)
    skip_cases: dict[str, set[str]] = field(default_factory=dict)
    failed_case: dict[str, str] = field(default_factory=dict)
    load_failed: bool = False
    requests: list[dict] = field(default_factory=list)
    task_attempts: int | None = None  # the tasks phase's attempts allowed, from its tasks_start
    # a conversation turn's requests until its conversation_turn settles it: (app, turn) -> requests
    turn_requests: dict[tuple[int, int], list[dict]] = field(default_factory=dict)

    def cases_left(self, phase: str, cases: list[dict]) -> list[dict]:
        """A sweep's cases still to run: the ones after its last failed case, less those skipped."""
        if phase in self.failed_case:
            ids = [c["id"] for c in cases]
            failed = self.failed_case[phase]
            cases = cases[ids.index(failed) + 1:] if failed in ids else []
        return [c for c in cases if c["id"] not in self.skip_cases.get(phase, set())]


def past(events: Sequence[ev.Event], name: str) -> ModelPast:
    """The model ``name``'s events since its last model_start, read as what is done."""
    first = max((i for i, e in enumerate(events) if isinstance(e, ev.ModelStart) and e.model == name), default=None)
    out = ModelPast()
    if first is None:
        return out
    spawns: dict[str, ev.WorkerSpawn] = {}
    for e in events[first:]:
        if e.model != name:
            continue
        if isinstance(e, ev.WorkerSpawn):
            spawns[e.worker or ""] = e
        out.finished |= isinstance(e, ev.ModelEnd)
        out.measuring |= isinstance(e, (ev.ColdTrial, ev.WorkerSpawn))
        _read(out, e, spawns.get(e.worker or ""))
    return out


def _read(out: ModelPast, e: ev.Event, spawn: ev.WorkerSpawn | None) -> None:
    cold = spawn is not None and tuple(spawn.phases) == ("cold",)
    if isinstance(e, ev.Failure):
        failure = e.record()
        if spawn is None:  # the orchestrator's own: a refused case
            if failure.case:
                out.skip_cases.setdefault(failure.phase or "", set()).add(failure.case)
        elif cold:
            out.cold_done.add(spawn.trial)
        elif failure.phase is None:
            out.load_failed = True
        elif failure.case:
            out.failed_case[failure.phase] = failure.case
        else:
            out.phases_done.add(failure.phase)
    elif cold and (isinstance(e, ev.Done) or isinstance(e, ev.Request) and e.kind == "second"):
        out.cold_done.add(spawn.trial)  # type: ignore[union-attr]
    elif spawn is None or cold:
        return
    elif isinstance(e, ev.PhaseEnd):
        out.phases_done.add(e.phase)
    elif isinstance(e, (ev.CaseError, ev.CaseUnsupported)):
        out.skip_cases.setdefault(e.phase, set()).add(e.case)
    elif isinstance(e, ev.Request) and e.phase == "conversation" and e.kind == "measured" and e.case:
        # the replay needs the reply (the next turn's history) and the cache it left
        r = e.record()
        out.turn_requests.setdefault((int(e.case.removeprefix("app")), e.index), []).append(
            {"phase": e.phase, "case": e.case, "mode": e.mode, "kind": e.kind, "index": e.index,
             "tokens": list(r.tokens),
             "cached_tokens_after": r.cached_tokens_after if isinstance(r.cached_tokens_after, int) else None})
    elif isinstance(e, ConversationTurn) and e.phase == "conversation":
        turn = e.record()
        out.requests += out.turn_requests.pop((turn.app, turn.turn), [])
    elif isinstance(e, ev.Request):  # a prefix pair's, a batch's, a speculative prompt's tokens: their checks need them
        key = {k: getattr(e, k) for k in ("phase", "case", "mode", "kind", "index")}
        r = e.record()
        tokens = list(r.tokens) if r.status == "ok" or e.phase == "prefix" else []  # a batch's: only a whole one
        out.requests.append({**key, "tokens": tokens} if e.phase in REPLAYED else key)
    elif isinstance(e, TasksStart):
        out.task_attempts = e.record().attempts_allowed
    elif isinstance(e, TaskAttemptDone):
        a = e.record()
        if a.status != "ok" or a.correct or (out.task_attempts is not None and a.attempt >= out.task_attempts):
            out.requests.append({"phase": e.phase, "case": a.task, "mode": None, "kind": "task", "index": a.attempt - 1})
    elif isinstance(e, (ev.PrefixCheck, ev.BatchCheck, SpeculativeCheck)):  # a check: a request of mode "check"
        out.requests.append({"phase": e.phase, "case": getattr(e, "case", None), "mode": "check",
                             "kind": "measured" if isinstance(e, ev.BatchCheck) else e.kind, "index": e.index})
