"""The engine's own speculative decoding in the speculative phase's record (SpeculativePhase.native):
per k, its requests with what the engine told of them, figured as macprof's loop is where the
engine tells enough, unknown with the reason where it does not (pure).

mlx-lm tells, per token, whether it was an accepted draft (from_draft); each round ends with one
target token, so its accepted counts per round follow, but not what it drafted: α is unknown.
llama-cpp-python tells nothing: the engine adapter records what its draft_model proposed each
round, from which drafted and accepted follow (measure/speculative.py proposal_rounds). Neither
exposes a round's draft / verify / rewind split: those stay unknown.

A native case's decode tok/s (and so its speed-up) is counted after the request's first burst,
(n - m) / (t_n - t_m), m the tokens that came out with the first target token
(measure/speculative.py decode_rate): 1 for llama-cpp-python, whose first token is the prefill's
as in plain decoding and macprof's loop, a whole round for mlx-lm, which drafts from the prompt on."""

from __future__ import annotations

from macprof.analyse.build import _counts
from macprof.analyse.ceilings import speculative_prediction
from macprof.measure import stats
from macprof.measure.significance import median_ratio_intervals
from macprof.measure.speculative import acceptance_per_token, decode_rate, flag_rounds, rounds_of
from macprof.model.phases import Checks, OutputCheck, Request
from macprof.model.speculative import Interval, SpeculativeCase, SpeculativeNative, SpeculativeRequest

NO_SPLIT = "the engine's own loop times no round of its own: the draft / verify / rewind split is unknown"
NO_ROUNDS = "the engine told no rounds for some requests: rounds and tokens per round unknown"
NO_DRAFTED = "α unknown: the engine does not tell how many tokens it drafted"
OWN_WORDS = (NO_ROUNDS, NO_DRAFTED, NO_SPLIT)  # what a case's ``unknown`` adds to the engine's own


def native_cases(requests: dict[str, list[Request]], told: dict[tuple, SpeculativeNative], checks: dict[tuple, OutputCheck],
                 base: list[float], target_shape, draft_shape, context: float, bw, ngram: bool) -> tuple[SpeculativeCase, ...]:
    """``requests`` by case ("k<k>", mode native), ``told`` by (case, index), ``checks`` by
    ("n<k>", index) (the check's case is the request's key), ``base`` the plain decode rates."""
    ks = sorted((int(c[1:]), c) for c in requests if c.startswith("k") and c[1:].isdigit())
    rates = {c: _rates(requests[c], told, c) for _, c in ks}
    intervals = median_ratio_intervals([(base, rates[c]) for _, c in ks]) if ks else []
    return tuple(_case(k, c, requests[c], told, checks, interval, base, target_shape, draft_shape, context, bw, ngram)
                 for (k, c), interval in zip(ks, intervals))


def whole_rounds(ok: list[SpeculativeRequest]) -> list[tuple[int | None, int]]:
    """(drafted, accepted) of every whole round the engine told of these requests: a request's
    last round may end at gen_tokens mid-round, so it is left out; drafted None where not told."""
    out: list[tuple[int | None, int]] = []
    for b in ok:
        acc = list(b.accepted_per_round or ())[:-1]
        drafted = list(b.drafted_per_round) if b.drafted_per_round is not None else [None] * len(acc)
        out += zip(drafted[:len(acc)], acc)
    return out


def _rate(r: Request, e: SpeculativeNative | None) -> float | None:
    """The request's decode rate counted after its first burst (measure/speculative.py
    decode_rate): mlx-lm's first round drafts from the prompt on, so its first token comes with
    a whole round's."""
    return decode_rate(r.token_times, e.from_draft if e else None)


def _rates(requests: list[Request], told: dict, case: str) -> list[float]:
    out = [_rate(r, told.get((case, r.index))) for r in requests if r.kind == "measured" and r.status == "ok"]
    return [x for x in out if x]


def _case(k: int, case: str, requests: list[Request], told: dict, checks: dict, interval: dict, base: list[float],
          target_shape, draft_shape, context: float, bw, ngram: bool) -> SpeculativeCase:
    built = []
    for r in requests:
        e = told.get((case, r.index))
        accepted = (e.accepted if e.accepted is not None else flag_rounds(e.from_draft) if e.from_draft is not None
                    else None) if e else None
        built.append(SpeculativeRequest(request=r, check=checks.get((f"n{k}", r.index)),
                                        from_draft=e.from_draft if e else None,
                                        drafted_per_round=e.drafted if e else None,
                                        accepted_per_round=tuple(accepted) if accepted is not None else None))
    ok = [b for b in built if b.request.kind == "measured" and b.request.status == "ok"]
    events = [told[(case, b.request.index)] for b in ok if (case, b.request.index) in told]
    rounds_known = bool(ok) and all(b.accepted_per_round is not None for b in ok)
    drafted_known = rounds_known and all(b.drafted_per_round is not None for b in ok)
    n_rounds = sum(len(b.accepted_per_round or ()) for b in ok) if rounds_known else 0
    accepted = sum(sum(b.accepted_per_round or ()) for b in ok) if rounds_known else 0
    drafted = sum(sum(b.drafted_per_round or ()) for b in ok) if drafted_known else 0
    alpha = accepted / drafted if drafted_known and drafted else None
    # the per-token acceptance (measure/speculative.py), the prediction's, as macprof's loop's cases
    per_token = acceptance_per_token([(d, a) for b in ok for d, a in zip(b.drafted_per_round or (),
                                                                         b.accepted_per_round or ())]) \
        if drafted_known else None
    pairs = whole_rounds(ok) if rounds_known else []
    tokens, drafts = rounds_of(pairs)
    decode = _rates(requests, told, case)
    median = stats.median_known(decode)
    prediction = speculative_prediction(target_shape, draft_shape, k, per_token, context, bw, ngram,
                                        [d for d, _ in pairs if d is not None] if drafted_known else ())
    unknown = [e.unknown for e in events[:1] if e.unknown]
    if not rounds_known:
        unknown.append(NO_ROUNDS)
    elif not drafted_known:
        unknown.append(NO_DRAFTED)
    cs = [b.check for b in ok if b.check]
    return SpeculativeCase(
        id=case, k=k, requests=tuple(built), rounds=n_rounds, drafted=drafted, accepted=accepted, acceptance=alpha,
        acceptance_per_token=per_token,
        tokens_per_round=tokens, drafts_per_round=drafts, decode_tok_s=median,
        speedup=Interval(value=stats.ratio(median, stats.median_known(base)), low=interval.get("low"),
                         high=interval.get("high")),
        predicted_speedup=prediction.get("speedup"), predicted_round_s=prediction.get("round_s"),
        predicted_tokens_per_round=prediction.get("tokens_per_round"), prediction_reason=prediction.get("reason"),
        checks=Checks(**_counts(cs)),
        impl=events[0].impl if events else None, unknown="; ".join([*unknown, NO_SPLIT]))
