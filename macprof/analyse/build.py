"""The run log built from the journal's events (pure: no I/O, no clock).

The journal is the source of truth: ``build`` turns its events into the run log, so a log
written at the end of a run, after Ctrl-C, or recovered from the journal of a killed run
(`macprof show JOURNAL`, `macprof run --resume JOURNAL`) come from the same code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from macprof.analyse.cold import build_cold
from macprof.analyse.distributed import build_group
from macprof.analyse.requests import phase_failures, request_record, summarize_requests, summarized
from macprof.analyse import energy
from macprof.analyse.quality import build_quality
from macprof.analyse.serving import build_concurrency
from macprof.analyse.tasks import build_tasks
from macprof.analyse.ceilings import ROOFLINE_DEFINITIONS, batch_prediction, batch_tradeoff, roofline_for
from macprof.cases import SWEEP_PHASES, mean_context, plan
from macprof.errors import MacprofError
from macprof.measure import stats
from macprof.measure.kvmodel import kv_bytes_read, layout_from_shape
from macprof.measure.timeline import DEFINITION_EXAMPLE, DEFINITIONS
from macprof.model import events as ev
from macprof.model.definitions import NEAR_TIE_LOGITS
from macprof.model.log import Bandwidth, KvCache, ModelMemory, ModelResult, Phases, RunLog, RunMemory
from macprof.model.phases import (BatchCheck, Checks, Ceiling, ColdPhase, Failure, Metrics, OutputCheck, PhaseMemory, PlannedCase, PrefixPair, PrefixPhase, PrefixSummary,
                                  Request, Sweep, SweepCase, WarmPhase)
from macprof.model.quality import QualityPhase
from macprof.model.records import ABSENT
from macprof.model.serving import ConcurrencyPhase
from macprof.model.tasks import TasksPhase
from macprof.model.vocab import THERMAL_STATES
from macprof.phases import REGISTRY, load

Roof = Callable[[Metrics], Ceiling]  # a phase's summary -> its ceiling at the phase's context


# -- building the log (pure) -----------------------------------------------------------
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
                     **ROOFLINE_DEFINITIONS, "energy": energy.ENERGY_DEFINITIONS},
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
    loaded = next((e for e in events if isinstance(e, ev.Loaded) and e.versions is not None), None)
    versions = loaded.versions if loaded else None
    warm = [request_record(e) for e in events if isinstance(e, ev.Request) and e.phase == "warm"]
    phases = _phases(events, head, workers, failures, warm, bw)
    return ModelResult(
        identity=head.identity, shape=head.shape, shape_error=head.shape_error, settings=head.settings,
        engine_versions=versions, engine_settings=loaded.engine_settings if loaded and loaded.has("engine_settings")
        else ABSENT, phases=phases,
        memory=_model_memory(events, head, [r for r in warm if r.kind == "measured"]),
        failures=tuple(failures), complete=any(isinstance(e, ev.ModelEnd) for e in events),
        **_group(events, head, phases, bw))


def _group(events: list[ev.Event], head: ev.ModelStart, phases: Phases, bw: Bandwidth | None) -> dict:
    """A sharded model's group (analyse/distributed.py); nothing for a one-machine model."""
    if head.settings.distributed is None:
        return {}
    spec = head.settings.distributed.to_json()
    s = head.settings
    decode = phases.warm.summary.decode_tok_s.median if phases.warm else None
    return {"distributed": build_group(events, head.shape, spec, mean_context(s.prompt_tokens, s.gen_tokens), decode, bw)}


@dataclass(frozen=True)
class PhaseEvents:
    """What a phase's builder (macprof/phases.py ``builder``) reads: the model's events, its
    workers' events, its failures, its warm requests, its sweep plan, and the ceiling at the
    model's mean context."""

    events: list[ev.Event]
    head: ev.ModelStart
    workers: dict[str, list[ev.Event]]
    failures: list[Failure]
    warm: list[Request]
    bw: Bandwidth | None
    planned: dict[str, tuple[PlannedCase, ...]]
    roof: Roof


def _phases(events: list[ev.Event], head: ev.ModelStart, workers: dict[str, list[ev.Event]],
            failures: list[Failure], warm: list[Request], bw: Bandwidth | None) -> Phases:
    s, shape, file_bytes = head.settings, head.shape, head.identity.total_bytes
    context = mean_context(s.prompt_tokens, s.gen_tokens)

    def roof(summary: Metrics) -> Ceiling:
        return roofline_for(summary, shape, context, bw, file_bytes)

    planned = _planned(events, head) if set(s.phases) & set(SWEEP_PHASES) else {}
    ctx = PhaseEvents(events, head, workers, failures, warm, bw, planned, roof)
    return Phases(**{name: load(phase.builder)(ctx, name) for name, phase in REGISTRY.items() if name in s.phases})


# -- each phase's builder, as macprof/phases.py names them ----------------------------------
def build_cold_phase(ctx: PhaseEvents, name: str) -> ColdPhase:
    return build_cold(ctx.events, ctx.workers, ctx.failures)


def build_warm_phase(ctx: PhaseEvents, name: str) -> WarmPhase:
    return _build_warm(ctx.events, ctx.warm, phase_failures(ctx.failures, name), ctx.roof)


def build_prefix_phase(ctx: PhaseEvents, name: str) -> PrefixPhase:
    return _build_prefix(ctx.events, phase_failures(ctx.failures, name), ctx.roof)


def build_sweep_phase(ctx: PhaseEvents, name: str) -> Sweep:
    return _build_sweep(name, ctx.planned.get(name, ()), ctx.events, phase_failures(ctx.failures, name),
                        ctx.head.shape, ctx.head.identity.total_bytes, ctx.bw)


def build_quality_phase(ctx: PhaseEvents, name: str) -> QualityPhase:
    return build_quality(ctx.events, phase_failures(ctx.failures, name), _phase_memory(ctx.events, name))


def build_concurrency_phase(ctx: PhaseEvents, name: str) -> ConcurrencyPhase:
    return build_concurrency(ctx.events, phase_failures(ctx.failures, name), ctx.head.settings, ctx.head.shape,
                             ctx.bw, request_record)


def build_tasks_phase(ctx: PhaseEvents, name: str) -> TasksPhase:
    return build_tasks(ctx.events, phase_failures(ctx.failures, name), _phase_memory(ctx.events, name))


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
    any, and the thermal state at its boundaries where the worker read one (macOS); a journal
    from before either leaves its keys absent."""
    record = record.replace(**_thermal_states(events, phase))
    found = energy.phase_telemetry(energy.telemetry_of(events, phase),
                                  sorted(measured, key=lambda r: r.t0), trend)
    return record if found is None else record.replace(telemetry=found)


def _thermal_states(events: Sequence[ev.Event], phase: str) -> dict:
    """thermal_state_start / _end from the phase's boundary events: only a macOS worker journals
    them, so elsewhere (and in older journals) nothing, and the log keeps its layout. Only
    NSProcessInfo's four states: an older worker's pmset fallback text is not that figure."""
    bounds = [next((e for e in events if isinstance(e, kind) and e.phase == phase), None)
              for kind in (ev.PhaseStart, ev.PhaseEnd)]
    if not any(e is not None and e.has("thermal_state") for e in bounds):
        return {}
    start, end = (e.thermal_state if e is not None and e.thermal_state in THERMAL_STATES else None for e in bounds)
    return {"thermal_state_start": start, "thermal_state_end": end}


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
    raw = energy.merged(energy.telemetry_of(events, phase))
    return sweep.replace(cases=tuple(c.replace(energy=energy.energy(
        [r for r in c.requests if r.kind == "measured"], raw, tel.baseline)) if c.requests else c for c in built))


def _sweep_case(phase: str, planned: PlannedCase, events: Sequence[ev.Event], failures: list[Failure],
                shape: dict | None, file_bytes: int, bw: Bandwidth | None) -> SweepCase:
    case = planned.record()  # what it is; what came of it, below

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
        extra["fill"] = fill and fill.record()
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
    return case.replace(
        status=_case_status(measured, fails, unsupported), requests=tuple(reqs), summary=metrics, failures=tuple(fails),
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
    if end and end.has("weights_held"):
        memory = memory.replace(weights_held=end.weights_held, **({"mapped_resident_bytes": end.mapped_resident_bytes}
                                                                   if end.has("mapped_resident_bytes") else {}))
    return memory


def _build_prefix(events: list[ev.Event], failures: list[Failure], roof: Roof) -> PrefixPhase:
    pairs: dict[int, dict] = {}
    for e in events:
        if isinstance(e, ev.Request) and e.phase == "prefix":
            pairs.setdefault(e.index, {"index": e.index, "kind": e.kind})[e.mode] = request_record(e)
        elif isinstance(e, ev.PrefixCheck):
            pairs.setdefault(e.index, {"index": e.index, "kind": e.kind})["check"] = e.record()
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
