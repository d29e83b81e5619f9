"""One request to a server, stamped chunk by chunk: t0 just before the request is sent (after
the prompt text is ready: a server tokenizes on its side, inside TTFT), t_i when the chunk
carrying token i is received. Used by warm, prefix and grid (through ``timed_request``) and by
the concurrency phase's clients (``stream_request``, which shares nothing between threads)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from macprof.run.prompts import Prompt

if TYPE_CHECKING:  # the HTTP client (http.client, ssl) is imported by the requests that use it, not
    from macprof.engines import wire  # by every run that imports the phase registry

Clock = Callable[[], int]


def server_request(engine, prompt: Prompt, n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """One request through ``engine.generate`` (the engine keeps the server's final report)."""
    from macprof.engines import wire

    counted = engine.server_prompt_tokens(prompt.text)  # untimed: before t0
    ids = engine.tokenize(prompt.text)
    times: list[int] = []
    chunks: list[wire.Chunk] = []
    t0 = clock()
    try:
        for _ in engine.generate(ids, n):  # each chunk's token count; its text: engine.last_chunks
            times.append(clock())
        status, error = "ok", None
    except wire.ServerError as exc:
        status, error = "error", str(exc)
    chunks = list(engine.last_chunks[: len(times)])
    out = record(t0, times, chunks, engine.last_final if status == "ok" else None, n, counted, status, error)
    if getattr(engine, "_local", None) is not None and status == "ok" and out["server"]["prompt_tokens_source"] \
            and out["prompt_tokens"] != len(ids):  # the model's own tokenizer here: the counts must agree
        out["server"]["flags"].append(f"prompt: the server counted {out['prompt_tokens']} tokens, {len(ids)} asked")
    return out


def stream_request(engine, text: str, n: int, counted: int | None, clock: Clock = time.perf_counter_ns) -> dict:
    """The same through ``engine.open_stream``, which shares nothing: for concurrent clients."""
    from macprof.engines import wire

    times: list[int] = []
    chunks: list[wire.Chunk] = []
    final = None
    t0 = clock()
    try:
        for item in engine.open_stream(text, n):
            if isinstance(item, wire.Final):
                final = item
            else:
                times.append(clock())
                chunks.append(item)
        status, error = "ok", None
    except wire.ServerError as exc:
        status, error = "error", str(exc)
    return record(t0, times, chunks, final, n, counted, status, error)


def record(t0: int, times: list[int], chunks: list[wire.Chunk], final: wire.Final | None, n: int,
           counted: int | None, status: str, error: str | None) -> dict:
    """The request's fields: raw chunk times and texts, and ``server``: what the server reported
    (tokens, where the count came from, tokens per chunk where known, its own timings), with
    flags for what differs from the request asked for."""
    from macprof.engines import wire

    f = final or wire.Final()
    per_chunk = [c.tokens for c in chunks]
    if chunks and all(k is not None for k in per_chunk):
        chunk_tokens: list[int] | None = [int(k) for k in per_chunk if k is not None]
        chunk_source = "reported per chunk"
    elif f.completion_tokens is not None and f.completion_tokens == len(chunks):
        # each chunk with text carries at least one token, so as many tokens as chunks is one each
        chunk_tokens, chunk_source = [1] * len(chunks), "one per chunk: the reported count equals the chunks with text"
    else:
        chunk_tokens, chunk_source = None, "unknown: the server names no tokens per chunk and its count differs from the chunks"
    flags = []
    if f.completion_tokens is not None and f.completion_tokens != n:
        flags.append(f"count: {f.completion_tokens} tokens of the {n} asked (finish: {f.finish_reason}); "
                     f"the server could not be made to ignore EOS")
    if chunk_tokens and max(chunk_tokens) > 1:
        flags.append("multi-token chunks: ITL is per chunk, with each chunk's token count")
    if status == "ok" and f.completion_tokens is None:
        flags.append("the server reported no token count")
    prompt_tokens = f.prompt_tokens if f.prompt_tokens is not None else counted
    cached = f.cached_tokens
    server: dict[str, Any] = {
        "completion_tokens": f.completion_tokens, "count_source": f.count_source, "chunk_tokens": chunk_tokens,
        "chunk_tokens_source": chunk_source, "prompt_tokens_source": "usage" if f.prompt_tokens is not None else (
            "tokenize endpoint" if counted is not None else None),
        "cached_tokens": cached, "finish_reason": f.finish_reason, "timings": f.timings or None, "flags": flags}
    return {"status": status, "error": error, "t0": t0, "t_tokenized": t0, "token_times": times,
            "tokens": [c.text for c in chunks], "prompt_tokens": prompt_tokens or 0, "reused_tokens": cached,
            "computed_prompt_tokens": (prompt_tokens - cached) if prompt_tokens is not None and cached is not None
            else prompt_tokens, "cached_tokens_after": None, "kv_cache_bytes": None, "engine_memory": None,
            "server": server}
