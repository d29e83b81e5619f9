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

import psutil

import macprof.cases
from macprof.phases import REGISTRY, load
from macprof.collect import facts, residency, resolve, telemetry
from macprof.collect.system import utc_now
from macprof.config import ModelSpec, settings_dict
from macprof.config.settings import SPECS
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.measure import fit
from macprof.model.log import Machine
from macprof.model.phases import DropCache, PlannedCase, Residency
from macprof.run import chat, distributed, qualitytext, reference, resume, signals, taskfile, watch
from macprof.run.job import QualityJob, WorkerJob
from macprof.run.journal import Journal
from macprof.run.phases import planned_requests
from macprof.run.progress import Display, as_display
from macprof.run.sampling import TelemetrySampler
from macprof.run.watch import WorkerResult



class Runner:
    """Runs every model's phases in worker processes and journals every event; returns the
    journal's events (building and saving the run log from them is the later stages' job).
    A journal that already holds events (``--resume``) is continued: only what it lacks is
    measured (macprof/run/resume.py)."""

    def __init__(self, models: tuple[ModelSpec, ...], journal: Journal, progress: Display | None,
                 python: str = sys.executable) -> None:
        self.models = models
        self.journal = journal
        self.progress = as_display(progress)
        self.python = python
        self._proc: subprocess.Popen | None = None
        self._telemetry: telemetry.Source | None = None  # opened with the first worker, closed at the end
        self._reference = reference.choose(models)  # the quality phase's; a bad --reference stops here
        for text in sorted({m.settings.text for m in models if "quality" in m.settings.phases and m.settings.text}):
            qualitytext.check(text)  # and a --text that is a FIFO, a device or too large: before any worker waits on it
        for path in sorted({m.settings.chat_template for m in models  # read by every phase that renders
                            if set(SPECS["chat_template"].phases) & set(m.settings.phases) and m.settings.chat_template}):
            chat.read_template(path)  # a --chat-template that cannot be read or compiled: one line, before any worker
        # a task file that cannot run at all: one line, before any worker
        self._tasks = {tasks: len(taskfile.load(tasks or None).tasks)
                       for tasks in sorted({m.settings.tasks or "" for m in models if "tasks" in m.settings.phases})}
        self._store = reference.store_path(journal.path, self._reference) if self._reference else None

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
            if complete and self._store:  # the reference's distributions served this run only
                reference.remove_store(self._store)
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
        for model in reference.ordered(self.models, self._reference):  # the reference scores first
            past = pasts[model.name]
            if past.finished:
                self.progress.note(f"{model.name}: already measured (resumed)")
                continue
            self._run_model(model, journal, past if past.measuring else None)
            units += _units_left(model, past)
            self.progress.reach(units)  # what a failure or a refusal left unrun

    def _run_model(self, model: ModelSpec, journal: Journal, past: resume.ModelPast | None) -> None:
        if past is None:
            plan = self._open_model(model, journal)
            if plan is None:
                return  # refused
            past = resume.ModelPast()
        else:
            self.progress.note(f"{model.name}: measuring what the journal lacks (resumed)")
            plan = {phase: past.cases_left(phase, cases) for phase, cases in macprof.cases.plan(model.settings).items()}
        self._cold(model, journal, past)
        self._phases(model, journal, plan, past)
        journal.write(ev.ModelEnd(model=model.name, memory=facts.system_memory()))

    def _open_model(self, model: ModelSpec, journal: Journal) -> dict[str, list[dict]] | None:
        """Journal the model's identity and plan; refuse it (None) or the cases it cannot hold."""
        s = model.settings
        self.progress.note(f"{model.name}: identifying ({model.engine}, {model.path.name})")
        try:
            start = facts.model_start_event(model)
        except OSError as exc:  # vanished or unreadable since the config was read
            start = facts.model_start_event(model, files_error=f"{exc.filename or model.path}: {exc.strerror}")
        journal.write(start)
        plan = macprof.cases.plan(s)
        if plan:  # every case, refused ones included: the run log lists them all
            journal.write(ev.Plan(model=model.name, cases={phase: tuple(PlannedCase.from_json(c) for c in cases)
                                                           for phase, cases in plan.items()}))
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
            journal.write(ev.Failure(model=model.name, phase=None, status="refused", reason=refusal))
            self.progress.note(f"{model.name}: skipped: {refusal}")
            journal.write(ev.ModelEnd(model=model.name, memory=facts.system_memory()))
            return None
        for phase, cases in plan.items():
            for case in list(cases):
                if context and macprof.cases.tokens_per_sequence(case) > context:  # this case only: the others run
                    cases.remove(case)
                    journal.write(ev.Failure(
                        model=model.name, phase=phase, case=case["id"], status="refused",
                        reason=f"{model.path}: case {case['id']} needs {macprof.cases.tokens_per_sequence(case)} tokens of "
                               f"context per sequence; the model holds {context}"))
        return plan

    def _cold(self, model: ModelSpec, journal: Journal, past: resume.ModelPast) -> None:
        s = model.settings
        if "cold" not in s.phases:
            return
        if model.endpoint is not None:
            journal.write(ev.Failure(model=model.name, phase="cold", status="refused", reason=ENDPOINT_COLD))
            return
        for trial in range(s.cold_trials):
            if trial in past.cold_done:
                continue
            if s.delay > 0:
                time.sleep(s.delay)
            drop = residency.drop_cache(model.files) if s.drop_cache else None
            before = residency.residency(model.files)
            journal.write(ev.ColdTrial(model=model.name, index=trial, drop_cache=DropCache(**drop) if drop else None,
                                       residency=Residency(**before)))
            self.progress.note(f"{model.name}: cold trial {trial + 1}/{s.cold_trials} ({before['label']})")
            self._worker(model, ["cold"], journal, trial=trial)

    def _phases(self, model: ModelSpec, journal: Journal, plan: dict[str, list[dict]],
                past: resume.ModelPast) -> None:
        s = model.settings
        if past.load_failed:
            return  # as in the run itself: a model that did not load is not tried again
        remaining = [p for p in s.phases if p != "cold" and p not in past.phases_done and (p not in plan or plan[p])]
        if model.endpoint is not None and "depth" in remaining:
            remaining.remove("depth")
            journal.write(ev.Failure(model=model.name, phase="depth", status="refused", reason=ENDPOINT_DEPTH))
        if "speculative" in remaining:
            try:
                _draft_job(model, 0)
            except MacprofError as exc:  # no draft, or one that resolves to nothing: the other phases go on
                remaining.remove("speculative")
                journal.write(ev.Failure(model=model.name, phase="speculative", status="refused", reason=str(exc)))
        attempts, done = 0, past.requests
        # every worker after a failure settles a case, a phase, or a task (each cut task is recorded)
        bound = len(s.phases) + sum(len(c) for c in plan.values()) + self._tasks.get(s.tasks or "", 0)
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
                cases: dict | None = None, done: list[dict] | None = None, rescore: str | None = None) -> WorkerResult:
        s = model.settings
        cases = cases or {}
        # one sequence's context: the longest request of the phases this worker runs (batch
        # cases get a context of their own for the batch, but check it one sequence at a time
        # in this one: a worker that runs only the batch phase, after a failure or a resume,
        # needs it too)
        need = [REGISTRY[p].context(s, cases.get(p, [])) for p in phases]  # each phase's own (macprof/phases.py)
        quality = QualityJob()
        if "quality" in phases:
            self._rescore_reference(model, journal)
            quality = reference.job(model, self._reference, self._store, journal.events, rescore)
        job = WorkerJob(name=model.name, engine=model.engine, path=str(model.path), phases=phases,
                        settings=settings_dict(s), n_ctx=max(need) + macprof.cases.CONTEXT_MARGIN, trial=trial,
                        cases=cases, done=done or [], endpoint=_endpoint_job(model, s.timeout),
                        # the idle wait before each phase gives the power baseline: only where power is read
                        idle_baseline_s=telemetry.IDLE_BASELINE_S if self._source().has_power else 0.0,
                        quality=quality, draft=_draft_job(model, max(need) + macprof.cases.CONTEXT_MARGIN)
                        if "speculative" in phases else {})
        worker_id = f"{model.name}:{'+'.join(phases)}:{trial}:{time.time_ns()}"
        # a cold trial's sampler starts before the spawn: its energy runs from spawn to ready
        sampler = TelemetrySampler(self._source(), from_spawn=phases == ["cold"])
        proc, stderr, t_spawn = watch.spawn(self.python, job)
        self._proc = proc
        journal.write(ev.WorkerSpawn(model=model.name, worker=worker_id, phases=tuple(phases), trial=trial, t_spawn=t_spawn,
                                     pid=proc.pid))
        state = watch.watch(proc, s.timeout, lambda e: journal.write(e.replace(model=model.name, worker=worker_id)),
                            lambda e: self.progress.advance(_request_line(model.name, e, s)), self._kill_worker,
                            sampler, rss_pid=_server_pid(model))
        rc = watch.wait(proc)
        self._proc = None
        recorded = watch.failure_record(model, worker_id, state, rc, stderr)
        goes_on = False
        if recorded:
            journal.write(recorded)
            self.progress.note(f"{model.name}: FAILED in {recorded.phase}: {recorded.reason}")
            cut = _cut_record(s, recorded, state)
            if cut is not None:
                journal.write(cut.replace(model=model.name, worker=worker_id))
                self.progress.note(f"{model.name}: {recorded.phase} goes on after {recorded.case}")
                goes_on = True
            elif _between_items(recorded, state):
                self.progress.note(f"{model.name}: {recorded.phase} goes on after what it recorded")
                goes_on = True
        stderr.close()
        return WorkerResult(phases_done=state.done_phases, failure=recorded, loaded=state.loaded, goes_on=goes_on)

    def _rescore_reference(self, model: ModelSpec, journal: Journal) -> None:
        """Before a model is held to the reference's stored log-probabilities: they must be the
        bytes the reference journaled (reference.store_changed); else the reference scores again
        first, and its quality phase records why."""
        if model.name == self._reference:
            return
        why = reference.store_changed(self._store, journal.events, self._reference)
        ref = next((m for m in self.models if m.name == self._reference), None)
        if why is None or ref is None or self._store is None:
            return
        self.progress.note(f"{ref.name}: {why}; scoring it again before {model.name}")
        reference.remove_store(self._store)
        self._worker(ref, ["quality"], journal, rescore=why)

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


ENDPOINT_COLD = ("cold: a server's model cannot be unloaded over its API; a cold start of a server is its start-up "
                 "(--serve records when it answered)")
ENDPOINT_DEPTH = "depth: a server's cache cannot be filled and cut back to a depth over its API"


def _cut_record(s, failure: ev.Failure, state) -> ev.Event | None:
    """The parent's record of the request a timeout or a crash cut, where its phase goes on
    after one (macprof/phases.py Phase.cut); None where the phase ends there."""
    request = state.request
    phase = REGISTRY.get(failure.phase or "")
    if phase is None or phase.cut is None or request is None or request.phase != state.phase or not state.loaded:
        return None
    return load(phase.cut)(s, failure, request, state.t_end)


def _between_items(failure: ev.Failure, state) -> bool:
    """A worker killed or dead between two items of a phase that goes on after a cut (no item
    was announced and not yet recorded: nothing to cut, and none recorded to blame), after it
    recorded at least one of them: the phase goes on from the journal, as a resumed run would.
    Without one recorded, the same death would come again: the phase ends there."""
    phase = REGISTRY.get(failure.phase or "")
    return (phase is not None and phase.cut is not None and state.request is None and state.loaded
            and failure.status in ("timeout", "crashed") and state.phase == failure.phase and state.items_ended > 0)


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
    done = [r for r in past.requests if r["mode"] != "check" and r["kind"] != "task"]  # a settled task is no request
    return max(0, planned_requests(model.settings) - len(done) - 2 * len(past.cold_done))


def _request_line(name: str, e: ev.Request, s) -> str:
    total = s.cold_trials if e.phase == "cold" else s.turns if e.phase == "conversation" else s.reps
    if e.phase == "concurrency":  # a level's own request count (macprof/run/phases/serving.py)
        from macprof.run.phases.serving import load_cases

        total = next((c["requests"] for c in load_cases(s) if c["id"] == e.case), total)
    what = e.kind if e.kind in ("warmup", "first", "second") else f"{e.index + 1}/{total}"
    mode = f" {e.mode}" if e.mode else ""
    case = f" {e.case}" if e.case else ""
    return f"{name}: {e.phase}{case}{mode} {what}: {e.status}"


def _draft_job(model: ModelSpec, n_ctx: int) -> dict:
    """The speculative phase's draft, resolved here as a MODEL argument is (an engine reaches no
    model store): its engine the target's where that reads the draft's format (a fake GGUF target
    drafts with a fake GGUF), else the format's own (an MLX draft for a GGUF target)."""
    from macprof import engines

    s = model.settings
    if not s.draft:
        raise MacprofError("speculative: no draft given (--draft MODEL or --draft ngram)")
    if s.draft.strip() == "ngram":
        return {"kind": "ngram", "ref": "ngram", "n": s.ngram}
    from macprof.collect import modelinfo

    r = resolve.resolve(s.draft)
    engine = model.engine if engines.MODEL_FORMAT.get(model.engine) == r.format else resolve.ENGINE_OF[r.format]
    try:  # the draft's bytes per token, for the round's ceiling (analyse/ceilings.py)
        shape = modelinfo.inspect(r.path, s.kv_type).to_dict()
    except MacprofError:
        shape = None
    return {"kind": "model", "ref": s.draft, "engine": engine, "path": str(r.path), "n_ctx": n_ctx or None,
            "target": model.name, "shape": shape}


def _endpoint_job(model: ModelSpec, timeout: float) -> dict | None:
    """The server's part of a worker's job; where its model file is not given, the local model
    its id names, if any (resolved here: an engine reaches no model store)."""
    if model.endpoint is None:
        return None
    job = model.endpoint.job(timeout)
    if not job["file"]:
        job["resolved"] = resolve.served_model(model.endpoint.model, model.endpoint.api)
    return job
