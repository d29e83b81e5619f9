"""The concurrency phase from its events (pure): per level TTFT / ITL / end-to-end percentiles,
aggregate tok/s, errors, goodput under the SLOs, and the batching roofline at B = C beside it.

Goodput = the share of the level's sent requests that succeeded and met every SLO given
(TTFT ≤ slo_ttft; every chunk gap ≤ slo_itl); a failed request meets none. Aggregate tok/s =
the server-reported tokens of the level's successful requests over the level's wall time
(first t0 to last chunk).
"""

from __future__ import annotations

from typing import Callable, Sequence

from macprof.analyse.ceilings import batch_prediction
from macprof.cases import mean_context
from macprof.measure import stats
from macprof.model import events as ev
from macprof.model.phases import Failure, Request, Summary
from macprof.model.phase_events import LoadLevel
from macprof.model.serving import ConcurrencyPhase, LoadLevelResult

NS = 1e9


def _summary(values: Sequence[float | None], failures: int) -> Summary:
    return Summary(**stats.summarize(values, failures=failures))


def build_concurrency(events: Sequence[ev.Event], failures: list[Failure], s, shape: dict | None, bw,
                      to_record: Callable[[ev.Request], Request]) -> ConcurrencyPhase:
    slo = {"ttft_s": s.slo_ttft, "itl_s": s.slo_itl}
    levels = []
    for level in (e for e in events if isinstance(e, LoadLevel)):
        reqs = [to_record(e) for e in events if isinstance(e, ev.Request) and e.phase == "concurrency"
                and e.case == level.case]
        levels.append(_level(level, reqs, s, shape, bw))
    return ConcurrencyPhase(slo=slo if any(v is not None for v in slo.values()) else None, levels=tuple(levels),
                            failures=tuple(failures))


def _level(level: LoadLevel, reqs: list[Request], s, shape: dict | None, bw) -> LoadLevelResult:
    ok = [r for r in reqs if r.status == "ok"]
    bad = len(reqs) - len(ok)
    gaps = [(b - a) / NS for r in ok for a, b in zip(r.token_times, r.token_times[1:])]
    ends = [r.token_times[-1] for r in ok if r.token_times]
    starts = [r.t0 for r in reqs]
    span = (max(ends) - min(starts)) / NS if ends and starts else None
    tokens = sum(r.n_tokens for r in ok)
    good, reason = _goodput(reqs, s.slo_ttft, s.slo_itl)
    raw = level.record(id=level.case)
    c = raw.concurrency
    return raw.replace(
        ok=len(ok), errors=bad, duration_s=(level.t_end - level.t_start) / NS,
        ttft_s=_summary([r.ttft_s for r in ok], bad), itl_s=_summary(gaps, bad),
        e2e_s=_summary([r.total_s for r in ok], bad), tokens=tokens,
        aggregate_tok_s=tokens / span if span and span > 0 else None, goodput=good, goodput_reason=reason,
        prediction=batch_prediction(shape, mean_context(s.prompt_tokens, s.gen_tokens), c, bw) if c else None,
        error_messages=tuple(sorted({r.error for r in reqs if r.error}))[:5], requests=tuple(reqs))


def _goodput(reqs: list[Request], slo_ttft: float | None, slo_itl: float | None) -> tuple[float | None, str | None]:
    if slo_ttft is None and slo_itl is None:
        return None, "no SLO given (--slo ttft:1s,itl:100ms)"
    if not reqs:
        return None, "no request was sent"

    def meets(r: Request) -> bool:
        if r.status != "ok" or r.ttft_s is None:
            return False
        if slo_ttft is not None and r.ttft_s > slo_ttft:
            return False
        gaps = [(b - a) / NS for a, b in zip(r.token_times, r.token_times[1:])]
        return slo_itl is None or all(g <= slo_itl for g in gaps)

    return sum(1 for r in reqs if meets(r)) / len(reqs), None
