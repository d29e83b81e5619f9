"""The wire client against a tiny fake server on 127.0.0.1: documented response shapes (Ollama
NDJSON, LM Studio stats, llama.cpp timings) and the faults: refused, HTTP errors, malformed
lines, a death mid-stream, a stall past the limit."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from macprof.engines import wire

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
