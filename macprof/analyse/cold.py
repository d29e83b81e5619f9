"""The cold phase's record from its journal events: each trial's fresh worker, from spawn to
ready, split into interpreter, import, load and tokenizer from their timestamps (pure)."""

from __future__ import annotations

from macprof.analyse.energy import cold_trial_energy, idle_baseline, telemetry_of
from macprof.analyse.requests import phase_failures, request_record, summarized
from macprof.measure.timeline import span
from macprof.model import events as ev
from macprof.model.phases import ColdPhase, ColdSummary, ColdTrial, Failure, Summary
from macprof.model.records import ABSENT


INTERRUPTED = "the run was interrupted while this trial was measured; a resumed run measures it again"


def build_cold(events: list[ev.Event], workers: dict[str, list[ev.Event]], failures: list[Failure]) -> ColdPhase:
    base = idle_baseline(telemetry_of(events))
    trials = [_cold_trial(e, worker, failures, base, again) for e, worker, again in _cold_attempts(events, workers)]
    ok = [t for t in trials if t.status == "ok"]
    # a trial the run's interruption cut short is listed as such (what it measured is kept) and
    # is no failure of the engine; nor is a failed one measured again after a resume and ok
    failed = [t for t in trials if t.status == "failed" and t.index not in {o.index for o in ok}]

    def summary(values: list[float | None]) -> Summary:
        return summarized(values, failures=len(failed))

    return ColdPhase(trials=tuple(trials), failures=tuple(phase_failures(failures, "cold")),
                     summary=ColdSummary(interpreter_s=summary([t.interpreter_s for t in ok]),
                                         import_s=summary([t.import_s for t in ok]),
                                         model_load_s=summary([t.model_load_s for t in ok]),
                                         tokenizer_load_s=summary([t.tokenizer_load_s for t in ok]),
                                         ready_s=summary([t.ready_s for t in ok]),
                                         first_request_extra_s=summary([t.first_request_extra_s for t in ok]),
                                         time_to_first_token_s=summary([t.time_to_first_token_s for t in ok])))


def _cold_attempts(events: list[ev.Event], workers: dict[str, list[ev.Event]]):
    """Each cold_trial event with the events of the worker spawned for it: the cold worker of
    that trial started before the next cold_trial event. A run interrupted between the two
    leaves a trial with no worker, which a resumed run tries again: that later worker is the
    later trial's, never both."""
    for k, e in enumerate(events):
        if isinstance(e, ev.ColdTrial):
            spawn = None
            for x in events[k + 1:]:
                if isinstance(x, ev.ColdTrial):
                    break
                if isinstance(x, ev.WorkerSpawn) and tuple(x.phases) == ("cold",) and x.trial == e.index:
                    spawn = x
                    break
            again = any(isinstance(x, ev.ColdTrial) and x.index == e.index for x in events[k + 1:])
            yield e, workers.get(spawn.worker or "") if spawn else None, again


def _cold_trial(trial: ev.ColdTrial, w: list[ev.Event] | None, failures: list[Failure],
                base: tuple = (None, None), again: bool = False) -> ColdTrial:
    """One cold trial: the phases of its fresh worker's start-up from their timestamps; ``base``,
    the idle baseline its energy is set against and the phase it came from; ``again``: a later
    cold_trial event tries the same trial (a resumed run)."""
    if w is None or not isinstance(w[0], ev.WorkerSpawn):
        if again:  # the run ended before its worker started; the resumed run measured it
            return ColdTrial(index=trial.index, residency=trial.residency, drop_cache=trial.drop_cache,
                             status="interrupted", note=INTERRUPTED)
        return ColdTrial(index=trial.index, residency=trial.residency, drop_cache=trial.drop_cache, status="failed")
    spawn, started = w[0], next((e for e in w if isinstance(e, ev.Started)), None)
    loaded = next((e for e in w if isinstance(e, ev.Loaded)), None)
    reqs = {e.kind: request_record(e) for e in w if isinstance(e, ev.Request)}
    first, second = reqs.get("first"), reqs.get("second")
    t_main = started.t_main if started else None
    t_imported, t_model, t_tokenizer = (loaded.t_imported, loaded.t_model, loaded.t_tokenizer) if loaded else (None,) * 3
    # macprof's own start-up in the worker (reading its job, importing its records) is no part
    # of the engine's cold start: timed apart, and left out of ready_s (older journals lack it)
    t_import_start = loaded.t_import_start if loaded and loaded.t_import_start is not None else t_main
    harness = span(t_main, t_import_start)
    ready = span(spawn.t_spawn, t_tokenizer)
    if ready is not None and harness:
        ready -= harness
    # an engine that reads the vocabulary with the model has no tokenizer load of its own
    joint = bool(loaded and loaded.tokenizer_separate is False)
    fails = [f for f in failures if f.worker == spawn.worker]
    failed = bool(fails) or not (first and second and first.status == second.status == "ok")
    # no failure recorded and a request missing: the worker was still measuring when the run
    # ended (a signal, a SIGKILL of macprof); a resume measures that trial again
    cut = failed and not fails and not (first and second)
    return ColdTrial(
        index=trial.index, residency=trial.residency, drop_cache=trial.drop_cache,
        status="interrupted" if cut else "failed" if failed else "ok",
        interpreter_s=span(spawn.t_spawn, t_main), harness_s=harness if loaded and loaded.t_import_start else ABSENT,
        import_s=span(t_import_start, t_imported),
        model_load_s=span(t_imported, t_model), tokenizer_load_s=None if joint else span(t_model, t_tokenizer),
        ready_s=ready, first_request=first, second_request=second,
        first_request_extra_s=first.total_s - second.total_s
        if first and second and first.total_s is not None and second.total_s is not None else None,
        # spawn -> ready, then the first request's own TTFT: macprof's prompt preparation
        # between the two (prompt_build_s) is not the engine's cold start
        time_to_first_token_s=ready + first.ttft_s if first and first.ttft_s is not None and ready is not None else None,
        prompt_build_s=span(t_tokenizer, first.t0) if first and loaded else None,
        tokenizer_note="the engine reads the vocabulary with the model: tokenizer load is inside model_load_s"
        if joint else ABSENT,
        failure=(fails[0] if fails else None) if failed and not cut else ABSENT,
        note=INTERRUPTED if cut else ABSENT,
        # the windows ready_s adds up: spawn -> the worker's first line, the engine's import -> ready
        **cold_trial_energy(telemetry_of(w),
                                  [(spawn.t_spawn, t_main), (t_import_start, t_tokenizer)], base))
