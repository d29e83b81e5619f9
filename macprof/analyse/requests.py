"""A request's figures from its raw timestamps, and a phase's summary of them: the pure
derivations every phase's record is built from (analyse/build.py, analyse/cold.py)."""

from __future__ import annotations

from typing import Sequence

from macprof.measure import stats
from macprof.measure.timeline import derive
from macprof.model import events as ev
from macprof.model.phases import Failure, Itl, Metrics, Request, Summary


def summarized(values: Sequence[float | None], failures: int = 0) -> Summary:
    return Summary(**stats.summarize(values, failures=failures))


def request_record(e: ev.Request) -> Request:
    """A raw request event plus the figures derived from its timestamps."""
    raw = e.record()
    server = raw.server  # a server's request: its stamps are chunk arrivals, its counts settled after it
    d = derive(raw.t0, raw.t_tokenized, raw.token_times, raw.computed_prompt_tokens or raw.prompt_tokens or 0,
               server.chunk_tokens if server else None,
               (server.completion_tokens - (server.unstamped_tokens or 0)) if server and server.completion_tokens
               is not None else None, chunked=server is not None, t_prefilled=raw.t_prefilled)
    itl = sorted(d.itl_s)
    # its head is the event's (the phase is not the record's); a sweep's tags only where it has them
    tags = {k: getattr(e, k) for k in ("case", "batch", "cached_tokens_before") if e.has(k)}
    return raw.replace(
        index=e.index, kind=e.kind, mode=e.mode, **tags, reused_tokens=raw.reused_tokens,
        computed_prompt_tokens=raw.computed_prompt_tokens, cached_tokens_after=raw.cached_tokens_after,
        kv_cache_bytes=raw.kv_cache_bytes, engine_memory=raw.engine_memory, n_tokens=d.n_tokens,
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


def phase_failures(failures: list[Failure], phase: str) -> list[Failure]:
    return [f for f in failures if f.phase == phase]
