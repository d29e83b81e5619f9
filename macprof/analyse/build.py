"""The run log built from the journal's events (pure: no I/O, no clock).

The journal is the source of truth: ``build`` turns its events into the run log, so a log
written at the end of a run, after Ctrl-C, or recovered from the journal of a killed run
(`macprof show JOURNAL`, `macprof run --resume JOURNAL`) come from the same code.
"""

from __future__ import annotations

from typing import Callable, Sequence

from macprof.analyse import energy as power
from macprof.analyse.serving import build_concurrency
from macprof.analyse.ceilings import ROOFLINE_DEFINITIONS, batch_prediction, batch_tradeoff, roofline_for
from macprof.cases import SWEEP_PHASES, mean_context, plan
from macprof.errors import MacprofError
from macprof.measure import stats
from macprof.measure.kvmodel import kv_bytes_read, layout_from_shape
from macprof.measure.timeline import DEFINITION_EXAMPLE, DEFINITIONS, derive
from macprof.model import events as ev
from macprof.model.definitions import NEAR_TIE_LOGITS
from macprof.model.log import Bandwidth, KvCache, ModelMemory, ModelResult, Phases, RunLog, RunMemory
from macprof.model.phases import (BatchCheck, Checks, Ceiling, ColdPhase, ColdSummary, ColdTrial, DepthFill, Failure, Itl,
                                  Metrics, OutputCheck, PhaseMemory, PlannedCase, PrefixPair, PrefixPhase, PrefixSummary,
                                  Request, Summary, Sweep, SweepCase, WarmPhase)
from macprof.model.records import ABSENT

Roof = Callable[[Metrics], Ceiling]  # a phase's summary -> its ceiling at the phase's context


# -- building the log (pure) -----------------------------------------------------------
def summarized(values: Sequence[float | None], failures: int = 0) -> Summary:
    return Summary(**stats.summarize(values, failures=failures))


def request_record(e: ev.Request) -> Request:
    """A raw request event plus the figures derived from its timestamps."""
    server = e.server or {}
    d = derive(e.t0, e.t_tokenized, e.token_times, e.computed_prompt_tokens or e.prompt_tokens or 0,
               server.get("chunk_tokens"), server.get("completion_tokens"))
    itl = sorted(d.itl_s)
    tags = {k: getattr(e, k) for k in ("case", "batch", "cached_tokens_before", "server") if e.has(k)}
    return Request(
        index=e.index, kind=e.kind, mode=e.mode, status=e.status, error=e.error, t0=e.t0, t_tokenized=e.t_tokenized,
        token_times=e.token_times, tokens=e.tokens, prompt_tokens=e.prompt_tokens, reused_tokens=e.reused_tokens,
        computed_prompt_tokens=e.computed_prompt_tokens, cached_tokens_after=e.cached_tokens_after,
        kv_cache_bytes=e.kv_cache_bytes, engine_memory=e.engine_memory, **tags, n_tokens=d.n_tokens,
        ttft_s=d.ttft_s, prefill_tok_s=d.prefill_tok_s, decode_tok_s=d.decode_tok_s, e2e_tok_s=d.e2e_tok_s,
        tokenize_s=d.tokenize_s, total_s=d.total_s,
        itl=Itl(mean=sum(itl) / len(itl), p50=stats.percentile(itl, 50), p95=stats.percentile(itl, 95),
                p99=stats.percentile(itl, 99), max=itl[-1]) if itl else None)


def summarize_requests(requests: Sequence[Request], failures: int = 0) -> Metrics:
    ok = [r for r in requests if r.status == "ok"]
    bad = len(requests) - len(ok) + failures
    itls = [(b - a) / 1e9 for r in ok for a, b in zip(r.token_times, r.token_times[1:])]
    return Metrics(ttft_s=summarized([r.ttft_s for r in ok], bad),
                   prefill_tok_s=summarized([r.prefill_tok_s for r in ok], bad),
                   decode_tok_s=summarized([r.decode_tok_s for r in ok], bad),
                   e2e_tok_s=summarized([r.e2e_tok_s for r in ok], bad), itl_s=summarized(itls, bad))


def _phase_failures(failures: list[Failure], phase: str) -> list[Failure]:
    return [f for f in failures if f.phase == phase]


def build(events: Sequence[ev.Event]) -> RunLog:
    start = next((e for e in events if isinstance(e, ev.RunStart)), None)
    if start is None:
        raise MacprofError("journal has no run_start event: not a macprof journal")
    end = next((e for e in reversed(events) if isinstance(e, ev.RunEnd)), None)
    order: list[str] = []
    by_model: dict[str, list[ev.Event]] = {}
    for e in events:
        if e.model is None:
            continue
        if isinstance(e, ev.ModelStart):  # a resumed run measures a partial model afresh
            if e.model not in order:
                order.append(e.model)
            by_model[e.model] = []
        by_model.setdefault(e.model, []).append(e)
    return RunLog(
        tool_version=start.tool_version, started_utc=start.utc, ended_utc=end.utc if end else None,
        complete=bool(end and end.complete), interrupted=any(isinstance(e, ev.Interrupted) for e in events),
        machine=start.machine, software=start.software,
        definitions={**DEFINITIONS, "worked_example": DEFINITION_EXAMPLE, "near_tie_logits": NEAR_TIE_LOGITS,
                     **ROOFLINE_DEFINITIONS, "energy": power.ENERGY_DEFINITIONS},
        bandwidth=start.bandwidth, memory=RunMemory(start=start.memory, end=end.memory if end else None),
        models=tuple(build_model(by_model[n], start.bandwidth) for n in order))


def build_model(events: list[ev.Event], bw: Bandwidth | None = None) -> ModelResult:
    """One model from its events, the first of which is its model_start."""
    head = events[0]
    assert isinstance(head, ev.ModelStart)
    failures = [Failure.from_json(e.to_json()) for e in events if isinstance(e, ev.Failure)]
    workers: dict[str, list[ev.Event]] = {}
    for e in events:
        if e.worker:
            workers.setdefault(e.worker, []).append(e)
    versions = next((e.versions for e in events if isinstance(e, ev.Loaded) and e.versions is not None), None)
    warm = [request_record(e) for e in events if isinstance(e, ev.Request) and e.phase == "warm"]
    return ModelResult(
        identity=head.identity, shape=head.shape, shape_error=head.shape_error, settings=head.settings,
        engine_versions=versions, phases=_phases(events, head, workers, failures, warm, bw),
        memory=_model_memory(events, head, [r for r in warm if r.kind == "measured"]),
        failures=tuple(failures), complete=any(isinstance(e, ev.ModelEnd) for e in events))


def _phases(events: list[ev.Event], head: ev.ModelStart, workers: dict[str, list[ev.Event]],
            failures: list[Failure], warm: list[Request], bw: Bandwidth | None) -> Phases:
    s, shape, file_bytes = head.settings, head.shape, head.identity.total_bytes
    context = mean_context(s.prompt_tokens, s.gen_tokens)

    def roof(summary: Metrics) -> Ceiling:
        return roofline_for(summary, shape, context, bw, file_bytes)

    phases: dict = {}
    if "cold" in s.phases:
        phases["cold"] = _build_cold(events, workers, failures)
    if "warm" in s.phases:
        phases["warm"] = _build_warm(events, warm, _phase_failures(failures, "warm"), roof)
    if "prefix" in s.phases:
        phases["prefix"] = _build_prefix(events, _phase_failures(failures, "prefix"), roof)
    if "concurrency" in s.phases:
        phases["concurrency"] = build_concurrency(events, _phase_failures(failures, "concurrency"), s, shape, bw, request_record)
    planned = _planned(events, head) if set(s.phases) & set(SWEEP_PHASES) else {}
    for phase in SWEEP_PHASES:
        if phase in s.phases:
            phases[phase] = _build_sweep(phase, planned.get(phase, ()), events, _phase_failures(failures, phase),
                                        shape, file_bytes, bw)
    return Phases(**phases)


def _planned(events: list[ev.Event], head: ev.ModelStart) -> dict[str, tuple[PlannedCase, ...]]:
    """The sweep plan the orchestrator journaled; recomputed from the settings for a journal
    written before that event existed."""
    journaled = next((e for e in events if isinstance(e, ev.Plan)), None)
    if journaled is not None:
        return journaled.cases
    return {phase: tuple(PlannedCase.from_json(c) for c in cases)
            for phase, cases in plan(head.settings.to_settings()).items()}


def _model_memory(events: list[ev.Event], head: ev.ModelStart, warm_measured: list[Request]) -> ModelMemory:
    kv_tok = (head.shape or {}).get("kv_bytes_per_token")
    context = head.settings.prompt_tokens + head.settings.gen_tokens
    # the cache held at the end: per layer kind as it is read (windows, recurrent state)
    held = kv_bytes_read(layout_from_shape(head.shape), context) if head.shape else None
    loaded = next((e for e in events if isinstance(e, ev.Loaded)), None)
    started = next((e for e in events if isinstance(e, ev.Started)), None)
    model_end = next((e for e in events if isinstance(e, ev.ModelEnd)), None)
    measured_kv = [r.kv_cache_bytes for r in warm_measured if r.kv_cache_bytes is not None]
    return ModelMemory(
        rss_before_load_bytes=started.rss_bytes if started else None,
        rss_after_load_bytes=loaded.rss_bytes if loaded else None,
        footprint_after_load_bytes=loaded.footprint_bytes if loaded and loaded.has("footprint_bytes") else ABSENT,
        engine_after_load=loaded.engine_memory if loaded else None,
        kv_cache=KvCache(
            bytes_per_token=kv_tok, context_tokens=context, computed_bytes=held or None,
            measured_bytes=max(measured_kv) if measured_kv else None,
            measured_note="llama.cpp: serialised sequence state; mlx: allocated K/V arrays (grown in 256-token steps)"),
        system_before=head.memory, system_after=model_end.memory if model_end else None)


def _build_warm(events: list[ev.Event], requests: list[Request], failures: list[Failure], roof: Roof) -> WarmPhase:
    measured = [r for r in requests if r.kind == "measured"]
    summary = summarize_requests(measured, len(failures))
    return _with_telemetry(WarmPhase(requests=tuple(requests), summary=summary, failures=tuple(failures),
                                     memory=_phase_memory(events, "warm"), roofline=roof(summary)),
                           events, "warm", measured)


def _with_telemetry(record, events: Sequence[ev.Event], phase: str, measured: Sequence[Request],
                    trend: bool = True):
    """The phase record with its telemetry (energy, baseline, throttling) where the journal has
    any; a journal from before telemetry leaves the key absent."""
    found = power.phase_telemetry([e for e in events if isinstance(e, ev.Telemetry) and e.phase == phase],
                                  sorted(measured, key=lambda r: r.t0), trend)
    return record if found is None else record.replace(telemetry=found)


def _build_sweep(phase: str, cases: Sequence[PlannedCase], events: Sequence[ev.Event], failures: list[Failure],
                shape: dict | None, file_bytes: int, bw: Bandwidth | None) -> Sweep:
    """One entry per planned case, in plan order, each with its requests, summary and ceiling
    at its own context; a case refused, unsupported or never reached says so."""
    built = tuple(_sweep_case(phase, case, events, failures, shape, file_bytes, bw) for case in cases)
    sweep = _with_telemetry(Sweep(cases=built, failures=tuple(f for f in failures if f.case is None),
                                  memory=_phase_memory(events, phase),
                                  tradeoff=batch_tradeoff(built) if phase == "batch" else ABSENT),
                            events, phase, [r for c in built for r in c.requests if r.kind == "measured"], trend=False)
    tel = sweep.telemetry
    if tel is None:
        return sweep
    raw = power.merged([e for e in events if isinstance(e, ev.Telemetry) and e.phase == phase])
    return sweep.replace(cases=tuple(c.replace(energy=power.energy(
        [r for r in c.requests if r.kind == "measured"], raw, tel.baseline)) if c.requests else c for c in built))


def _sweep_case(phase: str, case: PlannedCase, events: Sequence[ev.Event], failures: list[Failure],
                shape: dict | None, file_bytes: int, bw: Bandwidth | None) -> SweepCase:
    def of(kind):
        return [e for e in events if isinstance(e, kind) and e.phase == phase and e.case == case.id]

    reqs = [(batch_record if phase == "batch" else request_record)(e) for e in of(ev.Request)]
    measured = [r for r in reqs if r.kind == "measured"]
    fails = [f for f in failures if f.case == case.id] + [
        Failure(status="error", reason=e.reason, phase=phase, case=case.id) for e in of(ev.CaseError)]
    unsupported = next(iter(of(ev.CaseUnsupported)), None)
    metrics = summarize_requests(measured, len(fails))
    extra: dict = {}
    if phase == "depth":
        fill = next(iter(of(ev.DepthFill)), None)
        extra["fill"] = fill and DepthFill(t_start=fill.t_start, t_end=fill.t_end, fill_s=fill.fill_s,
                                           cached_tokens=fill.cached_tokens, kv_cache_bytes=fill.kv_cache_bytes)
        refused = next(iter(of(ev.ReuseNotPossible)), None)
        if refused:
            extra["reuse_not_possible"] = refused.reason
    if phase == "batch":
        assert case.batch is not None, "a planned batch case has its batch size"
        extra["prediction"] = batch_prediction(shape, case.context_tokens, case.batch, bw)
        check = next(iter(of(ev.BatchCheck)), None)
        extra["check"] = check and BatchCheck(**_counts(check.sequences), sequences=check.sequences)
    roofline = roofline_for(metrics, shape, case.context_tokens, bw, file_bytes)
    if phase == "batch":
        aggregate = [r.aggregate_decode_tok_s for r in measured if r.status == "ok"]
        metrics = metrics.replace(aggregate_decode_tok_s=summarized(aggregate, len(fails)))
    return SweepCase(
        id=case.id, status=_case_status(measured, fails, unsupported),
        **{k: getattr(case, k) for k in ("shape", "depth", "batch") if case.has(k)},
        prompt_tokens=case.prompt_tokens, gen_tokens=case.gen_tokens, context_tokens=case.context_tokens,
        requests=tuple(reqs), summary=metrics, failures=tuple(fails),
        reason=(unsupported.reason if unsupported else None) or next((f.reason for f in fails), None),
        roofline=roofline, **extra)


def _case_status(measured: list[Request], fails: list[Failure], unsupported: ev.CaseUnsupported | None) -> str:
    if unsupported:
        return "unsupported"
    if any(f.status == "refused" for f in fails):
        return "refused"
    if fails or any(r.status != "ok" for r in measured):
        return "failed"
    return "ok" if measured else "not run"


def batch_record(e: ev.Request) -> Request:
    """A batched request: B sequences share each step's timestamp. ``decode_tok_s`` and the ITL
    are per sequence (what each user sees); prefill counts all B prompts; the aggregate is B x
    the per-sequence rate."""
    rec = request_record(e)
    b = e.batch
    assert b is not None, "a batch request has its batch size"
    return rec.replace(aggregate_decode_tok_s=b * rec.decode_tok_s if rec.decode_tok_s else None,
                       aggregate_e2e_tok_s=b * rec.e2e_tok_s if rec.e2e_tok_s else None)


def _counts(outputs: Sequence[OutputCheck]) -> dict:
    """The fields of Checks: how many output checks were identical, near-ties, failed."""
    return dict(n=len(outputs), identical=sum(1 for c in outputs if c.first_divergence is None),
                near_ties=sum(1 for c in outputs if c.near_tie), failed=sum(1 for c in outputs if not c.passed))


def _phase_memory(events: Sequence[ev.Event], phase: str) -> PhaseMemory:
    end = next((e for e in events if isinstance(e, ev.PhaseEnd) and e.phase == phase), None)
    start = next((e for e in events if isinstance(e, ev.PhaseStart) and e.phase == phase), None)
    eng = next((e for e in events if isinstance(e, ev.PhaseMemory) and e.phase == phase), None)
    memory = PhaseMemory(rss_start_bytes=start.rss_bytes if start else None, rss_end_bytes=end.rss_bytes if end else None,
                         peak_rss_bytes=end.peak_rss_bytes if end else None, rss_samples=end.rss_samples if end else None,
                         engine=eng.engine_memory if eng else None)
    if (start and start.has("footprint_bytes")) or (end and end.has("footprint_bytes")):  # macOS workers only
        memory = memory.replace(footprint_start_bytes=start.footprint_bytes if start else None,
                                footprint_end_bytes=end.footprint_bytes if end else None,
                                peak_footprint_bytes=end.peak_footprint_bytes if end else None,
                                footprint_samples=end.footprint_samples if end else None)
    return memory


def _build_cold(events: list[ev.Event], workers: dict[str, list[ev.Event]], failures: list[Failure]) -> ColdPhase:
    trials = [_cold_trial(e, worker, failures) for e, worker in _cold_attempts(events, workers)]
    ok = [t for t in trials if t.status == "ok"]
    # a trial interrupted and measured again after a resume is listed (its requests are kept)
    # but is no failure: the trial it stood for succeeded
    failed = [t for t in trials if t.status != "ok" and t.index not in {o.index for o in ok}]

    def summary(values: list[float | None]) -> Summary:
        return summarized(values, failures=len(failed))

    return ColdPhase(trials=tuple(trials), failures=tuple(_phase_failures(failures, "cold")),
                     summary=ColdSummary(interpreter_s=summary([t.interpreter_s for t in ok]),
                                         import_s=summary([t.import_s for t in ok]),
                                         model_load_s=summary([t.model_load_s for t in ok]),
                                         tokenizer_load_s=summary([t.tokenizer_load_s for t in ok]),
                                         ready_s=summary([t.ready_s for t in ok]),
                                         first_request_extra_s=summary([t.first_request_extra_s for t in ok]),
                                         time_to_first_token_s=summary([t.time_to_first_token_s for t in ok])))


def _cold_attempts(events: list[ev.Event], workers: dict[str, list[ev.Event]]):
    """Each cold_trial event with the events of the worker spawned for it: the next cold worker
    of that trial (a resumed run can try a trial again)."""
    for k, e in enumerate(events):
        if isinstance(e, ev.ColdTrial):
            spawn = next((x for x in events[k + 1:] if isinstance(x, ev.WorkerSpawn) and tuple(x.phases) == ("cold",)
                          and x.trial == e.index), None)
            yield e, workers.get(spawn.worker or "") if spawn else None


def _span(a: int | None, b: int | None) -> float | None:
    return (b - a) / 1e9 if a is not None and b is not None else None


def _cold_trial(trial: ev.ColdTrial, w: list[ev.Event] | None, failures: list[Failure]) -> ColdTrial:
    """One cold trial: the phases of its fresh worker's start-up from their timestamps."""
    if w is None or not isinstance(w[0], ev.WorkerSpawn):
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
    harness = _span(t_main, t_import_start)
    ready = _span(spawn.t_spawn, t_tokenizer)
    if ready is not None and harness:
        ready -= harness
    # an engine that reads the vocabulary with the model has no tokenizer load of its own
    joint = bool(loaded and loaded.tokenizer_separate is False)
    fails = [f for f in failures if f.worker == spawn.worker]
    failed = bool(fails) or not (first and second and first.status == second.status == "ok")
    return ColdTrial(
        index=trial.index, residency=trial.residency, drop_cache=trial.drop_cache, status="failed" if failed else "ok",
        interpreter_s=_span(spawn.t_spawn, t_main), harness_s=harness if loaded and loaded.t_import_start else ABSENT,
        import_s=_span(t_import_start, t_imported),
        model_load_s=_span(t_imported, t_model), tokenizer_load_s=None if joint else _span(t_model, t_tokenizer),
        ready_s=ready, first_request=first, second_request=second,
        first_request_extra_s=first.total_s - second.total_s
        if first and second and first.total_s is not None and second.total_s is not None else None,
        # spawn -> ready, then the first request's own TTFT: macprof's prompt preparation
        # between the two (prompt_build_s) is not the engine's cold start
        time_to_first_token_s=ready + first.ttft_s if first and first.ttft_s is not None and ready is not None else None,
        prompt_build_s=_span(t_tokenizer, first.t0) if first and loaded else None,
        tokenizer_note="the engine reads the vocabulary with the model: tokenizer load is inside model_load_s"
        if joint else ABSENT,
        failure=(fails[0] if fails else None) if failed else ABSENT)


def _build_prefix(events: list[ev.Event], failures: list[Failure], roof: Roof) -> PrefixPhase:
    pairs: dict[int, dict] = {}
    for e in events:
        if isinstance(e, ev.Request) and e.phase == "prefix":
            pairs.setdefault(e.index, {"index": e.index, "kind": e.kind})[e.mode] = request_record(e)
        elif isinstance(e, ev.PrefixCheck):
            pairs.setdefault(e.index, {"index": e.index, "kind": e.kind})["check"] = OutputCheck(
                identical_fraction=e.identical_fraction, first_divergence=e.first_divergence, margin=e.margin,
                near_tie=e.near_tie, passed=e.passed)
    built = tuple(PrefixPair(**pairs[i]) for i in sorted(pairs))
    measured = [p for p in built if p.kind == "measured"]
    reuse = [p.reuse for p in measured if p.reuse]
    noreuse = [p.noreuse for p in measured if p.noreuse]
    s_reuse = summarize_requests(reuse, len(failures))
    s_noreuse = summarize_requests(noreuse, len(failures))
    med_r, med_n = s_reuse.ttft_s.median, s_noreuse.ttft_s.median
    refused = next((e.reason for e in events if isinstance(e, ev.ReuseNotPossible) and e.phase == "prefix"), None)
    return _with_telemetry(PrefixPhase(
        reuse_not_possible=refused or ABSENT, pairs=built,
        # no speed-up figure where nothing was reused: two uncached paths compared are no reuse's gain
        summary=PrefixSummary(reuse=s_reuse, noreuse=s_noreuse,
                              ttft_speedup=None if refused else stats.ratio(med_n, med_r),
                              reused_tokens=summarized([r.reused_tokens for r in reuse]),
                              checks=Checks(**_counts([p.check for p in measured if p.check]))),
        failures=tuple(failures), memory=_phase_memory(events, "prefix"), roofline=roof(s_reuse)),
        events, "prefix", reuse + noreuse)
