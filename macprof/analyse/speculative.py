"""The speculative phase's record from its events (pure): per draft length k, the requests
with their rounds and output checks, and what they give: acceptance α = accepted / drafted,
tokens per round, each round's time split draft / verify / rewind, decode tok/s, the speed-up
against the phase's own plain requests on the same prompts (a ratio of medians with its
bootstrap interval, measure/significance.py) and the roofline's prediction at the measured
per-token acceptance; and the phase's memory with what the draft adds to it."""

from __future__ import annotations

from macprof.analyse.build import PhaseEvents, _counts, _phase_memory
from macprof.analyse.ceilings import speculative_prediction
from macprof.analyse.requests import phase_failures, request_record
from macprof.cases import mean_context
from macprof.measure import stats
from macprof.measure.kvmodel import kv_bytes_read, layout_from_shape
from macprof.measure.significance import median_ratio_intervals
from macprof.measure.speculative import acceptance_per_token, draft_budget, rounds_of
from macprof.model import events as ev
from macprof.model.phases import Checks, OutputCheck, PhaseMemory, Request
from macprof.model.records import ABSENT
from macprof.model.speculative import (DraftEnd, DraftLoaded, DraftMemory, Interval, NativeRefused, Round, SpeculativeCase,
                                       SpeculativeCheck, SpeculativeNative, SpeculativePhase, SpeculativeRequest,
                                       SpeculativeRounds)

PHASE = "speculative"
NS = 1e9


def build_speculative_phase(ctx: PhaseEvents, name: str) -> SpeculativePhase:
    events, s = ctx.events, ctx.head.settings
    loaded = next((e for e in events if isinstance(e, DraftLoaded) and e.phase == name), None)
    plain: list[Request] = []
    spec: dict[str, list[Request]] = {}
    rounds: dict[tuple, tuple[Round, ...]] = {}
    checks: dict[tuple, OutputCheck] = {}
    native: dict[str, list[Request]] = {}  # the engine's own path (analyse/speculative_native.py)
    told: dict[tuple, SpeculativeNative] = {}
    refused = next((e.reason for e in events if isinstance(e, NativeRefused) and e.phase == name), None)
    for e in events:
        if isinstance(e, ev.Request) and e.phase == name:
            r = request_record(e)
            if e.mode == "plain":
                plain.append(r)
            else:
                (native if e.mode == "native" else spec).setdefault(e.case or "", []).append(r)
        elif isinstance(e, SpeculativeNative) and e.phase == name:
            told[(e.case, e.index)] = e
        elif isinstance(e, SpeculativeRounds) and e.phase == name:
            rounds[(e.case, e.index)] = e.rounds
        elif isinstance(e, SpeculativeCheck) and e.phase == name:
            checks[(e.case, e.index)] = e.record()
    base = [r.decode_tok_s for r in plain if r.kind == "measured" and r.status == "ok" and r.decode_tok_s]
    ks = sorted((int(c[1:]), c) for c in spec if c.startswith("k") and c[1:].isdigit())
    measured = {c: [r for r in spec[c] if r.kind == "measured" and r.status == "ok" and r.decode_tok_s] for _, c in ks}
    intervals = median_ratio_intervals([(base, [float(r.decode_tok_s or 0) for r in measured[c]]) for _, c in ks]) if ks else []
    context = mean_context(s.prompt_tokens, s.gen_tokens)
    ngram = bool(loaded and loaded.draft == "ngram")
    cases = []
    for (k, c), interval in zip(ks, intervals):
        cases.append(_case(k, c, spec[c], rounds, checks, interval, base, ctx.head.shape,
                           loaded.shape if loaded else None, context, ctx.bw, ngram))
    end = next((e for e in events if isinstance(e, DraftEnd) and e.phase == name), None)
    draft_memory = _draft_memory(loaded, end, s.prompt_tokens + s.gen_tokens) if loaded and not ngram else None
    from macprof.analyse.speculative_native import native_cases

    asked = getattr(s, "speculative_impl", None) in ("native", "both")  # absent from logs before the native paths
    return SpeculativePhase(
        draft=loaded.draft if loaded else s.draft, draft_engine=loaded.engine if loaded else None,
        draft_status=loaded.status if loaded else None, draft_reason=loaded.reason if loaded else None,
        draft_load_s=(loaded.t_load_end - loaded.t_load_start) / NS
        if loaded and loaded.t_load_end and loaded.t_load_start else None,
        plain=tuple(plain), plain_decode_tok_s=stats.median_known(base), cases=tuple(cases),
        failures=tuple(phase_failures(ctx.failures, name)),
        memory=_with_draft_weights(_phase_memory(events, name), draft_memory), draft_memory=draft_memory,
        native=native_cases(native, told, checks, base, ctx.head.shape, loaded.shape if loaded else None, context,
                            ctx.bw, ngram) if asked else ABSENT,
        native_reason=refused if asked else ABSENT)


def _case(k: int, case: str, requests: list[Request], rounds: dict, checks: dict, interval: dict, base: list[float],
          target_shape,
          draft_shape, context: float, bw, ngram: bool) -> SpeculativeCase:
    built = tuple(SpeculativeRequest(request=r, rounds=rounds.get((case, r.index), ()), check=checks.get((case, r.index)))
                  for r in requests)
    ok = [b for b in built if b.request.kind == "measured" and b.request.status == "ok"]
    all_rounds = [x for b in ok for x in b.rounds]
    drafted, accepted = sum(x.drafted for x in all_rounds), sum(x.accepted for x in all_rounds)
    alpha = accepted / drafted if drafted else None
    per_token = acceptance_per_token([(x.drafted, x.accepted) for x in all_rounds])
    free = [x for b in ok for x in free_rounds(b, k)]  # a request's last rounds, capped to end at its length, out
    tokens, drafts = rounds_of([(x.drafted, x.accepted) for x in free])
    cs = [b.check for b in ok if b.check]
    decode = [b.request.decode_tok_s for b in ok if b.request.decode_tok_s]
    # the prediction at the per-token acceptance: accepted / drafted would count the drafts after
    # a rejection, never judged, as rejected, and so predict too few tokens per round at k > 1; over
    # the rounds as they drafted (a lookup draft's fewer than k, a request's capped last round)
    prediction = speculative_prediction(target_shape, draft_shape, k, per_token, context, bw, ngram,
                                        [x.drafted for x in free])
    return SpeculativeCase(
        id=case, k=k, requests=built, rounds=len(all_rounds), drafted=drafted, accepted=accepted, acceptance=alpha,
        acceptance_per_token=per_token,
        tokens_per_round=tokens, drafts_per_round=drafts,
        draft_s_per_round=stats.median_known([(x.t_verify_start - x.t_draft_start) / NS for x in all_rounds]),
        verify_s_per_round=stats.median_known([(x.t_verify_end - x.t_verify_start) / NS for x in all_rounds]),
        rewind_s_per_round=stats.median_known([(x.t_rewind_end - x.t_verify_end) / NS for x in all_rounds]),
        round_s_per_round=stats.median_known([(x.t_rewind_end - x.t_draft_start) / NS for x in all_rounds]),
        decode_tok_s=stats.median_known(decode),
        speedup=Interval(value=stats.ratio(stats.median_known(decode), stats.median_known(base)), low=interval.get("low"),
                         high=interval.get("high")),
        predicted_speedup=prediction.get("speedup"), predicted_round_s=prediction.get("round_s"),
        predicted_tokens_per_round=prediction.get("tokens_per_round"),
        prediction_reason=prediction.get("reason") or (None if per_token is not None else "no round drafted"),
        checks=Checks(**_counts(cs)))


def free_rounds(b: SpeculativeRequest, k: int) -> list[Round]:
    """The request's rounds that were free to draft k: a round may draft up to k, capped to end
    at the request's length (measure/speculative.py draft_budget: its last round or two); where a
    round free to draft k drafted fewer, that is the draft's own doing (a lookup without a match)."""
    n = len(b.request.tokens)
    out, emitted = [], 1  # the first token is the target's prefill
    for x in b.rounds:
        if draft_budget(k, n - emitted) == k:
            out.append(x)
        emitted += len(x.tokens)
    return out


def per_round(c: SpeculativeCase) -> tuple[float | None, float | None]:
    """A case's (tokens per round, drafts per round) over its rounds free to draft k: as the log
    stores them, or, for a log from before drafts_per_round (its tokens per round over the rounds
    that drafted k), recomputed from its measured requests' rounds."""
    if c.has("drafts_per_round"):
        return c.tokens_per_round, c.drafts_per_round
    ok = [b for b in c.requests if b.request.kind == "measured" and b.request.status == "ok"]
    if c.has("impl"):  # the engine's own path: the rounds it told
        from macprof.analyse.speculative_native import whole_rounds

        if any(b.accepted_per_round is None for b in ok):
            return None, None
        return rounds_of(whole_rounds(ok))
    return rounds_of([(x.drafted, x.accepted) for b in ok for x in free_rounds(b, c.k)])


def _draft_memory(loaded: DraftLoaded, end: DraftEnd | None, context: int) -> DraftMemory:
    """What the draft added: its load's growth of the process, its bytes, the K/V it held."""
    shape = loaded.shape or {}
    held = kv_bytes_read(layout_from_shape(shape), context) if shape else None
    grew = loaded.rss_bytes - loaded.rss_before_bytes if loaded.rss_bytes and loaded.rss_before_bytes else None
    memory = DraftMemory(
        file_bytes=shape.get("file_bytes"), weight_bytes_per_token=shape.get("weight_bytes_per_token"),
        rss_before_load_bytes=loaded.rss_before_bytes, rss_after_load_bytes=loaded.rss_bytes, load_rss_bytes=grew,
        kv_cache_bytes=end.kv_cache_bytes if end else None, kv_computed_bytes=held or None,
        engine=end.engine_memory if end else loaded.engine_memory,
        weights_held=end.weights_held if end else None, mapped_resident_bytes=end.mapped_resident_bytes if end else None)
    if loaded.has("footprint_bytes") and loaded.footprint_bytes and loaded.footprint_before_bytes:  # macOS workers
        memory = memory.replace(load_footprint_bytes=loaded.footprint_bytes - loaded.footprint_before_bytes)
    return memory


def _with_draft_weights(memory: PhaseMemory, draft: DraftMemory | None) -> PhaseMemory:
    """The phase's memory with a mapped draft's resident file bytes added to the target's: the
    footprint leaves clean file pages out (analyse/headline.py), so without them the headline
    would miss the draft's weights on macOS; RSS (elsewhere) has them already, as it has both
    models' K/V and copied weights (the peak spans the draft's load and every request)."""
    if draft is None or draft.weights_held != "mapped" or not memory.has("peak_footprint_bytes"):
        return memory
    target = memory.mapped_resident_bytes if memory.has("mapped_resident_bytes") else 0
    mapped = None if target is None or draft.mapped_resident_bytes is None else target + draft.mapped_resident_bytes
    return memory.replace(weights_held="mapped", mapped_resident_bytes=mapped)


def best_case(ph: SpeculativePhase | None) -> SpeculativeCase | None:
    """The draft length with the highest measured speed-up (None where none was measured)."""
    measured = [c for c in (ph.cases if ph else ()) if c.speedup and c.speedup.value is not None]
    return max(measured, key=lambda c: c.speedup.value or 0.0) if measured else None  # type: ignore[union-attr]


def figures(m) -> dict:
    """The speculative columns of compare: the best k's measured speed-up with its interval, the
    roofline's at that k, its acceptance and tokens per round, and whether the outputs held."""
    ph = m.phases.speculative
    if ph is None:
        return {"has_speculative": False, **{k: None for k in FIGURES}}
    c = best_case(ph)
    checks = c.checks if c else None
    tokens, drafts = per_round(c) if c else (None, None)
    return {"has_speculative": True, "speculative_draft": ph.draft, "speculative_best_k": c.k if c else None,
            "speculative_speedup": c.speedup.value if c and c.speedup else None,
            "speculative_speedup_low": c.speedup.low if c and c.speedup else None,
            "speculative_speedup_high": c.speedup.high if c and c.speedup else None,
            "speculative_predicted_speedup": c.predicted_speedup if c else None,
            "speculative_acceptance": c.acceptance if c else None,
            "speculative_acceptance_per_token": c.acceptance_per_token if c else None,
            "speculative_tokens_per_round": tokens, "speculative_drafts_per_round": drafts,
            "speculative_identical": checks.identical if checks else None,
            "speculative_checked": checks.n if checks else None,
            "speculative_failed_checks": checks.failed if checks else None,
            "speculative_draft_load_s": ph.draft_load_s,
            "speculative_status": ph.draft_status, "speculative_reason": ph.draft_reason}


FIGURES = ("speculative_draft", "speculative_best_k", "speculative_speedup", "speculative_speedup_low",
           "speculative_speedup_high", "speculative_predicted_speedup", "speculative_acceptance",
           "speculative_acceptance_per_token", "speculative_tokens_per_round", "speculative_drafts_per_round",
           "speculative_identical",
           "speculative_checked", "speculative_failed_checks", "speculative_draft_load_s", "speculative_status",
           "speculative_reason")
