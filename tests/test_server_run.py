"""`macprof run --endpoint` against a fake OpenAI-compatible server on 127.0.0.1 (a
llama.cpp-style one: streamed usage with cached prompt tokens, and its own timings): warm,
prefix and concurrency end to end, the server's figures beside the client's, the request
counts per level, goodput, a server that fails some requests, and bad server options."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from macprof.cli_serve import parse_slo
from macprof.errors import MacprofError
from macprof.store import runlog
from tests.test_run import macprof

PROMPT_S = 0.01  # the fake's "prefill": it sleeps, and reports the time it slept


def _handler(state: dict):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path != "/v1/completions":  # no tokenize endpoint
                self.send_response(404)
                self.end_headers()
                return
            with state["lock"]:
                state["n"] += 1
                fail = state.get("fail_every") and state["n"] % state["fail_every"] == 0
                words = req.get("prompt", "").split()
                last, state["last"] = state.get("last", []), words
            if fail:
                self.send_response(503)
                self.end_headers()
                self.wfile.write(json.dumps({"error": {"message": "the fake is overloaded"}}).encode())
                return
            cached = 0
            while cached < min(len(words), len(last)) and words[cached] == last[cached]:
                cached += 1
            t = time.perf_counter()
            time.sleep(PROMPT_S)
            prompt_ms = (time.perf_counter() - t) * 1e3
            self.send_response(200)
            self.end_headers()
            n = int(req["max_tokens"])
            for i in range(n):
                self._send({"choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}]})
            self._send({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                        "timings": {"prompt_n": len(words) + 1 - cached, "prompt_ms": prompt_ms, "cache_n": cached,
                                    "predicted_n": n, "predicted_ms": 1.0}})
            self._send({"choices": [], "usage": {"prompt_tokens": len(words) + 1, "completion_tokens": n,
                                                 "prompt_tokens_details": {"cached_tokens": cached}}})
            self.wfile.write(b"data: [DONE]\n\n")

        def _send(self, obj: dict) -> None:
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()
    return H


@pytest.fixture
def fake_server(loopback):
    def start(**state) -> str:
        state.update(n=0, lock=threading.Lock())
        return loopback(_handler(state)) + "/v1"

    return start


RUN = ["--prompt-tokens", "12", "--prefix-tokens", "8", "--gen-tokens", "3", "--reps", "2", "--timeout", "30"]


def test_endpoint_run_warm_prefix_concurrency(fake_server, tmp_path):
    url = fake_server()
    log_path = tmp_path / "run.json"
    proc = macprof("run", "--endpoint", url, "--model", "fake-model", "--phases", "warm,prefix,concurrency",
                   "--concurrency", "1,2", "--slo", "ttft:10s,itl:10s", *RUN, "--log", str(log_path))
    assert "server load" in proc.stdout and "C=2" in proc.stdout
    m = runlog.load(log_path).models[0]
    assert m.identity.engine == "openai" and m.engine_versions["openai-endpoint"] == url
    warm = [r for r in m.phases.warm.requests if r.kind == "measured"]
    assert len(warm) == 2
    for r in warm:  # the server's count, each chunk one token, its timings beside the client's
        assert r.n_tokens == 3 and r.server["completion_tokens"] == 3 and r.server["count_source"] == "usage"
        assert r.server["chunk_tokens"] == [1, 1, 1] and not r.server["flags"]
        assert r.ttft_s >= r.server["timings"]["prompt_s"]
    reuse = [p.reuse for p in m.phases.prefix.pairs if p.kind == "measured"]
    assert all(r.reused_tokens and r.reused_tokens > 0 for r in reuse)  # what the server reported
    levels = {lv.id: lv for lv in m.phases.concurrency.levels}
    assert (levels["c1"].sent, levels["c2"].sent) == (2, 4)  # 2 x C, at least reps
    for lv in levels.values():
        assert lv.ok == lv.sent and lv.errors == 0 and len(lv.requests) == lv.sent
        assert lv.tokens == 3 * lv.sent and lv.goodput == 1.0
    assert m.memory is not None
    show = macprof("show", str(log_path)).stdout
    assert "peak RSS: unknown (the server is not a process macprof started" in show
    assert "server timings (llama.cpp timings" in show


def test_failed_requests_are_recorded_and_the_others_kept(fake_server, tmp_path):
    url = fake_server(fail_every=3)
    log_path = tmp_path / "run.json"
    macprof("run", "--endpoint", url, "--phases", "concurrency", "--concurrency", "2", "--load-requests", "6", "--slo", "ttft:10s",
            *RUN, "--log", str(log_path))
    lv = runlog.load(log_path).models[0].phases.concurrency.levels[0]
    assert lv.sent == 6 and lv.errors >= 1 and lv.ok >= 1 and lv.ok + lv.errors == 6
    assert any("HTTP 503" in e and "the fake is overloaded" in e for e in lv.error_messages)
    assert lv.goodput is not None and lv.goodput < 1.0  # a failed request meets no SLO


def test_open_loop_rate_is_seeded(fake_server, tmp_path):
    url = fake_server()
    log_path = tmp_path / "run.json"
    macprof("run", "--endpoint", url, "--rate", "50", "--load-requests", "3", *RUN, "--log", str(log_path))
    lv = runlog.load(log_path).models[0].phases.concurrency.levels[0]
    assert lv.mode == "open" and lv.rate == 50 and lv.seed == 0 and lv.sent == 3 and lv.ok == 3


@pytest.mark.parametrize("args, message", [
    (["--endpoint", "ftp://127.0.0.1:1/v1", "--model", "m"], "is not an http:// URL"),
    (["--endpoint", "http://127.0.0.1:9/v1"], "no model list"),
    (["--model", "m"], "--model applies to --endpoint"),
    (["--serve", "vllm", "x"], "is not one of mlx, llama.cpp"),
    (["--in-process"], "--in-process applies to --serve"),
    (["--endpoint", "http://127.0.0.1:9/v1", "--serve", "mlx", "x"], "give one"),
    (["--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--slo", "ttft=fast"], "--slo"),
])
def test_bad_server_options_exit_2(args, message, tmp_path):
    proc = macprof("run", *args, "--log", str(tmp_path / "x.json"), check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_parse_slo():
    assert parse_slo("ttft:1s,itl:100ms") == {"slo_ttft": 1.0, "slo_itl": 0.1}
    assert parse_slo("TTFT=0.5") == {"slo_ttft": 0.5}
    with pytest.raises(MacprofError):
        parse_slo("e2e:1s")
