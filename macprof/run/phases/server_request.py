"""One request to a server, stamped chunk by chunk: t0 just before the request is sent (after
the prompt text is ready: a server tokenizes on its side, inside TTFT), t_i when the chunk
carrying token i is received. Used by warm, prefix and grid (through ``timed_request``) and by
the concurrency phase's clients (``stream_request``, which shares nothing between threads).

The stamps are all the timed span holds: how many tokens the request and each chunk carried is
settled after it (``engine.settle``: the server's free count, or an untimed counting request,
engines/counting.py), so nothing that counts runs while the chunks arrive."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from macprof.errors import reason
from macprof.model.phases import CountingRequest, ServerReport
from macprof.run.prompts import Prompt

if TYPE_CHECKING:  # the HTTP client (http.client, ssl) is imported by the requests that use it, not
    from macprof.engines import counting, wire  # by every run that imports the phase registry
    from macprof.engines.base import ServerEngine

Clock = Callable[[], int]
CHUNK_CHARS = 4096  # of a chunk's text kept in the log (its bytes were counted in full on the wire)


def server_request(engine: ServerEngine, prompt: Prompt, n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """One request through ``engine.request`` (the engine keeps the server's final report),
    its count settled after it, within what the request's time limit leaves."""
    sent = prompt.messages if prompt.messages and engine.renders_messages else None  # the server renders them
    # untimed, before t0; messages the server renders are counted by the server alone
    counted = None if sent else engine.prompt_tokens(prompt.text)
    ids = (engine.tokenize_chat if prompt.chat else engine.tokenize)(prompt.text)  # a chat prompt: as it was built
    times: list[int] = []
    t0 = clock()
    try:
        # each chunk's token count; its text: engine.last_chunks
        for _ in engine.request(prompt.text, n, sent):
            times.append(clock())
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - the server's error, or a reply its reader could not read: this request's
        status, error = "error", reason(exc)
    raw = {"t0": t0, "times": times, "chunks": list(engine.last_chunks[: len(times)]), "status": status,
           "error": error, "final": engine.last_final if status == "ok" else None}
    spent = (time.perf_counter_ns() - t0) / 1e9
    # a tokenizer here built the prompt (its text sent, not messages): its length is known exactly
    exact = len(ids) if engine.exact_prompts and status == "ok" and not sent else None
    return finish(engine, raw, prompt.text, n, counted, budget_s=max(0.0, engine.timeout - spent), messages=sent,
                  exact=exact)


def stream_request(engine: ServerEngine, text: str, n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """The timed part alone, through ``engine.stream``, which shares nothing: for
    concurrent clients (their counts are settled by ``finish`` once the level has ended, so that
    no counting request joins the load)."""
    from macprof.engines import wire

    times: list[int] = []
    chunks: list[wire.Chunk] = []
    final = None
    t0 = clock()
    try:
        for item in engine.stream(text, n):
            if isinstance(item, wire.Final):
                final = item
            else:
                times.append(clock())
                chunks.append(item)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - a client thread's error is its request's, never lost with the thread
        status, error = "error", reason(exc)
    return {"t0": t0, "times": times, "chunks": chunks, "status": status, "error": error, "final": final}


def finish(engine: ServerEngine, raw: dict, text: str, n: int, counted: int | None, budget_s: float | None = None,
           messages: Sequence[dict] | None = None, exact: int | None = None) -> dict:
    """The request's record from its timed part: its count settled (untimed), then ``record``."""
    from macprof.engines import counting, wire

    final = raw["final"] or wire.Final()
    if raw["status"] == "ok":
        settled = engine.settle(text, n, raw["chunks"], final, budget_s, messages)
    else:
        settled = counting.Settled(final.completion_tokens, final.count_source, None, "the request failed")
    return record(raw["t0"], raw["times"], raw["chunks"], final, n, counted, raw["status"], raw["error"], settled,
                  engine.eos_how, engine.holds_eos, exact)


def claim_flag(key: str, claim: str) -> str:
    return f"claim: the server sent {key} = {claim[:200]}, impossible: not taken as a measurement"


EXACT = "the tokenizer that built the prompt"  # a prompt's count where a tokenizer here built it


def record(t0: int, times: list[int], chunks: list[wire.Chunk], final: wire.Final | None, n: int,
           counted: int | None, status: str, error: str | None, settled: counting.Settled | None = None,
           eos: str | None = None, holds_eos: bool = True, exact: int | None = None) -> dict:
    """The request's fields: raw chunk times and texts, and ``server``: what the server reported
    and how its tokens were counted (a ServerReport), with flags for what differs from the
    request asked for. The prompt's tokens: the server's count, else ``counted`` (its tokenize
    endpoint's, before the request), else ``exact`` (the length of the ids a tokenizer here built
    the prompt as, which a server's count is held to); the cached tokens the server reports are
    bounded by them, once, here (more than the prompt has is its claim, never a count)."""
    from macprof.engines import counting, wire

    f = final or wire.Final()
    s = settled or counting.settle([c.text for c in chunks], f.completion_tokens, f.count_source, None)
    prompt_tokens, source = ((f.prompt_tokens, "usage") if f.prompt_tokens is not None else
                             (counted, "tokenize endpoint") if counted is not None else
                             (exact, EXACT) if exact is not None else (None, None))
    if prompt_tokens is not None:  # more reused than the prompt has: a claim (the engine's reuse_unreported says so)
        wire.bound(f, prompt_most=(prompt_tokens, "the prompt's tokens"))
    flags = list(s.flags)
    # fewer than asked is a flag where EOS was held off; an app's reply (a conversation's) may end at EOS
    if s.completion_tokens is not None and (s.completion_tokens > n or holds_eos and s.completion_tokens != n):
        flags.append(f"count: {s.completion_tokens} tokens of the {n} asked (finish: {f.finish_reason}); "
                     f"EOS was not held off ({eos or 'no way known'}): the tokens received are measured")
    if s.chunk_tokens and max(s.chunk_tokens) > 1:
        flags.append("multi-token chunks: ITL is per chunk, with each chunk's token count")
    if status == "ok" and s.completion_tokens is None:
        flags.append("the server reported no token count, and no counting request gave one")
    for key, claim in sorted(f.claims.items()):  # impossible values: the server's claim, never a figure
        flags.append(claim_flag(key, claim))
    if exact is not None and source != EXACT and prompt_tokens != exact:  # the server's count must agree with it
        flags.append(f"prompt: the server counted {prompt_tokens} tokens, {exact} asked")
    cached = f.cached_tokens
    server = ServerReport(
        completion_tokens=s.completion_tokens, count_source=s.count_source,
        chunk_tokens=tuple(s.chunk_tokens) if s.chunk_tokens is not None else None,
        chunk_tokens_source=s.chunk_source, unstamped_tokens=s.unstamped,
        prompt_tokens_source=source,
        cached_tokens=cached, cached_tokens_source=f.cached_source if cached is not None else None,
        finish_reason=f.finish_reason, eos=eos,
        counting=CountingRequest(**s.counting) if s.counting else None, timings=f.timings or None, flags=tuple(flags),
        **({"claims": dict(f.claims)} if f.claims else {}))
    out: dict[str, Any] = {
        "status": status, "error": error, "t0": t0, "t_tokenized": t0, "token_times": times,
        "tokens": [c.text[:CHUNK_CHARS] for c in chunks], "prompt_tokens": prompt_tokens or 0, "reused_tokens": cached,
        "computed_prompt_tokens": (prompt_tokens - cached) if prompt_tokens is not None and cached is not None
        else prompt_tokens, "cached_tokens_after": None, "kv_cache_bytes": None, "engine_memory": None,
        "server": server}
    return out
