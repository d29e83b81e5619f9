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

from macprof.bench import fake_server as fakes
from macprof.config.settings import parse_slo
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
            if state.get("trickle") and state["n"] == 1:  # the first request: one byte every 0.2 s
                self.send_response(200)
                self.end_headers()
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
                return
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
            usage = {"prompt_tokens": len(words) + 1, "completion_tokens": n,
                     "prompt_tokens_details": {"cached_tokens": cached}, **state.get("usage", {})}
            self._send({"choices": [], "usage": usage})
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
        assert r.n_tokens == 3 and r.server.completion_tokens == 3 and r.server.count_source == "usage"
        assert r.server.chunk_tokens == (1, 1, 1) and not r.server.flags
        assert r.ttft_s >= r.server.timings["prompt_s"]
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


# -- measured as they are: nothing costly on a timed request, exact lengths or a loud warning ----
# (macprof/bench/fake_server.py plays the servers: llama-cpp-python's shape, one without a tokenizer)
COSTLY = {"logprobs", "top_logprobs", "echo", "n_probs", "post_sampling_probs", "return_tokens", "timings_per_token"}
GEN = 4
LENGTHS = ["--prompt-tokens", "12", "--prefix-tokens", "8", "--gen-tokens", str(GEN), "--reps", "2", "--timeout", "30"]


def _fake(loopback, **options) -> tuple[str, dict]:
    state = fakes.new_state(token_ms=1, **options)
    return loopback(fakes.handler(state)) + "/v1", state


def _timed(state: dict) -> list[int]:
    """Where the timed requests are among the bodies the fake received: streamed, the asked length."""
    return [i for i, b in enumerate(state["bodies"]) if b.get("stream") is True and b.get("max_tokens") == GEN]


def test_llama_cpp_python_like_server_is_measured_as_it_is(loopback, tmp_path):
    """No streamed count, a tokenize endpoint, min_tokens honoured, every third chunk two tokens."""
    url, state = _fake(loopback, usage=False, tokenizer="llama-cpp-python", group=3, honours=("min_tokens",))
    log_path = tmp_path / "run.json"
    macprof("run", "--endpoint", url, "--phases", "warm,prefix,concurrency", "--concurrency", "2", *LENGTHS,
            "--log", str(log_path))
    bodies, timed = state["bodies"], _timed(state)
    assert len(timed) == 3 + 6 + 4  # warm (with its warm-up), the prefix pairs, the level
    for b in (bodies[i] for i in timed):  # what an app would send, and what holds EOS off here
        assert not COSTLY & b.keys() and b["min_tokens"] == GEN and "logit_bias" not in b
    assert all(b.get("stream") is False for b in bodies if "logprobs" in b)  # only counting requests name tokens
    # the level's requests ran back to back: their counting requests came after them all
    assert all(bodies[i].get("stream") for i in range(timed[-4], timed[-1] + 1))
    m = runlog.load(log_path).models[0]
    v = m.engine_versions
    assert v["server_kind"] == "llama-cpp-python" and v["tokenizer"].startswith("the server's own tokenizer (/extras")
    reqs = [r for r in m.phases.warm.requests if r.kind == "measured"]
    reqs += [h for p in m.phases.prefix.pairs if p.kind == "measured" for h in (p.reuse, p.noreuse)]
    reqs += list(m.phases.concurrency.levels[0].requests)
    for r in reqs:
        srv = r.server
        assert r.prompt_tokens == 12 and srv.completion_tokens == GEN and sum(srv.chunk_tokens) == GEN
        assert srv.count_source.startswith("counting request") and srv.counting.status == "ok"
        assert srv.chunk_tokens == (1, 1, 2) and srv.counting.named_by == "text offsets"  # placed in the text
        assert r.decode_tok_s and srv.eos.startswith("min_tokens")


def test_a_server_whose_tokenizer_cannot_be_had_says_so(loopback, tmp_path, fake_dir):
    """Word prompts (the server counts one more token: its BOS) and an EOS after 2 tokens that
    nothing here can hold off, counted in its usage but sent with no text (as mlx_lm.server does):
    the real lengths in the log, a warning each, decode over the 2 tokens that came (placed in the
    chunks by the raw token strings its counting request named), and `compare` flags the row
    against a run of the asked lengths."""
    url, state = _fake(loopback, eos_after=2, honours=("logit_bias",))
    log_path = tmp_path / "run.json"
    out = macprof("run", "--endpoint", url, "--phases", "warm", *LENGTHS, "--log", str(log_path)).stdout
    assert "prompts were 13 tokens (the server's count) where 12 were asked" in out
    assert "replies were 3 tokens where 4 were asked: EOS was not held off" in out
    assert all("logit_bias" not in state["bodies"][i] for i in _timed(state))  # its EOS ids are not known here
    for r in (r for r in runlog.load(log_path).models[0].phases.warm.requests if r.kind == "measured"):
        srv = r.server  # 2 tokens stamped, the EOS counted after them
        assert (r.prompt_tokens, srv.completion_tokens, srv.chunk_tokens, srv.unstamped_tokens) == (13, 3, (1, 1), 1)
        assert r.n_tokens == 2 and r.decode_tok_s and srv.counting.named_by == "raw token strings"
        assert any(f.startswith("count: 3 tokens of the 4 asked") for f in srv.flags)
    local = tmp_path / "local.json"
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--phases", "warm", *LENGTHS,
            "--log", str(local))
    assert "measured prompt/gen lengths" in macprof("compare", str(local), str(log_path)).stdout


def test_overhead_sets_the_server_path_against_a_minimal_client(loopback):
    url, state = _fake(loopback)
    proc = macprof("overhead", "--endpoint", url, "--pairs", "2", "--reps", "2", "--depth", "12", "--gen-tokens",
                   str(GEN), "--json")
    results = json.loads(proc.stdout)
    assert [r["metric"] for r in results] == ["decode tok/s", "TTFT s"]
    for r in results:
        assert len(r["ratios"]) == r["pairs"] == 2 and r["same_outputs"] == "4/4"
        assert r["ratio_ci95"][0] <= r["median_ratio"] <= r["ratio_ci95"][1]
    timed = [state["bodies"][i] for i in _timed(state)]
    ours = [b for b in timed if "stream_options" in b]
    raw = [b for b in timed if "stream_options" not in b]  # the minimal client's: prompt, greedy, length, EOS
    assert ours and raw and all(b.keys() <= {"path", "model", "prompt", "max_tokens", "stream", "temperature",
                                             "ignore_eos", "min_tokens"} for b in raw)
    assert {b["prompt"] for b in raw} == {b["prompt"] for b in ours}  # the same prompts on both sides


@pytest.mark.parametrize("args, message", [
    (["--endpoint", "ftp://127.0.0.1:1/v1", "--model", "m"], "is not an http:// URL"),
    (["--endpoint", "http://127.0.0.1:9/v1", "--serve", "mlx", "x"], "give one"),
    (["--serve", "vllm", "x"], "is not one of mlx, llama.cpp, llama-server"),
])
def test_bad_overhead_server_options_exit_2(args, message):
    proc = macprof("overhead", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("usage", [{"prompt_tokens": -7}, {"completion_tokens": 10 ** 9},
                                   {"prompt_tokens_details": {"cached_tokens": -5}}, {"completion_tokens": float("nan")}])
def test_impossible_server_values_leave_a_log_that_reads(fake_server, tmp_path, usage):
    """issue 23 rows 4 and 10: the claim and the reason recorded, no figure, and the log reads."""
    url = fake_server(usage=usage)
    log_path = tmp_path / "run.json"
    macprof("run", "--endpoint", url, "--model", "fake-model", "--phases", "warm", *RUN, "--log", str(log_path))
    text = log_path.read_text()
    assert "NaN" not in text.replace('"nan"', "") and "Infinity" not in text
    m = runlog.load(log_path).models[0]
    warm = [r for r in m.phases.warm.requests if r.kind == "measured"]
    key = next(iter(usage))
    for r in warm:
        said = "completion_tokens = 1000000000 (more than" if usage == {"completion_tokens": 10 ** 9} else "usage." + key
        assert any(f.startswith("claim: the server sent " + said) for f in r.server.flags), r.server.flags
        if key == "prompt_tokens":
            assert r.prompt_tokens > 0  # the timings' count (prompt_n + cache_n), not the claim
        if key == "completion_tokens":  # never the claim: the timings' count, or none
            assert r.server.completion_tokens in (3, None) and r.n_tokens in (3, 0)
        if key == "prompt_tokens_details":
            assert r.reused_tokens != -5
    macprof("show", str(log_path))
    macprof("compare", str(log_path), str(log_path))


def test_a_trickling_request_fails_alone_within_its_timeout(fake_server, tmp_path):
    """issue 23 row 5: the trickled request fails with a timeout reason within --timeout, and the
    level's other requests are still sent and measured."""
    url = fake_server(trickle=True)
    log_path = tmp_path / "run.json"
    t = time.monotonic()
    macprof("run", "--endpoint", url, "--model", "fake-model", "--phases", "concurrency", "--rate", "20",
            "--load-requests", "3", *RUN[:-2], "--timeout", "2", "--log", str(log_path))
    lv = runlog.load(log_path).models[0].phases.concurrency.levels[0]
    assert lv.sent == 3 and lv.errors == 1 and lv.ok == 2
    assert any("did not end within --timeout 2 s" in e for e in lv.error_messages), lv.error_messages
    assert time.monotonic() - t < 30
