"""The wire side of a local inference server: one streamed request, read chunk by chunk.

Three dialects (``api``): ``completions`` (OpenAI ``/completions``, raw prompt text), ``chat``
(OpenAI ``/chat/completions``, the prompt as one user message) and ``ollama`` (``/api/generate``,
raw prompt, NDJSON). Server-sent events follow the OpenAI streaming format (``data: {...}``
lines, ``data: [DONE]`` at the end); Ollama streams one JSON object per line, the last with
``done: true``.

What is read and never guessed: tokens are the server's count (streamed ``usage``,
llama.cpp's ``timings.predicted_n``, Ollama's ``eval_count``, or the tokens a chunk's
``logprobs`` / ``tokens`` list), never the number of chunks; the server's own timings
(llama.cpp ``timings``, Ollama ``*_duration`` in ns, LM Studio ``stats``) are kept as
reported beside normalised seconds. Nothing here takes a timestamp: the caller stamps each
chunk as it is yielded. Only http:// is spoken (local servers).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import urlsplit

APIS = ("completions", "chat", "ollama")
ERROR_CHARS = 500  # of a server's error body


class ServerError(Exception):
    """A request that failed on the wire; the message carries the server's own words."""


@dataclass
class Chunk:
    """A piece of streamed text and the tokens it carries, where the server says (else None)."""

    text: str
    tokens: int | None


@dataclass
class Final:
    """What the server reported about the whole request once the stream ended."""

    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    count_source: str | None = None  # where completion_tokens came from
    timings: dict[str, Any] = field(default_factory=dict)  # normalised seconds + the raw report


def request_for(api: str, base: str, model: str, text: str, n: int, logprobs: bool = False) -> tuple[str, dict]:
    """The path and JSON body of a greedy request for ``n`` tokens after ``text``. EOS is
    suppressed where the server has a way: ``ignore_eos`` (llama.cpp's server), ``min_tokens``
    (llama-cpp-python's server); others ignore keys they do not know and may stop early,
    which the request record then flags."""
    if api == "ollama":
        root = base.rstrip("/").removesuffix("/api")
        return root + "/api/generate", {"model": model, "prompt": text, "raw": True, "stream": True,
                                        "options": {"num_predict": n, "temperature": 0, "seed": 0}}
    body: dict[str, Any] = {"model": model, "max_tokens": n, "stream": True, "temperature": 0, "seed": 0,
                            "stream_options": {"include_usage": True}, "ignore_eos": True, "min_tokens": n,
                            "cache_prompt": True, "timings_per_token": False}
    if api == "chat":
        return base.rstrip("/") + "/chat/completions", {**body, "messages": [{"role": "user", "content": text}]}
    # logprobs: llama-cpp-python's server then names the token each chunk carries (only sent to
    # it: mlx_lm.server refuses an integer there)
    return base.rstrip("/") + "/completions", {**body, "prompt": text, **({"logprobs": 0} if logprobs else {})}


def stream(url: str, body: dict, deadline_s: float, ndjson: bool) -> Iterator[Chunk | Final]:
    """POST ``body`` to ``url`` and yield each chunk as it arrives, then one Final. Raises
    ServerError for a refused connection, an HTTP error, a malformed line, a stream cut before
    its end marker or one stalled past ``deadline_s`` (counted from the call)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ServerError(f"{url}: only http:// URLs of a local server are supported")
    end = time.monotonic() + deadline_s
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=max(0.01, deadline_s))
    try:
        try:
            conn.request("POST", parts.path or "/", json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                             "Accept": "text/event-stream"})
            resp = conn.getresponse()
        except ConnectionRefusedError:
            raise ServerError(f"connection refused: {parts.hostname}:{parts.port}") from None
        except (socket.timeout, TimeoutError):
            raise ServerError(f"no answer within {deadline_s:g} s") from None
        except OSError as exc:
            raise ServerError(f"{type(exc).__name__}: {exc}") from None
        if resp.status >= 400:
            raise ServerError(f"HTTP {resp.status} {resp.reason}: {_error_text(resp.read(4096))}")
        yield from _read(resp, conn, end, deadline_s, ndjson)
    finally:
        conn.close()


def _read(resp, conn, end: float, deadline_s: float, ndjson: bool) -> Iterator[Chunk | Final]:
    final = Final()
    state: dict[str, Any] = {"chunks": 0, "counted": 0, "per_chunk": True}
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise ServerError(f"stalled: the stream did not end within {deadline_s:g} s")
        if conn.sock is not None:
            conn.sock.settimeout(left)
        try:
            raw = resp.readline()
        except (socket.timeout, TimeoutError):
            raise ServerError(f"stalled: no data for {left:.3g} s (the request's limit is {deadline_s:g} s)") from None
        except (http.client.HTTPException, OSError) as exc:
            raise ServerError(f"the stream broke off: {type(exc).__name__}: {exc}") from None
        if not raw:
            raise ServerError("the server closed the stream before its end marker (it may have died)")
        line = raw.decode("utf-8", errors="replace").strip()
        if not line or line.startswith(":"):  # SSE blank separators and comments (keep-alives)
            continue
        if not ndjson:
            if not line.startswith("data:"):
                continue  # other SSE fields (event:, id:, retry:)
            line = line[5:].strip()
            if line == "[DONE]":
                break
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise ServerError(f"malformed stream line: {line[:200]!r}") from None
        if not isinstance(obj, dict):
            raise ServerError(f"malformed stream line (not an object): {line[:200]!r}")
        if "error" in obj:
            raise ServerError(f"the server reported an error mid-stream: {_error_text(json.dumps(obj).encode())}")
        chunk = _ollama(obj, final) if ndjson else _openai(obj, final)
        # a chunk that names a token but no text (a piece of a multi-byte character) still
        # carries that token: it is yielded, so its arrival is stamped and its token counted
        if chunk is not None and (chunk.text or chunk.tokens):
            state["chunks"] += 1
            if chunk.tokens is None:
                state["per_chunk"] = False
            else:
                state["counted"] += chunk.tokens
            yield chunk
        if ndjson and obj.get("done"):
            break
    _settle_count(final, state)
    yield final


def _settle_count(final: Final, state: dict) -> None:
    """The request's token count: the server's total where it gave one, else the sum of the
    per-chunk counts it gave (llama-cpp-python names each chunk's token in logprobs)."""
    if final.completion_tokens is None and state["per_chunk"] and state["chunks"]:
        final.completion_tokens, final.count_source = state["counted"], "per-chunk logprobs/tokens"


def _openai(obj: dict, final: Final) -> Chunk | None:
    usage = obj.get("usage")
    if isinstance(usage, dict):
        final.prompt_tokens = _int(usage.get("prompt_tokens"), final.prompt_tokens)
        if _int(usage.get("completion_tokens")) is not None:
            final.completion_tokens, final.count_source = _int(usage.get("completion_tokens")), "usage"
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            final.cached_tokens = _int(details.get("cached_tokens"), final.cached_tokens)
    timings = obj.get("timings")
    if isinstance(timings, dict):  # llama.cpp's server (the last one holds the totals)
        final.timings = {"source": "llama.cpp timings", "prompt_s": _ms(timings.get("prompt_ms")),
                         "decode_s": _ms(timings.get("predicted_ms")), "raw": timings}
        final.prompt_tokens = _int(timings.get("prompt_n"), final.prompt_tokens)
        final.cached_tokens = _int(timings.get("cache_n"), final.cached_tokens)
        if final.count_source != "usage" and _int(timings.get("predicted_n")) is not None:
            final.completion_tokens, final.count_source = _int(timings.get("predicted_n")), "timings.predicted_n"
    stats = obj.get("stats")
    if isinstance(stats, dict):  # LM Studio's REST API (/api/v0)
        final.timings = {"source": "LM Studio stats", "ttft_s": _num(stats.get("time_to_first_token")),
                         "decode_s": _num(stats.get("generation_time")), "raw": stats}
        final.finish_reason = stats.get("stop_reason") or final.finish_reason
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    final.finish_reason = choice.get("finish_reason") or final.finish_reason
    raw_delta = choice.get("delta")
    delta: dict = raw_delta if isinstance(raw_delta, dict) else {}
    text = choice.get("text") if "text" in choice else (delta.get("content") or delta.get("reasoning_content") or "")
    return Chunk(str(text or ""), _chunk_tokens(obj, choice))


def _chunk_tokens(obj: dict, choice: dict) -> int | None:
    """Tokens a chunk names: llama-cpp-python's completion logprobs, OpenAI chat logprobs
    content, llama.cpp's ``tokens`` (return_tokens). None where it names none."""
    lp = choice.get("logprobs")
    if isinstance(lp, dict):
        if isinstance(lp.get("tokens"), list):
            return len(lp["tokens"])
        if isinstance(lp.get("content"), list):
            return len(lp["content"])
    if isinstance(obj.get("tokens"), list):
        return len(obj["tokens"])
    return None


def _ollama(obj: dict, final: Final) -> Chunk | None:
    if obj.get("done"):
        final.completion_tokens = _int(obj.get("eval_count"))
        final.count_source = "eval_count" if final.completion_tokens is not None else None
        final.prompt_tokens = _int(obj.get("prompt_eval_count"))
        final.finish_reason = obj.get("done_reason")
        final.timings = {"source": "ollama durations", "prompt_s": _ns(obj.get("prompt_eval_duration")),
                         "decode_s": _ns(obj.get("eval_duration")), "load_s": _ns(obj.get("load_duration")),
                         "total_s": _ns(obj.get("total_duration")),
                         "raw": {k: v for k, v in obj.items() if k.endswith(("_duration", "_count"))}}
    text = obj.get("response")
    if text is None and isinstance(obj.get("message"), dict):  # /api/chat
        text = obj["message"].get("content")
    return Chunk(str(text or ""), None)


def _int(v: Any, default: int | None = None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _ms(v: Any) -> float | None:
    x = _num(v)
    return None if x is None else x / 1e3


def _ns(v: Any) -> float | None:
    x = _num(v)
    return None if x is None else x / 1e9


def _error_text(body: bytes) -> str:
    """The server's message out of an error body (OpenAI ``error.message``, Ollama ``error``,
    FastAPI ``detail``), else the body's start."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return text[:ERROR_CHARS] or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail"))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:ERROR_CHARS]
    return text[:ERROR_CHARS]


def get_json(url: str, timeout: float = 5.0, body: dict | None = None) -> Any:
    """A small GET (or POST with ``body``) that answers JSON; ServerError otherwise."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", parts.path or "/")
        else:
            conn.request("POST", parts.path or "/", json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status >= 400:
            raise ServerError(f"HTTP {resp.status}: {_error_text(data)}")
        return json.loads(data)
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
        raise ServerError(f"{url}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
