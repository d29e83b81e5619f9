"""The wire side of a local inference server: one streamed request, read chunk by chunk.

Three dialects (``api``): ``completions`` (OpenAI ``/completions``, raw prompt text), ``chat``
(OpenAI ``/chat/completions``, the prompt as one user message) and ``ollama`` (``/api/generate``,
raw prompt, NDJSON). Server-sent events follow the OpenAI streaming format (``data: {...}``
lines, ``data: [DONE]`` at the end); Ollama streams one JSON object per line, the last with
``done: true``.

What is read and never guessed: tokens are the server's count (streamed ``usage``,
llama.cpp's ``timings.predicted_n``, Ollama's ``eval_count``, or the tokens a chunk's
``logprobs`` / ``tokens`` list), never the number of chunks (engines/counting.py settles the
tokens per chunk, with an untimed counting request where needed); the server's own timings
(llama.cpp ``timings``, Ollama ``*_duration`` in ns, LM Studio ``stats``) are kept as
reported beside normalised seconds. Nothing here takes a timestamp: the caller stamps each
chunk as it is yielded. Only http:// is spoken (local servers).
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import urlsplit

ERROR_CHARS = 500  # of a server's error body
LINE_CAP = 1 << 20  # bytes of one stream line: a longer one fails its request
BODY_CAP = 16 << 20  # bytes of a non-streamed body (model lists, counting, tokenize, error bodies)
READ_BYTES = 65536  # one read of a stream
SPECIAL_SLACK = 8  # tokens with no text a count may hold beyond its chunks (EOS, stop tokens)
# tokens a server's chat template may add to the prompt it was sent (role markers, a default
# system turn, a tools preamble): a prompt count beyond the bytes sent and this is the server's claim
TEMPLATE_SLACK = 2048
COUNT_MAX = 2 ** 63 - 1  # a count a log holds (a signed 64-bit integer): a larger one is a claim


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
    cached_source: str | None = None  # where cached_tokens came from
    finish_reason: str | None = None
    count_source: str | None = None  # where completion_tokens came from
    timings: dict[str, Any] = field(default_factory=dict)  # normalised seconds + the raw report
    # impossible values the server sent (negative, non-finite, not a number, more tokens than the
    # text sent or streamed can hold): its claim as a string, keyed by field, never a figure
    # (server_request.py flags them and keeps them in the request's server record)
    claims: dict[str, str] = field(default_factory=dict)


# Options that make a server do work an app's request would not ask for (vocabulary-wide
# log-probabilities, echoed prompts, per-token timings): never on a timed request. Counting
# requests (untimed, engines/openai.py) may ask for what names their tokens.
COSTLY = ("logprobs", "top_logprobs", "echo", "n_probs", "post_sampling_probs", "return_tokens",
          "timings_per_token", "return_progress")


def request_for(api: str, base: str, model: str, text: str, n: int, eos: dict | None = None,
                messages: list[dict] | None = None) -> tuple[str, dict]:
    """The path and JSON body of a timed greedy streamed request for ``n`` tokens after ``text``:
    what an app would send, plus ``eos``, the keys that hold EOS off on this server
    (engines/openai.py ``eos_keys``), and streamed usage (the count, at no cost, where the
    server has it). Nothing of COSTLY. ``messages``: a chat request's, as they are (a conversation's
    turns); else the text is one user message."""
    if api == "ollama":
        root = base.rstrip("/").removesuffix("/api")
        return root + "/api/generate", {"model": model, "prompt": text, "raw": True, "stream": True,
                                        "options": {"num_predict": n, "temperature": 0, "seed": 0}}
    body: dict[str, Any] = {"model": model, "max_tokens": n, "stream": True, "temperature": 0,
                            "stream_options": {"include_usage": True}, **(eos or {})}
    if api == "chat":
        return base.rstrip("/") + "/chat/completions", {
            **body, "messages": list(messages) if messages else [{"role": "user", "content": text}]}
    return base.rstrip("/") + "/completions", {**body, "prompt": text}


def counting_request_for(api: str, base: str, model: str, text: str, n: int, eos: dict | None,
                         names: str | None, messages: list[dict] | None = None) -> tuple[str, dict]:
    """The untimed counting request of a timed one: the same prompt, greedy settings and EOS
    keys, not streamed, and ``names``, what makes this server name its tokens: "ids-native"
    (llama.cpp's own /completion with return_tokens), "ids-logprobs" (mlx_lm.server's
    ``logprobs: true``), "offsets" (llama-cpp-python's ``logprobs: 0``: each token's text offset),
    or None (its usage count only)."""
    if names == "ids-native":
        root = base.rstrip("/").removesuffix("/v1")
        return root + "/completion", {"prompt": text, "n_predict": n, "temperature": 0, "stream": False,
                                      "return_tokens": True, **(eos or {})}
    url, body = request_for(api, base, model, text, n, eos, messages)
    body = {k: v for k, v in body.items() if k != "stream_options"}
    body["stream"] = False
    if api == "ollama":
        return url, body
    if names == "ids-logprobs":  # ids, and the top token's raw string (greedy: the one chosen)
        body.update(logprobs=True, top_logprobs=1)
    elif names == "offsets":
        body["logprobs"] = 0
    return url, body


@dataclass(frozen=True)
class Reply:
    """A non-streamed reply: its text, token count, and what names its tokens (ids, or each
    token's text offset), where the server gave them."""

    text: str
    completion_tokens: int | None
    ids: tuple[int, ...] | None = None
    offsets: tuple[int, ...] | None = None
    pieces: tuple[str, ...] | None = None  # each token's raw vocabulary string


def reply(obj: Any) -> Reply:
    """The text, count and token names of a non-streamed reply (OpenAI completions or chat,
    llama.cpp's /completion, Ollama's /api/generate); ServerError for any other shape."""
    if not isinstance(obj, dict):
        raise ServerError(f"not a completion reply: {str(obj)[:200]}")
    if "content" in obj and isinstance(obj.get("tokens"), list):  # llama.cpp's own /completion
        named = tuple(t for t in obj["tokens"] if _int(t) is not None)
        return Reply(str(obj.get("content") or ""), _int(obj.get("tokens_predicted"), len(named)), named)
    if "response" in obj:  # Ollama
        return Reply(str(obj.get("response") or ""), _int(obj.get("eval_count")))
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ServerError(f"not a completion reply: {json.dumps(obj)[:200]}")
    choice = choices[0]
    message: dict = choice["message"] if isinstance(choice.get("message"), dict) else {}
    text = _text(choice.get("text"), "choices[0].text") if "text" in choice else \
        _text(message.get("content"), "choices[0].message.content")
    usage: dict = obj["usage"] if isinstance(obj.get("usage"), dict) else {}
    total = _int(usage.get("completion_tokens"))
    lp: dict = choice["logprobs"] if isinstance(choice.get("logprobs"), dict) else {}
    ids: tuple[int, ...] | None = None
    offsets: tuple[int, ...] | None = None
    pieces: tuple[str, ...] | None = None
    if isinstance(lp.get("content"), list) and all(isinstance(c, dict) and _int(c.get("id")) is not None
                                                   for c in lp["content"]):
        ids = tuple(c["id"] for c in lp["content"])  # mlx_lm.server names ids
        if all(isinstance(c.get("token"), str) for c in lp["content"]):
            pieces = tuple(c["token"] for c in lp["content"])  # and, with top_logprobs, their raw strings
    if isinstance(lp.get("text_offset"), list) and all(_int(o) is not None for o in lp["text_offset"]):
        offsets = tuple(lp["text_offset"])  # llama-cpp-python: where each token starts in the text
    return Reply(str(text or ""), total, ids, offsets, pieces)


@dataclass(frozen=True)
class ChatReply:
    """A non-streamed chat completion as the tasks phase reads it: the message's text and tool
    calls (each ``{"name", "arguments"}`` as the server gave them), why it ended, and the
    server's usage counts, each checked where it entered (``claims``: what was no count)."""

    text: str
    tool_calls: tuple[dict, ...]
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    claims: dict[str, str]


def chat_reply(obj: Any, max_tokens: int, sent_bytes: int) -> ChatReply:
    """A non-streamed chat completion (OpenAI ``/chat/completions``) read and checked: a reply of
    another shape (not an object, no choices, ``choices: [1]``, a list as the content, a tool
    call that is no object) is a ServerError naming what is wrong; a usage count that is none
    (negative, a float, a string, past COUNT_MAX) or more than the request allows (completion
    tokens past ``max_tokens``, prompt tokens past what the ``sent_bytes`` of its body, the
    messages and tools, can hold: ``prompt_room``) is the server's claim, kept in ``claims``,
    never a count."""
    top = _object(obj, "the reply")
    if "error" in top:
        raise ServerError(f"the server reported an error: {_error_text(json.dumps(top).encode())}")
    choices = _array(top.get("choices"), "choices")
    if not choices:
        raise ServerError("a malformed reply: choices is an empty list")
    choice = _object(choices[0], "choices[0]")
    message = _object(choice.get("message"), "choices[0].message")
    calls = []
    for i, call in enumerate(_array(message.get("tool_calls"), "choices[0].message.tool_calls", none=True)):
        where = f"choices[0].message.tool_calls[{i}]"
        function = _object(_object(call, where).get("function"), where + ".function")
        calls.append({"name": _optional(function.get("name"), where + ".function.name"),
                      "arguments": function.get("arguments")})
    final = Final()
    usage = top.get("usage")
    if isinstance(usage, dict):
        final.prompt_tokens = _count(usage, "prompt_tokens", final, "usage.")
        final.completion_tokens = _count(usage, "completion_tokens", final, "usage.")
    elif usage is not None:
        final.claims["usage"] = _shown(usage)
    bound(final, completion_most=(max_tokens + SPECIAL_SLACK, f"max_tokens {max_tokens} asked"),
          prompt_most=prompt_room(sent_bytes))
    return ChatReply(_text(message.get("content"), "choices[0].message.content"), tuple(calls),
                     _optional(choice.get("finish_reason"), "choices[0].finish_reason"), final.prompt_tokens,
                     final.completion_tokens, dict(final.claims))


def prompt_room(sent_bytes: int) -> tuple[int, str]:
    """The most prompt tokens a request whose body was ``sent_bytes`` long can hold, and why: a
    token is at least one byte of what was sent (the whole body, its prompt's text or messages and
    tools among the rest: an over-count), plus what a chat template may add of its own
    (TEMPLATE_SLACK). The size of the bytes already encoded to be sent: encoding the prompt a
    second time would fall inside the request's TTFT window (the bound is read as the stream's
    first chunk is)."""
    return sent_bytes + TEMPLATE_SLACK, f"the {sent_bytes} bytes sent and {TEMPLATE_SLACK} tokens a chat template may add"


def stream(url: str, body: dict, deadline_s: float, ndjson: bool, given_s: float | None = None) -> Iterator[Chunk | Final]:
    """POST ``body`` to ``url`` and yield each chunk as it arrives, then one Final. Raises
    ServerError for a refused connection, an HTTP error, a malformed line, a stream cut before
    its end marker or one not ended within ``deadline_s`` (counted from the call, whatever the
    server trickles); ``given_s``, the --timeout the user gave (of which ``deadline_s`` is the
    request's share), is the number the messages name."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ServerError(f"{url}: only http:// URLs of a local server are supported")
    end = time.monotonic() + deadline_s
    limit = _limit(deadline_s, given_s)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=max(0.01, deadline_s))
    try:
        try:
            payload = json.dumps(body).encode()  # the one encoding: sent, and its size bounds the prompt's count
            conn.request("POST", parts.path or "/", payload, {"Content-Type": "application/json",
                                                              "Accept": "text/event-stream"})
            resp = conn.getresponse()
        except ConnectionRefusedError:
            raise ServerError(f"connection refused: {parts.hostname}:{parts.port}") from None
        except (socket.timeout, TimeoutError):
            raise ServerError(f"no answer {limit}") from None
        except OSError as exc:
            raise ServerError(f"{type(exc).__name__}: {exc}") from None
        if resp.status >= 400:
            raise ServerError(f"HTTP {resp.status} {resp.reason}: {_error_text(resp.read(4096))}")
        if 300 <= resp.status < 400:
            raise ServerError(f"HTTP {resp.status} {resp.reason}: a redirect (to {resp.getheader('Location')!r}), "
                              f"not an answer; macprof follows none: give the server's own URL")
        kind = (resp.getheader("Content-Type") or "").lower()
        if "text/html" in kind:
            raise ServerError(f"HTTP {resp.status}: an HTML page, not an event stream ({kind}): "
                              f"is the URL the server's API?")
        yield from _read(resp, conn, end, limit, ndjson, prompt_room(len(payload)))
    finally:
        conn.close()


def _limit(deadline_s: float, given_s: float | None) -> str:
    """The request's limit in words: the user's --timeout where it is known."""
    if given_s is None:
        return f"within {deadline_s:g} s"
    return f"within --timeout {given_s:g} s (the request gave up at {deadline_s:g} s, leaving time to record it)"


def _read(resp, conn, end: float, limit: str, ndjson: bool, prompt_most: tuple[int, str] | None = None
          ) -> Iterator[Chunk | Final]:
    final = Final()
    state: dict[str, Any] = {"chunks": 0, "counted": 0, "per_chunk": True, "bytes": 0}
    for raw in _lines(resp, conn, end, limit):
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
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, int digits past the limit, nesting
            raise ServerError(f"malformed stream line ({type(exc).__name__}): {line[:200]!r}") from None
        if not isinstance(obj, dict):
            raise ServerError(f"malformed stream line (not an object): {line[:200]!r}")
        if "error" in obj:
            raise ServerError(f"the server reported an error mid-stream: {_error_text(json.dumps(obj).encode())}")
        chunk = _ollama(obj, final) if ndjson else _openai(obj, final)
        # a chunk that names a token but no text (a piece of a multi-byte character) still
        # carries that token: it is yielded, so its arrival is stamped and its token counted
        if chunk is not None and (chunk.text or chunk.tokens):
            state["chunks"] += 1
            state["bytes"] += len(chunk.text.encode("utf-8"))
            if chunk.tokens is None:
                state["per_chunk"] = False
            else:
                state["counted"] += chunk.tokens
            yield chunk
        if ndjson and obj.get("done"):
            break
    _settle_count(final, state)
    bound(final, completion_most=(state["bytes"] + state["chunks"] + SPECIAL_SLACK,
                                  f"the {state['chunks']} chunks and {state['bytes']} bytes of text streamed can carry"),
          prompt_most=prompt_most)
    yield final


def _lines(resp, conn, end: float, limit: str) -> Iterator[bytes]:
    """The stream's lines (b"" once it ends), each at most LINE_CAP bytes, the whole read
    bounded by ``end`` however slowly the server sends (each read waits at most the time left)."""
    buf = b""
    while True:
        cut = buf.find(b"\n")
        if cut >= 0:
            yield buf[: cut + 1]
            buf = buf[cut + 1:]
            continue
        if len(buf) > LINE_CAP:
            raise ServerError(f"a stream line longer than {LINE_CAP} bytes (the cap of one line)")
        try:
            data = _read_by(resp, conn, end, f"stalled: the stream did not end {limit}")
        except (http.client.HTTPException, OSError) as exc:
            raise ServerError(f"the stream broke off: {type(exc).__name__}: {exc}") from None
        if not data:
            if buf:
                yield buf
            yield b""
            return
        buf += data


def bound(final: Final, completion_most: tuple[int, str] | None = None,
          prompt_most: tuple[int, str] | None = None) -> None:
    """Each count of ``final`` within what the request allows, else the server's claim (kept in
    ``final.claims``, the count None): the completion tokens within ``completion_most`` (what the
    streamed text can carry: a token is at least one byte of text, allowing one empty token per
    chunk and SPECIAL_SLACK more, EOS and other special tokens that stream no text; or the
    max_tokens asked), the prompt tokens within ``prompt_most`` (``prompt_room``), the cached
    tokens within the prompt. Each bound is (the most, why)."""
    if completion_most is not None and final.completion_tokens is not None and final.completion_tokens > completion_most[0]:
        final.claims["completion_tokens"] = f"{final.completion_tokens} (more than {completion_most[1]})"
        final.completion_tokens, final.count_source = None, None
    if prompt_most is not None and final.prompt_tokens is not None and final.prompt_tokens > prompt_most[0]:
        final.claims["prompt_tokens"] = f"{final.prompt_tokens} (more than {prompt_most[1]})"
        final.prompt_tokens = None
    cached_most = (final.prompt_tokens, "the prompt's tokens") if final.prompt_tokens is not None else prompt_most
    if cached_most is not None and final.cached_tokens is not None and final.cached_tokens > cached_most[0]:
        final.claims["cached_tokens"] = f"{final.cached_tokens} (more than {cached_most[1]}, {cached_most[0]})"
        final.cached_tokens, final.cached_source = None, None


def _settle_count(final: Final, state: dict) -> None:
    """The request's token count: the server's total where it gave one, else the sum of the
    per-chunk counts it gave (a server that names each chunk's tokens unasked; macprof asks no
    timed request to, engines/counting.py settles them otherwise)."""
    if final.completion_tokens is None and state["per_chunk"] and state["chunks"]:
        final.completion_tokens, final.count_source = state["counted"], "per-chunk logprobs/tokens"


def _openai(obj: dict, final: Final) -> Chunk | None:
    """One OpenAI stream chunk: its text, and what it reports of the request (usage, llama.cpp's
    timings, LM Studio's stats), each count read by ``_count``. A chunk of another shape
    (``choices: [1]``, a list as the text) fails the request, named."""
    _claims({k: obj[k] for k in ("usage", "timings", "stats") if isinstance(obj.get(k), dict)}, final)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        final.prompt_tokens = _or(_count(usage, "prompt_tokens", final, "usage."), final.prompt_tokens)
        completion = _count(usage, "completion_tokens", final, "usage.")
        if completion is not None:
            final.completion_tokens, final.count_source = completion, "usage"
        details = usage.get("prompt_tokens_details")
        cached = _count(details, "cached_tokens", final, "usage.prompt_tokens_details.") \
            if isinstance(details, dict) else None
        if cached is not None:
            final.cached_tokens, final.cached_source = cached, "usage.prompt_tokens_details.cached_tokens"
    elif usage is not None:  # OpenAI streams "usage": null until the last chunk
        final.claims["usage"] = _shown(usage)
    timings = obj.get("timings")
    if isinstance(timings, dict):  # llama.cpp's server (the last one holds the totals)
        final.timings = {"source": "llama.cpp timings", "prompt_s": _ms(timings.get("prompt_ms")),
                         "decode_s": _ms(timings.get("predicted_ms")), "raw": _raw(timings)}
        cached = _count(timings, "cache_n", final, "timings.")
        if cached is not None:
            final.cached_tokens, final.cached_source = cached, "timings.cache_n"
        computed = _count(timings, "prompt_n", final, "timings.")  # the tokens it computed: the prompt less what it reused
        if computed is not None and usage_prompt(obj) is None:
            final.prompt_tokens = computed + (final.cached_tokens or 0)
        predicted = _count(timings, "predicted_n", final, "timings.")
        if final.count_source != "usage" and predicted is not None:
            final.completion_tokens, final.count_source = predicted, "timings.predicted_n"
    stats = obj.get("stats")
    if isinstance(stats, dict):  # LM Studio's REST API (/api/v0)
        final.timings = {"source": "LM Studio stats", "ttft_s": _num(stats.get("time_to_first_token")),
                         "decode_s": _num(stats.get("generation_time")), "raw": _raw(stats)}
        final.finish_reason = _optional(stats.get("stop_reason"), "stats.stop_reason") or final.finish_reason
    choices = _array(obj.get("choices"), "choices", none=True)
    if not choices:
        return None
    choice = _object(choices[0], "choices[0]")
    final.finish_reason = _optional(choice.get("finish_reason"), "choices[0].finish_reason") or final.finish_reason
    delta = _object(choice.get("delta"), "choices[0].delta", none=True)
    text = _text(choice.get("text"), "choices[0].text") if "text" in choice else (
        _text(delta.get("content"), "choices[0].delta.content") or
        _text(delta.get("reasoning_content"), "choices[0].delta.reasoning_content"))
    return Chunk(text, _chunk_tokens(obj, choice))


def usage_prompt(obj: dict) -> int | None:
    usage = obj.get("usage")
    return _int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None


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
    _claims({k: v for k, v in obj.items() if k.endswith(("_duration", "_count"))}, final)
    if obj.get("done"):
        final.completion_tokens = _count(obj, "eval_count", final, "")
        final.count_source = "eval_count" if final.completion_tokens is not None else None
        final.prompt_tokens = _count(obj, "prompt_eval_count", final, "")
        final.finish_reason = _optional(obj.get("done_reason"), "done_reason")
        final.timings = {"source": "ollama durations", "prompt_s": _ns(obj.get("prompt_eval_duration")),
                         "decode_s": _ns(obj.get("eval_duration")), "load_s": _ns(obj.get("load_duration")),
                         "total_s": _ns(obj.get("total_duration")),
                         "raw": _raw({k: v for k, v in obj.items() if k.endswith(("_duration", "_count"))})}
    text = obj.get("response")
    if text is None and isinstance(obj.get("message"), dict):  # /api/chat
        return Chunk(_text(obj["message"].get("content"), "message.content"), None)
    return Chunk(_text(text, "response"), None)


def _int(v: Any, default: int | None = None) -> int | None:
    """A count: a non-negative int (not a bool) that a log holds (at most COUNT_MAX); anything
    else is no count (``default``)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= COUNT_MAX else default


def _or(value: int | None, default: int | None) -> int | None:
    return default if value is None else value


def _count(obj: dict, key: str, final: Final, where: str) -> int | None:
    """The count a server's report gives at ``obj[key]``, where every count a server reports
    enters (usage, timings, Ollama's counts): a value there that is no count (negative, a float,
    a string, past COUNT_MAX) is the server's claim, kept in ``final.claims`` under ``where +
    key``, and no count is taken. Whether it fits the request is ``bound``'s."""
    value = obj.get(key)
    n = _int(value)
    if n is None and value is not None:
        final.claims[where + key] = _shown(value)
    return n


def _what(v: Any) -> str:
    """What a JSON value is, in words (for a malformed reply's message)."""
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(v), type(v).__name__)


def _shown(v: Any) -> str:
    """A server's value as its claim is kept: a scalar as it reads, a container by its size."""
    if isinstance(v, (dict, list)):
        return f"{_what(v)} of {len(v)} item(s)"
    return repr(v)[:200]


def _malformed(where: str, v: Any, want: str) -> ServerError:
    return ServerError(f"a malformed reply: {where} is {_what(v)}, not {want}")


def _object(v: Any, where: str, none: bool = False) -> dict:
    """``v``, a JSON object (``none``: absent or null reads as an empty one), else a ServerError naming ``where``."""
    if isinstance(v, dict):
        return v
    if none and v is None:
        return {}
    raise _malformed(where, v, "an object")


def _array(v: Any, where: str, none: bool = False) -> list:
    if isinstance(v, list):
        return v
    if none and v is None:
        return []
    raise _malformed(where, v, "a list")


def _text(v: Any, where: str) -> str:
    """A text field of a reply: its text, "" for null or absent, else a ServerError naming ``where``."""
    return _optional(v, where) or ""


def _optional(v: Any, where: str) -> str | None:
    """A string field of a reply that may be null (a finish reason): the string or None, else a ServerError."""
    if v is None or isinstance(v, str):
        return v
    raise _malformed(where, v, "a string")


def _num(v: Any) -> float | None:
    """A duration or rate: a finite non-negative number (not a bool), else None."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _impossible(v: Any) -> bool:
    """A number no count or duration can be: negative, NaN or infinite."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return v < 0 if isinstance(v, int) else not (math.isfinite(v) and v >= 0)


def _claims(obj: dict, final: Final, where: str = "") -> None:
    """Each impossible number of what is read of a stream object (usage, timings, stats, Ollama's
    counts and durations), kept as the server's claim (a string)."""
    for k, v in obj.items():
        if isinstance(v, dict) and where.count(".") < 3:
            _claims(v, final, f"{where}{k}.")
        elif _impossible(v):
            final.claims[f"{where}{k}"] = repr(v)


RAW_DEPTH = 4  # levels of a server's own report kept as they are; deeper ones by their size


def _raw(v: Any, depth: int = 0) -> Any:
    """A server's own report as kept in the log: JSON a log reads back (a non-finite number, or
    an integer past 64 bits, as its claim, a string; nesting past RAW_DEPTH by its size)."""
    if isinstance(v, (dict, list)) and depth >= RAW_DEPTH:
        return _shown(v)
    if isinstance(v, dict):
        return {str(k): _raw(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_raw(x, depth + 1) for x in v]
    if isinstance(v, float) and not math.isfinite(v) or isinstance(v, int) and abs(v) > COUNT_MAX:
        return repr(v)
    return v


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


def get_json(url: str, timeout: float = 5.0, body: dict | bytes | None = None) -> Any:
    """A small GET (or POST with ``body``: a JSON object, or one already encoded) that answers
    JSON; ServerError otherwise."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    try:
        if body is None:
            conn.request("GET", parts.path or "/")
        else:
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            conn.request("POST", parts.path or "/", payload, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = _body(resp, conn, time.monotonic() + timeout, timeout)
        if resp.status >= 400:
            raise ServerError(f"HTTP {resp.status}: {_error_text(data)}")
        return json.loads(data)
    except (OSError, http.client.HTTPException, ValueError, RecursionError) as exc:
        raise ServerError(f"{url}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def _read_by(resp, conn, end: float, late: str) -> bytes:
    """One read of at most READ_BYTES that waits no later than ``end`` (monotonic): however
    slowly a server sends, ServerError(``late``) once the time is up."""
    left = end - time.monotonic()
    if left <= 0:
        raise ServerError(late)
    if conn.sock is not None:
        conn.sock.settimeout(left)
    try:
        return resp.read1(READ_BYTES)
    except (socket.timeout, TimeoutError):
        raise ServerError(late) from None


def _body(resp, conn, end: float, timeout: float) -> bytes:
    """A non-streamed body, at most BODY_CAP bytes, read within ``timeout`` however slowly it comes."""
    parts: list[bytes] = []
    size = 0
    while True:
        data = _read_by(resp, conn, end, f"the answer did not end within {timeout:g} s")
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > BODY_CAP:
            raise ServerError(f"an answer longer than {BODY_CAP} bytes (the cap of a non-streamed body)")
        parts.append(data)
