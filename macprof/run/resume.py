"""`macprof run --resume JOURNAL`: whether this command may continue that journal, and what the
journal already holds of each model, so that the resumed run measures only what is missing and
every request measured before the interruption stays in the run log.

A journal is continued only by the command that began it: the same models (names, engines,
files with the same sha256), the same settings, and the same inputs (the files each phase reads
besides the model's, as its parent names them: run/phases/api.py ``Parent.inputs``, each with its
sha256 in the model_start's identity), recorded in its run_start and model_start events.
Anything else would give one "complete" log that mixes two runs. What a phase's parent prepared
for a model is read back from the model's plan (``ModelPast.prepared``), not prepared again.

What counts as done, per model (the orchestrator and the protocols skip it):
- a model with a model_end: the whole model;
- a trial (of a phase that runs a fresh worker per trial) whose worker failed or ended, or that
  its phase's own reader settles (the cold phase's: its second request recorded);
- a phase a worker ended, that failed (as in the run itself, a failed phase is not retried;
  a failed sweep case is skipped with the cases before it, a case that could not be set up or
  is unsupported is skipped), or that the orchestrator refused before any worker ran it;
- each request and output check recorded (the worker gets them as ``done``; a warm-up is run
  again, unrecorded, when measured requests remain after it; a pair's missing half, or a
  missing check, is compared with the recorded tokens: the requests of the phases whose registry
  line ``replays`` keep their tokens);
- what a phase's own reader (macprof/phases.py ``resume``) reads as done of its own events:
  a conversation's recorded turns and the apps it stopped, the tasks a recorded attempt ended
  (their modules say how).
A model whose measuring had not begun (no trial, no worker) is started afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from macprof.collect import facts
from macprof.config import ModelSpec, settings_dict
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.phases import REGISTRY, load

if TYPE_CHECKING:
    from macprof.run.phases.api import Parents

SUFFIX = ".journal.jsonl"


def plan_of(models: Sequence[ModelSpec]) -> tuple[dict, ...]:
    """What a run measures, as its run_start records it, with how the command named each model
    (its reference, the models.toml it came from, the server --serve started or --endpoint
    named): a bare `--resume JOURNAL` names them again (cli/models.py bare_resume)."""
    return tuple({"name": m.name, "engine": m.engine, "path": str(Path(m.path).resolve()),
                  "settings": settings_dict(m.settings),
                  **({"source": {"ref": m.source.ref, "store": m.source.store}} if m.source else {}),
                  **({"config": str(m.config)} if m.config else {}),
                  **({"server": m.endpoint.origin} if m.endpoint and m.endpoint.origin else {})} for m in models)


def check(path: Path, events: Sequence[ev.Event], models: Sequence[ModelSpec], parents: Parents) -> None:
    """Refuse, in one line, a journal this command cannot continue; ``parents``: the run's phase
    parents, whose inputs are compared."""
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
    changed = changed_inputs(events, models, parents)
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


def changed_inputs(events: Sequence[ev.Event], models: Sequence[ModelSpec], parents: Parents) -> str | None:
    """Which input of a model's run (its model_start's ``identity.inputs``) is not as it was:
    another size or sha256, gone, unreadable, or one more; None where each is the same (a journal
    from before inputs were recorded has none to compare). Now's are the phases' parents' own
    (run/phases/api.py ``inputs``), of what the journal's plan says was prepared."""
    starts = {e.model: e for e in events if isinstance(e, ev.ModelStart)}
    for m in models:
        start = starts.get(m.name)
        if start is None or not start.identity.has("inputs") or start.identity.inputs is None:
            continue
        then = {(f.role, f.path): (f.bytes, f.sha256) for f in start.identity.inputs}
        try:
            prepared = parents.journaled(m, past(events, m.name).prepared)
            now = {(f["role"], f["path"]): (f["bytes"], f["sha256"]) for f in parents.inputs(m, prepared)}
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
    trials_done: dict[str, set[int]] = field(default_factory=dict)  # per phase run a worker per trial
    phases_done: set[str] = field(default_factory=set)
    skip_cases: dict[str, set[str]] = field(default_factory=dict)
    failed_case: dict[str, str] = field(default_factory=dict)
    load_failed: bool = False
    requests: list[dict] = field(default_factory=list)  # each done item's key (the workers' ``done``)
    units: int = 0  # how many of them are request events (the progress display's units)
    # what the parent prepared per phase, as the model's plan journaled it; None: a journal from before
    prepared: dict[str, dict] | None = None
    state: dict[str, Any] = field(default_factory=dict)  # a phase's own reader's, under its name

    def cases_left(self, phase: str, cases: list[dict]) -> list[dict]:
        """A sweep's cases still to run: the ones after its last failed case, less those skipped."""
        if phase in self.failed_case:
            ids = [c["id"] for c in cases]
            failed = self.failed_case[phase]
            cases = cases[ids.index(failed) + 1:] if failed in ids else []
        return [c for c in cases if c["id"] not in self.skip_cases.get(phase, set())]

    def request_done(self, key: dict) -> None:
        """A request event recorded (``key``: its phase, case, mode, kind, index, and what a worker needs of it)."""
        self.requests.append(key)
        self.units += 1

    def item_done(self, key: dict) -> None:
        """An item recorded that is no request event (an output check, a task): named as a request is."""
        self.requests.append(key)


# a phase's reader of its own events: whether it read ``event`` (else the generic reading does)
Reader = Callable[[ModelPast, ev.Event, ev.WorkerSpawn], bool]


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
        if isinstance(e, ev.Plan) and e.has("prepared"):
            out.prepared = dict(e.prepared or {})
        out.finished |= isinstance(e, ev.ModelEnd)
        out.measuring |= isinstance(e, (ev.ColdTrial, ev.WorkerSpawn))
        _read(out, e, spawns.get(e.worker or ""))
    return out


def trial_phase(spawn: ev.WorkerSpawn | None) -> str | None:
    """The phase a worker was spawned for, where it ran one trial of a phase run a worker per trial."""
    if spawn is None or len(spawn.phases) != 1:
        return None
    phase = REGISTRY.get(spawn.phases[0])
    return phase.name if phase is not None and phase.trials is not None else None


def _reader(phase: str | None) -> Reader | None:
    entry = REGISTRY.get(phase or "")
    return load(entry.resume) if entry is not None and entry.resume else None


def _read(out: ModelPast, e: ev.Event, spawn: ev.WorkerSpawn | None) -> None:
    trial = trial_phase(spawn)
    if isinstance(e, ev.Failure):
        failure = e.record()
        if spawn is None:  # the orchestrator's own: a refused case, or a phase refused before any worker
            if failure.case:
                out.skip_cases.setdefault(failure.phase or "", set()).add(failure.case)
            elif failure.phase:
                out.phases_done.add(failure.phase)
        elif trial is not None:
            out.trials_done.setdefault(trial, set()).add(spawn.trial)
        elif failure.phase is None:
            out.load_failed = True
        elif failure.case:
            out.failed_case[failure.phase] = failure.case
        else:
            out.phases_done.add(failure.phase)
        return
    if spawn is None:
        return
    reader = _reader(getattr(e, "phase", None))
    if reader is not None and reader(out, e, spawn):
        return
    if trial is not None:
        if isinstance(e, ev.Done):
            out.trials_done.setdefault(trial, set()).add(spawn.trial)
    elif isinstance(e, ev.PhaseEnd):
        out.phases_done.add(e.phase)
    elif isinstance(e, (ev.CaseError, ev.CaseUnsupported)):
        out.skip_cases.setdefault(e.phase, set()).add(e.case)
    elif isinstance(e, ev.Request):  # a pair's, a batch's, a speculative prompt's tokens: their checks need them
        out.request_done(request_entry(e))
    elif e.CHECKS:  # a check: a request of mode "check"
        out.item_done({"phase": getattr(e, "phase"), "case": getattr(e, "case", None), "mode": "check",
                       "kind": getattr(e, "kind", "measured"), "index": getattr(e, "index")})


def request_entry(e: ev.Request) -> dict:
    """A recorded request as a worker's ``done`` names it, with its tokens where its phase
    ``replays`` them (macprof/phases.py)."""
    key = {k: getattr(e, k) for k in ("phase", "case", "mode", "kind", "index")}
    phase = REGISTRY.get(e.phase)
    replays = phase.replays if phase is not None else None
    if replays is None:
        return key
    r = e.record()
    return {**key, "tokens": list(r.tokens) if replays == "all" or r.status == "ok" else []}
