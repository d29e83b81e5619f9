"""Spawns workers, enforces timeouts, journals every event as it arrives.

Every event a worker streams is appended to the journal (JSON lines beside the run log) and
flushed before anything else happens, so a crash of the parent loses nothing that was
measured. A worker that segfaults, hangs past the timeout or is killed by the OS becomes a
recorded failure and the run goes on. On Ctrl-C / SIGTERM the journal ends with an
``interrupted`` event and an incomplete ``run_end``; the later stages build and save the run
log from it (macprof/session.py). A signal is handled once (macprof/run/signals.py): a second
Ctrl-C cannot cut the journaling of the first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import msgspec
import psutil

import macprof.cases
from macprof.phases import REGISTRY
from macprof.collect import facts, resolve, telemetry
from macprof.collect.system import utc_now
from macprof.config import ModelSpec, settings_dict
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.measure import fit
from macprof.model.log import Machine
from macprof.model.phases import Failure, PlannedCase
from macprof.model.records import ABSENT
from macprof.run import distributed, resume, signals, watch
from macprof.run.job import WorkerJob
from macprof.run.journal import Journal
from macprof.run.phases import planned_requests
from macprof.run.phases.api import Parents, plan_json
from macprof.run.progress import Display, as_display
from macprof.run.sampling import TelemetrySampler
from macprof.run.watch import WorkerResult


class Runner:
    """Runs every model's phases in worker processes and journals every event; returns the
    journal's events (building and saving the run log from them is the later stages' job).
    A journal that already holds events (``--resume``) is continued: only what it lacks is
    measured (macprof/run/resume.py)."""

    def __init__(self, models: tuple[ModelSpec, ...], journal: Journal, progress: Display | None,
                 parents: Parents, python: str = sys.executable) -> None:
        self.models = models
        self.journal = journal
        self.progress = as_display(progress)
        self.python = python
        self._proc: subprocess.Popen | None = None
        self._telemetry: telemetry.Source | None = None  # opened with the first worker, closed at the end
        # the parent side of each phase asked for (run/phases/api.py): made here, a bad input stops
        # the run in one line before any worker waits on it; what each prepared, per model
        self.parents = parents
        self._prepared: dict[str, dict[str, Any]] = {}

    @property
    def events(self) -> list[ev.Event]:  # run/phases/api.py Host: the journal so far
        return self.journal.events

    def note(self, line: str) -> None:  # Host: a line of the progress display
        self.progress.note(line)

    def run_worker(self, model: ModelSpec, phases: list[str]) -> None:  # Host: a worker a parent needs first
        self._worker(model, phases, self.journal)

    def _source(self) -> telemetry.Source:
        if self._telemetry is None:
            self._telemetry = telemetry.open_source()
        return self._telemetry

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> list[ev.Event]:
        journal = self.journal
        try:
            complete = self._measure(journal)
            # from here on a signal is recorded, not raised: the run's end is journaled whole
            if not complete:
                self._kill_worker()
                journal.write(ev.Interrupted(utc=utc_now()))
                self.progress.note("interrupted: writing the run log from what was measured")
            journal.write(ev.RunEnd(utc=utc_now(), complete=complete, memory=facts.system_memory()))
            self.parents.close(complete)
        except BaseException:  # e.g. the disk filled: no worker outlives the run
            self._kill_worker()
            raise
        finally:
            journal.close()
            if self._telemetry is not None:
                self._telemetry.close()
        return journal.events

    def _measure(self, journal: Journal) -> bool:
        """Every model measured: True; Ctrl-C or SIGTERM: False, the guard then disarmed."""
        with signals.guard():
            try:
                try:
                    self._models(journal)
                finally:
                    signals.disarm()
            except (KeyboardInterrupt, signals.Interrupted):
                if not journal.events:  # before run_start: nothing to write a log from
                    raise
                return False
        return True

    def _models(self, journal: Journal) -> None:
        journaled = list(journal.events)
        if not journaled:
            self.progress.note("reading machine facts; measuring memory bandwidth (once a day)")
            journal.write(facts.run_start_event().replace(models=resume.plan_of(self.models)))
        pasts = {m.name: resume.past(journaled, m.name) for m in self.models}
        self.progress.plan(sum(_units_left(m, pasts[m.name]) for m in self.models))
        units = 0  # planned units of the models measured so far
        for model in self.parents.order():  # as the phases' parents order them (a reference first)
            past = pasts[model.name]
            if past.finished:
                self.progress.note(f"{model.name}: already measured (resumed)")
                continue
            self._run_model(model, journal, past if past.measuring else None)
            units += _units_left(model, past)
            self.progress.reach(units)  # what a failure or a refusal left unrun

    def _run_model(self, model: ModelSpec, journal: Journal, past: resume.ModelPast | None) -> None:
        if past is None:
            opened = self._open_model(model, journal)
            if opened is None:
                return  # refused
            plan, refused = opened
            past = resume.ModelPast(phases_done=refused)
        else:
            self.progress.note(f"{model.name}: measuring what the journal lacks (resumed)")
            self._prepared[model.name] = self.parents.journaled(model, past.prepared)
            if past.prepared is None:  # a journal from before the plan recorded it: prepared again, refusals too
                for phase, why in self.parents.prepare(model)[1].items():
                    if phase not in past.phases_done:
                        self._refuse(model, journal, phase, why)
                        past.phases_done.add(phase)
            plan = {phase: past.cases_left(phase, cases) for phase, cases in macprof.cases.plan(model.settings).items()}
        self._trials(model, journal, past)
        self._phases(model, journal, plan, past)
        journal.write(ev.ModelEnd(model=model.name, memory=facts.system_memory()))

    def _open_model(self, model: ModelSpec, journal: Journal) -> tuple[dict[str, list[dict]], set[str]] | None:
        """Prepare each phase's part and journal the model's identity and plan; refuse it (None),
        or the phases (returned with the plan) and cases it cannot run."""
        s = model.settings
        self.progress.note(f"{model.name}: identifying ({model.engine}, {model.path.name})")
        prepared, refused = self.parents.prepare(model)
        self._prepared[model.name] = prepared
        try:  # what the run reads besides the model, recorded once: a resume refuses a change (run/resume.py)
            inputs: list[dict] | None = self.parents.inputs(model, prepared)
        except (MacprofError, OSError):
            inputs = None  # the phase that reads it records why it cannot
        try:
            start = facts.model_start_event(model, inputs=inputs)
        except OSError as exc:  # vanished or unreadable since the config was read
            start = facts.model_start_event(model, files_error=f"{exc.filename or model.path}: {exc.strerror}",
                                            inputs=inputs)
        journal.write(start)
        plan = macprof.cases.plan(s)
        if plan or self.parents.prepares(model):  # every case, refused ones included: the run log lists them all
            journal.write(ev.Plan(model=model.name, cases={phase: tuple(PlannedCase.from_json(c) for c in cases)
                                                           for phase, cases in plan.items()},
                                  prepared=plan_json(prepared) if self.parents.prepares(model) else ABSENT))
        # A file that is plainly not a model (wrong magic, cut header, no config.json, ...) is
        # refused before any worker loads it: one clear reason instead of an engine's crash.
        context = (start.shape or {}).get("context_length")
        refusal = start.files_error or (None if model.endpoint else start.shape_error) or context_refusal(model, context)
        # a sharded model is there because it does not fit one machine: each rank holds its share;
        # a server holds its model, not macprof
        if refusal is None and not s.force and s.distributed is None and model.endpoint is None:
            run_start = next((e for e in journal.events if isinstance(e, ev.RunStart)), None)
            refusal = memory_refusal(model, run_start.machine if run_start else None)
        if refusal is None and s.distributed is not None:  # backend, layout, hosts: before any rank starts
            self.progress.note(f"{model.name}: checking the {s.distributed.backend} backend and {len(s.distributed.hosts)} hosts")
            refusal = distributed.preflight(self.python, model)
        if refusal:
            journal.write(ev.Failure.of(Failure(phase=None, status="refused", reason=refusal), model=model.name))
            self.progress.note(f"{model.name}: skipped: {refusal}")
            journal.write(ev.ModelEnd(model=model.name, memory=facts.system_memory()))
            return None
        for phase, why in refused.items():  # a phase its parent refused (what it needs is missing): the others go on
            self._refuse(model, journal, phase, why)
        for phase, cases in plan.items():
            for case in list(cases):
                if context and macprof.cases.tokens_per_sequence(case) > context:  # this case only: the others run
                    cases.remove(case)
                    journal.write(ev.Failure.of(Failure(
                        phase=phase, case=case["id"], status="refused",
                        reason=f"{model.path}: case {case['id']} needs {macprof.cases.tokens_per_sequence(case)} tokens of "
                               f"context per sequence; the model holds {context}"), model=model.name))
        return plan, set(refused)

    def _refuse(self, model: ModelSpec, journal: Journal, phase: str, why: str) -> None:
        """A phase refused before any worker ran it; a resumed run reads it as settled (run/resume.py)."""
        journal.write(ev.Failure.of(Failure(phase=phase, status="refused", reason=why), model=model.name))

    def _trials(self, model: ModelSpec, journal: Journal, past: resume.ModelPast) -> None:
        """The phases that run a fresh worker per trial (macprof/phases.py ``trials``), before the others."""
        s = model.settings
        for name in s.phases:
            phase = REGISTRY[name]
            if phase.trials is None or name in past.phases_done:
                continue
            if model.endpoint is not None and phase.refusal:
                self._refuse(model, journal, name, phase.refusal)
                continue
            side, trials = self.parents.of(name), phase.trials(s)
            for trial in range(trials):
                if trial in past.trials_done.get(name, set()):
                    continue
                if s.delay > 0:
                    time.sleep(s.delay)
                event, said = side.before_trial(model, trial) if side is not None else (None, "")
                if event is not None:
                    journal.write(event.replace(model=model.name))
                self.progress.note(f"{model.name}: {name} trial {trial + 1}/{trials}" + (f" ({said})" if said else ""))
                self._worker(model, [name], journal, trial=trial)

    def _phases(self, model: ModelSpec, journal: Journal, plan: dict[str, list[dict]],
                past: resume.ModelPast) -> None:
        s = model.settings
        if past.load_failed:
            return  # as in the run itself: a model that did not load is not tried again
        remaining = [p for p in s.phases if REGISTRY[p].trials is None and p not in past.phases_done
                     and (p not in plan or plan[p])]
        for refused in [p for p in remaining if model.endpoint is not None and REGISTRY[p].refusal]:
            remaining.remove(refused)
            self._refuse(model, journal, refused, REGISTRY[refused].refusal or "")
        prepared = self._prepared.get(model.name, {})
        attempts, done = 0, past.requests
        # every worker after a failure settles a case, a phase, or an item its parent records cut
        bound = len(s.phases) + sum(len(c) for c in plan.values()) + sum(
            side.budget(model, prepared.get(p)) for p in remaining if (side := self.parents.of(p)) is not None)
        while remaining and attempts < bound:
            attempts += 1
            result = self._worker(model, remaining, journal, cases=plan, done=done)
            remaining = [p for p in remaining if p not in result.phases_done]
            if not result.failure or not result.loaded:
                break
            if result.goes_on:  # the phase recorded the request cut and goes on after it, as a resumed run would
                done = resume.past(journal.events, model.name).requests
                continue
            phase, case = result.failure.phase, result.failure.case
            if phase in plan and case is not None:  # a sweep goes on from the case after the failed one
                ids = [c["id"] for c in plan[phase]]
                plan[phase] = plan[phase][ids.index(case) + 1:] if case in ids else []
                if plan[phase]:
                    continue
            if phase in remaining:
                remaining.remove(phase)  # that phase failed; go on with the next

    # -- one worker --------------------------------------------------------------------------
    def _worker(self, model: ModelSpec, phases: list[str], journal: Journal, trial: int = 0,
                cases: dict | None = None, done: list[dict] | None = None) -> WorkerResult:
        s = model.settings
        cases = cases or {}
        # one sequence's context: the longest request of the phases this worker runs (batch
        # cases get a context of their own for the batch, but check it one sequence at a time
        # in this one: a worker that runs only the batch phase, after a failure or a resume,
        # needs it too)
        need = [REGISTRY[p].context(s, cases.get(p, [])) for p in phases]  # each phase's own (macprof/phases.py)
        job = WorkerJob(name=model.name, engine=model.engine, path=str(model.path), phases=phases,
                        settings=settings_dict(s), n_ctx=max(need) + macprof.cases.CONTEXT_MARGIN, trial=trial,
                        cases=cases, done=done or [], endpoint=_endpoint_job(model, s.timeout),
                        # the idle wait before each phase gives the power baseline: only where power is read
                        idle_baseline_s=telemetry.IDLE_BASELINE_S if self._source().has_power else 0.0,
                        prepared=self._jobs(model, phases))
        worker_id = f"{model.name}:{'+'.join(phases)}:{trial}:{time.time_ns()}"
        # a trial's sampler starts before the spawn: its energy runs from spawn to ready
        sampler = TelemetrySampler(self._source(), from_spawn=any(REGISTRY[p].trials for p in phases))
        proc, stderr, t_spawn = watch.spawn(self.python, job)
        self._proc = proc
        journal.write(ev.WorkerSpawn(model=model.name, worker=worker_id, phases=tuple(phases), trial=trial, t_spawn=t_spawn,
                                     pid=proc.pid))
        state = watch.watch(proc, s.timeout, lambda e: journal.write(e.replace(model=model.name, worker=worker_id)),
                            lambda e: self.progress.advance(_request_line(model.name, e, s)), self._kill_worker,
                            sampler, rss_pid=_server_pid(model))
        rc = watch.wait(proc)
        self._proc = None
        journaled = watch.failure_record(model, worker_id, state, rc, stderr)
        recorded = journaled.record() if journaled else None
        goes_on = False
        if journaled and recorded:
            journal.write(journaled)
            self.progress.note(f"{model.name}: FAILED in {recorded.phase}: {recorded.reason}")
            cut = self._cut_record(model, journaled, state)
            if cut is not None:
                journal.write(cut.replace(model=model.name, worker=worker_id))
                self.progress.note(f"{model.name}: {recorded.phase} goes on after {recorded.case}")
                goes_on = True
            elif self._between_items(recorded, state):
                self.progress.note(f"{model.name}: {recorded.phase} goes on after what it recorded")
                goes_on = True
        stderr.close()
        return WorkerResult(phases_done=state.done_phases, failure=recorded, loaded=state.loaded, goes_on=goes_on)

    def _jobs(self, model: ModelSpec, phases: list[str]) -> dict[str, msgspec.Raw]:
        """Each phase's part of a worker's job from its parent (run/phases/api.py ``job``), as JSON."""
        prepared = self._prepared.get(model.name, {})
        out: dict[str, msgspec.Raw] = {}
        for phase in phases:
            side = self.parents.of(phase)
            part = side.job(model, prepared.get(phase), self) if side is not None else None
            if part is not None:
                out[phase] = msgspec.Raw(msgspec.json.encode(part))
        return out

    def _cut_record(self, model: ModelSpec, failure: ev.Failure, state) -> ev.Event | None:
        """The parent's record of the request a timeout or a crash cut, where its phase goes on
        after one (run/phases/api.py Parent.cut); None where the phase ends there."""
        request, phase = state.request, failure.record().phase or ""
        side = self.parents.of(phase)
        if side is None or not side.cuts or request is None or request.phase != state.phase or not state.loaded:
            return None
        return side.cut(model.settings, self._prepared.get(model.name, {}).get(phase), failure, request, state.t_end)

    def _between_items(self, failure: Failure, state) -> bool:
        """A worker killed or dead between two items of a phase that goes on after a cut (no item
        was announced and not yet recorded: nothing to cut, and none recorded to blame), after it
        recorded at least one of them: the phase goes on from the journal, as a resumed run would.
        Without one recorded, the same death would come again: the phase ends there."""
        side = self.parents.of(failure.phase or "")
        return (side is not None and side.cuts and state.request is None and state.loaded
                and failure.status in ("timeout", "crashed") and state.phase == failure.phase and state.items_ended > 0)

    def _kill_worker(self) -> None:
        proc = self._proc
        if proc and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            try:
                proc.wait(timeout=10)  # reaped: no zombie, no orphan
            except subprocess.TimeoutExpired:
                pass


def _server_pid(model: ModelSpec) -> int | None:
    """Whose RSS a model's phases peak at: a server macprof started (its pid), none where the
    server is someone else's (-1), else the worker's (None)."""
    if model.endpoint is None:
        return None
    return int((model.endpoint.served or {}).get("pid") or -1)


def context_refusal(model: ModelSpec, ctx: int | None) -> str | None:
    """Settings that make no sense for this model: more tokens than its context holds (the
    sweep phases are checked case by case instead)."""
    need = model.settings.prompt_tokens + model.settings.gen_tokens
    if ctx and need > ctx and set(model.settings.phases) - set(macprof.cases.SWEEP_PHASES):
        return (f"{model.path}: prompt_tokens + gen_tokens = {need} exceeds the model's context length "
                f"of {ctx} tokens")
    return None


def memory_refusal(model: ModelSpec, machine: Machine | None, platform: str = sys.platform) -> str | None:
    """A reason to refuse loading when the model plainly cannot fit, said with the limit's source."""
    try:
        size = sum(f.stat().st_size for f in model.files)
    except OSError:
        return None
    limit, what = memory_limit(model.engine, machine, platform)
    return fit.memory_refusal(size, limit, what)


def memory_limit(engine: str, machine: Machine | None, platform: str = sys.platform) -> tuple[int | None, str]:
    """The limit a model must fit under on this machine, from its recorded facts (fit.memory_limit)."""
    return fit.memory_limit(engine, available=psutil.virtual_memory().available,
                            working_set=machine.gpu_working_set_bytes if machine else None,
                            working_set_source=((machine.sources or {}) if machine else {}).get("gpu_working_set_bytes"),
                            memory_bytes=machine.memory_bytes if machine else None, platform=platform)


def _units_left(model: ModelSpec, past: resume.ModelPast) -> int:
    """The progress units (request events) a model still has to measure."""
    if past.finished:
        return 0
    s = model.settings
    trials = sum(_trial_units(s, p, len(done)) for p, done in past.trials_done.items() if p in s.phases)
    return max(0, planned_requests(s) - past.units - trials)


def _trial_units(s, phase: str, done: int) -> int:
    """The request events ``done`` trials of ``phase`` emitted (its count over its trials, each alike)."""
    count = REGISTRY[phase].trials
    return done * REGISTRY[phase].requests(s, []) // max(1, count(s)) if count is not None else 0


def _request_line(name: str, e: ev.Request, s) -> str:
    phase = REGISTRY.get(e.phase)
    what = e.kind if e.kind in ("warmup", "first", "second") else \
        f"{e.index + 1}/{phase.line_total(s, e.case) if phase else s.reps}"
    mode = f" {e.mode}" if e.mode else ""
    case = f" {e.case}" if e.case else ""
    return f"{name}: {e.phase}{case}{mode} {what}: {getattr(e, 'status')}"  # the field, not a record made of it


def _endpoint_job(model: ModelSpec, timeout: float) -> dict | None:
    """The server's part of a worker's job; where its model file is not given, the local model
    its id names, if any (resolved here: an engine reaches no model store)."""
    if model.endpoint is None:
        return None
    job = model.endpoint.job(timeout)
    if not job["file"]:
        job["resolved"] = resolve.served_model(model.endpoint.model, model.endpoint.api)
    return job
