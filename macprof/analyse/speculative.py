"""The speculative phase's record from its events (pure): per draft length k, the requests
with their rounds and output checks, and what they give: acceptance α = accepted / drafted,
tokens per round, each round's time split draft / verify / rewind, decode tok/s, the speed-up
against the phase's own plain requests on the same prompts (a ratio of medians with its
bootstrap interval, measure/significance.py) and the roofline's prediction at the measured α."""

from __future__ import annotations

from macprof.analyse.ceilings import speculative_prediction
from macprof.analyse.requests import phase_failures, request_record
from macprof.cases import mean_context
from macprof.measure import stats
from macprof.measure.significance import median_ratio_intervals
from macprof.model import events as ev
from macprof.model.phases import Checks, OutputCheck, Request
from macprof.model.records import ABSENT
from macprof.model.speculative import (DraftLoaded, Interval, NativeRefused, Round, SpeculativeCase, SpeculativeCheck,
                                       SpeculativeNative, SpeculativePhase, SpeculativeRequest, SpeculativeRounds)

PHASE = "speculative"
NS = 1e9


def build_speculative_phase(ctx, name: str) -> SpeculativePhase:
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
            checks[(e.case, e.index)] = OutputCheck(identical_fraction=e.identical_fraction,
                                                    first_divergence=e.first_divergence, margin=e.margin,
                                                    near_tie=e.near_tie, passed=e.passed)
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
    from macprof.analyse.speculative_native import native_cases

    asked = getattr(s, "speculative_impl", None) in ("native", "both")  # absent from logs before the native paths
    return SpeculativePhase(
        draft=loaded.draft if loaded else s.draft, draft_engine=loaded.engine if loaded else None,
        draft_status=loaded.status if loaded else None, draft_reason=loaded.reason if loaded else None,
        draft_load_s=(loaded.t_load_end - loaded.t_load_start) / NS
        if loaded and loaded.t_load_end and loaded.t_load_start else None,
        plain=tuple(plain), plain_decode_tok_s=stats.median(base) if base else None, cases=tuple(cases),
        failures=tuple(phase_failures(ctx.failures, name)),
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
    # full rounds only: the last round of a request drafts fewer, to end at exactly gen_tokens
    full = [x for x in all_rounds if x.drafted == k] or all_rounds
    emitted = sum(len(x.tokens) for x in full)
    cs = [b.check for b in ok if b.check]
    decode = [b.request.decode_tok_s for b in ok if b.request.decode_tok_s]
    prediction = speculative_prediction(target_shape, draft_shape, k, alpha, context, bw, ngram)
    return SpeculativeCase(
        id=case, k=k, requests=built, rounds=len(all_rounds), drafted=drafted, accepted=accepted, acceptance=alpha,
        tokens_per_round=emitted / len(full) if full else None,
        draft_s_per_round=_median([(x.t_verify_start - x.t_draft_start) / NS for x in all_rounds]),
        verify_s_per_round=_median([(x.t_verify_end - x.t_verify_start) / NS for x in all_rounds]),
        rewind_s_per_round=_median([(x.t_rewind_end - x.t_verify_end) / NS for x in all_rounds]),
        decode_tok_s=_median(decode),
        speedup=Interval(value=stats.ratio(_median(decode), _median(base)), low=interval.get("low"),
                         high=interval.get("high")),
        predicted_speedup=prediction.get("speedup"), predicted_round_s=prediction.get("round_s"),
        checks=Checks(n=len(cs), identical=sum(1 for x in cs if x.first_divergence is None),
                      near_ties=sum(1 for x in cs if x.first_divergence is not None and x.passed),
                      failed=sum(1 for x in cs if not x.passed)))


def _median(values: list[float]) -> float | None:
    return stats.median(values) if values else None
