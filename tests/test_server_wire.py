"""The wire client against a tiny fake server on 127.0.0.1: documented response shapes (Ollama
NDJSON, LM Studio stats, llama.cpp timings) and the faults: refused, HTTP errors, malformed
lines, a death mid-stream, a stall past the limit."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from macprof.engines import counting, openai, wire

SSE_OK = [{"choices": [{"text": "a", "index": 0, "finish_reason": None}]},
          {"choices": [{"text": " b", "index": 0, "finish_reason": None}]},
          {"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
           "timings": {"prompt_n": 5, "prompt_ms": 12.5, "predicted_n": 2, "predicted_ms": 40.0, "cache_n": 3}}]
OLLAMA = [{"model": "m", "response": "a", "done": False}, {"model": "m", "response": " b", "done": False},
          {"model": "m", "response": "", "done": True, "done_reason": "length", "total_duration": 900000000,
           "load_duration": 100000000, "prompt_eval_count": 5, "prompt_eval_duration": 200000000,
           "eval_count": 2, "eval_duration": 500000000}]
LMSTUDIO = [{"choices": [{"delta": {"content": "a"}, "index": 0}]},
            {"choices": [{"delta": {"content": " b"}, "index": 0, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 2},
             "stats": {"tokens_per_second": 50.0, "time_to_first_token": 0.1, "generation_time": 0.04,
                       "stop_reason": "maxPredictedTokensReached"}}]


def _handler(mode: str):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if mode == "500":
                self.send_response(500)
                self.end_headers()
                self.wfile.write(json.dumps({"error": {"message": "model exploded"}}).encode())
                return
            self.send_response(200)
            self.end_headers()
            if mode == "ollama":
                for o in OLLAMA:
                    self.wfile.write((json.dumps(o) + "\n").encode())
                return
            lines = {"ok": SSE_OK, "lmstudio": LMSTUDIO}.get(mode, SSE_OK[:1])
            for o in lines:
                self.wfile.write(f"data: {json.dumps(o)}\n\n".encode())
                self.wfile.flush()
            if mode == "malformed":
                self.wfile.write(b"data: {not json\n\n")
            elif mode == "stall":
                threading.Event().wait(3)
            elif mode != "die":
                self.wfile.write(b"data: [DONE]\n\n")
    return H


@pytest.fixture
def serve(loopback):
    return lambda mode: loopback(_handler(mode)) + "/x"


def _run(url: str, ndjson: bool = False, limit: float = 10.0):
    items = list(wire.stream(url, {"prompt": "p"}, limit, ndjson))
    return [i for i in items if isinstance(i, wire.Chunk)], items[-1]


def test_llama_cpp_timings(serve):
    chunks, final = _run(serve("ok"))
    assert [c.text for c in chunks] == ["a", " b"]
    assert (final.completion_tokens, final.count_source, final.cached_tokens) == (2, "timings.predicted_n", 3)
    assert final.timings["prompt_s"] == pytest.approx(0.0125)


def test_ollama_ndjson(serve):
    chunks, final = _run(serve("ollama"), ndjson=True)
    assert len(chunks) == 2 and (final.completion_tokens, final.prompt_tokens) == (2, 5)
    assert final.timings["prompt_s"] == pytest.approx(0.2) and final.timings["load_s"] == pytest.approx(0.1)


def test_lmstudio_stats(serve):
    chunks, final = _run(serve("lmstudio"))
    assert [c.text for c in chunks] == ["a", " b"] and final.count_source == "usage"
    assert final.timings["ttft_s"] == pytest.approx(0.1) and final.timings["raw"]["stop_reason"] == "maxPredictedTokensReached"


def test_a_request_s_body_is_encoded_once_and_nothing_after_it_before_the_first_chunk(serve, monkeypatch):
    """The TTFT window (t0, before the request is sent, to the first chunk's stamp) holds the
    body's one encoding, to send it, and no other: the bound on the prompt's count is the size of
    the bytes sent (engines/wire.py ``prompt_room``), not a second encoding of the prompt."""
    encoded = []

    class Counted:  # wire's json, its encodings counted (the test server's own are not)
        def __getattr__(self, name):
            return getattr(json, name)

        def dumps(self, obj, *args, **kwargs):
            encoded.append(obj)
            return json.dumps(obj, *args, **kwargs)

    monkeypatch.setattr(wire, "json", Counted())
    body = {"prompt": "p", "messages": [{"role": "user", "content": "p"}]}
    items = wire.stream(serve("lmstudio"), body, 10.0, False)
    assert isinstance(next(items), wire.Chunk) and encoded == [body]  # the body, to send it
    final = list(items)[-1]
    assert encoded == [body] and final.prompt_tokens == 5 and not final.claims  # within what was sent
    size = len(json.dumps(body).encode())
    assert wire.prompt_room(size) == (size + wire.TEMPLATE_SLACK,
                                      f"the {size} bytes sent and {wire.TEMPLATE_SLACK} tokens a chat template may add")


@pytest.mark.parametrize("mode, message", [("500", "HTTP 500 Internal Server Error: model exploded"),
                                           ("malformed", "malformed stream line"),
                                           ("die", "closed the stream before its end marker")])
def test_faults(serve, mode, message):
    with pytest.raises(wire.ServerError, match=message):
        _run(serve(mode))


def test_stall_past_limit(serve):
    with pytest.raises(wire.ServerError, match="stalled"):
        _run(serve("stall"), limit=0.5)


def test_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(wire.ServerError, match="connection refused"):
        _run(f"http://127.0.0.1:{port}/x")


# -- what a timed request carries, and how its tokens are counted ------------------------------
# what makes a server do work an app's request would not: never on a timed request (issue #28)
COSTLY = {"logprobs", "top_logprobs", "echo", "n_probs", "post_sampling_probs", "return_tokens", "timings_per_token"}


@pytest.mark.parametrize("server", ["llama-server", "llama-cpp-python", "mlx_lm.server", "openai-compatible"])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_timed_requests_carry_nothing_costly(server, api):
    keys, how = openai.eos_keys(server, 32, [2])
    url, body = wire.request_for(api, "http://127.0.0.1:1/v1", "m", " apple", 32, keys)
    assert not COSTLY & body.keys() and body["stream"] is True and body["temperature"] == 0 and body["max_tokens"] == 32
    assert url.endswith("/chat/completions" if api == "chat" else "/completions")
    held = {"llama-server": {"ignore_eos": True}, "llama-cpp-python": {"min_tokens": 32},
            "mlx_lm.server": {"logit_bias": {"2": -100.0}}}.get(server)
    if held:  # only what this server honours: llama-cpp-python's logit_bias would cost it a Python pass per token
        assert {k: body[k] for k in held} == held and not ({"ignore_eos", "min_tokens", "logit_bias"} - held.keys()) & body.keys()
    assert how


def test_eos_without_a_tokenizer_is_said():
    assert openai.eos_keys("mlx_lm.server", 8, [])[1].startswith("none: the model's EOS ids are unknown")
    assert "logit_bias" not in openai.eos_keys("openai-compatible", 8, [])[0]


@pytest.mark.parametrize("names, key, value", [("offsets", "logprobs", 0), ("ids-logprobs", "logprobs", True),
                                               (None, None, None)])
def test_counting_request_is_the_timed_one_unstreamed(names, key, value):
    _, timed = wire.request_for("completions", "http://h:1/v1", "m", " apple", 8, {"min_tokens": 8})
    url, body = wire.counting_request_for("completions", "http://h:1/v1", "m", " apple", 8, {"min_tokens": 8}, names)
    assert body["stream"] is False and body["prompt"] == timed["prompt"] and body["min_tokens"] == 8
    assert (body.get(key) if key else None) == value and url == "http://h:1/v1/completions"
    url, body = wire.counting_request_for("completions", "http://h:1/v1", "m", " apple", 8, {"ignore_eos": True},
                                          "ids-native")
    assert url == "http://h:1/completion" and body["return_tokens"] and body["n_predict"] == 8 and body["ignore_eos"]


def test_replies_name_their_tokens():
    native = wire.reply({"content": " a b", "tokens": [5, 6], "tokens_predicted": 2})
    assert (native.text, native.completion_tokens, native.ids) == (" a b", 2, (5, 6))
    mlx = wire.reply({"choices": [{"text": " a b", "logprobs": {"content": [{"id": 5, "logprob": 0}, {"id": 6, "logprob": 0},
                                                                            {"id": 2, "logprob": 0}]}}],
                      "usage": {"completion_tokens": 3}})
    assert mlx.ids == (5, 6, 2) and mlx.completion_tokens == 3 and mlx.pieces is None
    top = wire.reply({"choices": [{"text": " a", "logprobs": {"content": [{"id": 5, "token": "Ġa", "logprob": 0}]}}]})
    assert top.pieces == ("Ġa",)
    lcp = wire.reply({"choices": [{"text": " a b", "logprobs": {"tokens": [" a", " b"], "text_offset": [7, 9]}}],
                      "usage": {"completion_tokens": 2}})
    assert lcp.offsets == (7, 9) and lcp.ids is None
    chat = wire.reply({"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 1}})
    assert (chat.text, chat.completion_tokens) == ("hi", 1)
    with pytest.raises(wire.ServerError):
        wire.reply({"object": "error"})


def test_align_places_tokens_in_chunks():
    # "é" split over two byte tokens arrives as one chunk; the first k tokens spell prefixes[k - 1]
    texts = [" a", "é", " b"]
    prefixes = [" a", " a\ufffd", " aé", " aé b", " aé b</s>"]
    assert counting.align(texts, prefixes) == [1, 2, 1]
    assert counting.align([" a", " c"], prefixes) is None  # tokens that do not spell the chunks
    assert counting.prefixes_from_offsets(" aé b", [10, 12, 12, 13]) == (" a", " a", " aé", " aé b")


def test_raw_token_strings_spell_the_text():
    # a byte-level BPE's alphabet ("Ġ" a space, "Ã©" the two bytes of "é"), and a SentencePiece's
    assert counting.prefixes_from_pieces(["Ġa", "Ã", "©", "</s>"]) == (" a", " a\ufffd", " aé", " aé</s>")
    assert counting.prefixes_from_pieces(["▁a", "<0xC3>", "<0xA9>"]) == (" a", " a\ufffd", " aé")
    assert counting.prefixes_from_pieces(["a b"]) is None  # neither (a space is no byte-level character)


def test_settle_one_per_chunk_from_a_free_count():
    s = counting.settle([" a", " b"], 2, "usage", None)
    assert (s.completion_tokens, s.count_source, s.chunk_tokens, s.counting) == (2, "usage", [1, 1], None)
    s = counting.settle([" a", " b"], None, None, None)  # nothing counted: unknown, never the chunks
    assert s.completion_tokens is None and s.chunk_tokens is None


def test_settle_an_eos_the_server_counted_but_did_not_stream():
    # mlx_lm.server stopped at EOS: usage 3 (the EOS among them), 2 chunks with text
    counted = counting.Counted(" a b", 3, (" a", " a b", " a b</s>"), "ids")
    s = counting.settle([" a", " b"], 3, "usage", counted)
    assert (s.completion_tokens, s.chunk_tokens, s.unstamped, s.counting["status"]) == (3, [1, 1], 1, "ok")
    assert any(f.startswith("unstamped: 1") for f in s.flags)


def test_settle_refuses_a_counting_request_of_another_text():
    s = counting.settle([" a", " b"], None, None, counting.Counted(" a c", 2))
    assert s.completion_tokens is None and s.chunk_tokens is None and s.counting["status"] == "differs"
    s = counting.settle([" a", " b c"], None, None, counting.Counted(" a b c", 3))  # a total, no placing
    assert (s.completion_tokens, s.chunk_tokens) == (3, None) and s.count_source.startswith("counting request")


def test_no_count_gives_no_rate():
    from macprof.measure.timeline import derive

    d = derive(0, 0, [10, 20, 30], 4, None, None, chunked=True)
    assert d.n_tokens == 0 and d.decode_tok_s is None and d.ttft_s == 10e-9
    d = derive(0, 0, [10, 20, 30], 4, [1, 2, 1], 4, chunked=True)
    assert d.n_tokens == 4 and d.decode_tok_s == pytest.approx(3 / 20e-9)


# -- issue 23: reads bounded in time and size, one bad line fails one request, impossible values are claims


def _raw_handler(write):
    """A server whose POST answer is whatever ``write(handler)`` writes (headers included)."""
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.do_POST()

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                write(self)
            except OSError:
                pass  # the client gave up
    return H


def _ok_headers(h, kind: str = "text/event-stream"):
    h.send_response(200)
    h.send_header("Content-Type", kind)
    h.end_headers()


def test_a_trickling_server_is_bounded_by_the_request_deadline(loopback):
    import time

    def trickle(h):
        _ok_headers(h)
        h.wfile.write(b"data: ")
        for _ in range(40):
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(0.1)

    url = loopback(_raw_handler(trickle)) + "/x"
    t = time.monotonic()
    with pytest.raises(wire.ServerError, match="did not end within --timeout 1 s"):
        list(wire.stream(url, {}, 0.8, False, given_s=1.0))
    assert time.monotonic() - t < 1.8


def test_a_stream_line_past_the_cap_fails_its_request(loopback, monkeypatch):
    monkeypatch.setattr(wire, "LINE_CAP", 1000)

    def long_line(h):
        _ok_headers(h)
        h.wfile.write(b"data: " + b"a" * 5000)

    with pytest.raises(wire.ServerError, match="longer than 1000 bytes"):
        list(wire.stream(loopback(_raw_handler(long_line)) + "/x", {}, 5.0, False))


def test_a_body_past_the_cap_fails_its_request(loopback, monkeypatch):
    monkeypatch.setattr(wire, "BODY_CAP", 1000)

    def endless(h):
        _ok_headers(h, "application/json")
        h.wfile.write(b"[" + b"1," * 5000)

    with pytest.raises(wire.ServerError, match="longer than 1000 bytes"):
        wire.get_json(loopback(_raw_handler(endless)) + "/v1/models", timeout=5.0)


@pytest.mark.parametrize("line", [b'{"x": ' + b"9" * 5000 + b"}", b"[" * 900 + b"]" * 900,
                                  b"[" * 100000 + b"]" * 100000])
def test_one_hostile_stream_line_is_a_server_error(loopback, line):
    def send(h):
        _ok_headers(h)
        h.wfile.write(b"data: " + line + b"\n\n")

    with pytest.raises(wire.ServerError, match="malformed stream line"):
        list(wire.stream(loopback(_raw_handler(send)) + "/x", {}, 5.0, False))


def test_a_redirect_or_an_html_page_says_what_came(loopback):
    def redirect(h):
        h.send_response(302)
        h.send_header("Location", "http://elsewhere/")
        h.end_headers()

    def html(h):
        _ok_headers(h, "text/html; charset=utf-8")
        h.wfile.write(b"<html>login</html>")

    with pytest.raises(wire.ServerError, match="HTTP 302.*redirect"):
        list(wire.stream(loopback(_raw_handler(redirect)) + "/x", {}, 5.0, False))
    with pytest.raises(wire.ServerError, match="an HTML page, not an event stream"):
        list(wire.stream(loopback(_raw_handler(html)) + "/x", {}, 5.0, False))


def test_no_answer_names_the_timeout_the_user_gave(loopback):
    import time

    def silent(h):
        time.sleep(1.5)

    with pytest.raises(wire.ServerError, match="no answer within --timeout 0.5 s"):
        list(wire.stream(loopback(_raw_handler(silent)) + "/x", {}, 0.4, False, given_s=0.5))


IMPOSSIBLE = [{"choices": [{"text": "ab", "index": 0, "finish_reason": None}]},
              {"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
               "timings": {"prompt_n": -7, "prompt_ms": float("nan"), "predicted_ms": float("inf")},
               "usage": {"prompt_tokens": -7, "completion_tokens": 10 ** 9,
                         "prompt_tokens_details": {"cached_tokens": -5}}}]


def test_impossible_server_values_are_claims_never_figures(loopback):
    from macprof.run.phases import server_request

    def send(h):
        _ok_headers(h)
        for o in IMPOSSIBLE:
            h.wfile.write(f"data: {json.dumps(o)}\n\n".encode())  # json.dumps writes NaN / Infinity bare
        h.wfile.write(b"data: [DONE]\n\n")

    chunks, final = _run(loopback(_raw_handler(send)) + "/x")
    assert (final.prompt_tokens, final.completion_tokens, final.cached_tokens) == (None, None, None)
    assert final.timings["prompt_s"] is None and final.timings["decode_s"] is None
    assert {"usage.prompt_tokens", "usage.prompt_tokens_details.cached_tokens", "timings.prompt_n",
            "timings.prompt_ms", "completion_tokens"} <= set(final.claims)
    json.dumps(final.timings, allow_nan=False)  # the raw report kept is JSON
    out = server_request.record(0, [1], chunks, final, 2, None, "ok", None)
    assert out["prompt_tokens"] == 0 and out["reused_tokens"] is None and out["server"].completion_tokens is None
    flags = " ".join(out["server"].flags)
    assert "claim: the server sent usage.prompt_tokens = -7" in flags and "EOS" not in flags
    assert wire._int(True) is None and wire._int(-1) is None and wire._num(float("nan")) is None


def test_the_journal_never_writes_non_json(tmp_path):
    from macprof.model.phase_events import LoadLevel
    from macprof.run.journal import Journal

    path = tmp_path / "j.jsonl"
    j = Journal.create(path)
    j.write(LoadLevel(phase="concurrency", case="r1", mode="open", rate=float("nan"), planned=1, sent=1,
                         t_start=0, t_end=1, time_limit_s=float("inf")))
    j.close()
    line = path.read_text().splitlines()[-1]
    obj = json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in the journal"))
    assert obj["rate"] is None and obj["time_limit_s"] is None and obj["sent"] == 1  # the record kept
