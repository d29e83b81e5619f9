"""`macprof run --serve` against the real servers on the tiny demo models, on 127.0.0.1 only:
mlx_lm.server and llama-cpp-python's server. Token counts are the server's and exact,
prefix reuse is what the server reports (mlx_lm.server does; llama-cpp-python's does not),
each concurrency level sends the requests it planned, and no server process is left, after a
run and after a Ctrl-C. Neither server reports its own timings (see docs/design.md): the
client-TTFT-versus-server-prompt-time check is tests/test_server_run.py's, on a fake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from macprof.store import runlog
from tests.test_run import macprof

pytestmark = pytest.mark.slow
GEN = 4
RUN = ["--phases", "warm,prefix,concurrency", "--concurrency", "1,2", "--prompt-tokens", "24", "--prefix-tokens", "16",
       "--gen-tokens", str(GEN), "--reps", "2", "--slo", "ttft:60s,itl:60s", "--timeout", "120"]
MODELS = {"llama.cpp": "gguf/demo-tiny-f16.gguf", "mlx": "mlx/demo-tiny-f16"}


def _servers(model_path) -> list[psutil.Process]:
    """Server processes on this model (macprof's own command line names it)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(model_path) in cmd and ("llama_cpp.server" in cmd or "mlx_lm server" in cmd):
            out.append(p)
    return out


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_serve_measures_the_real_server_and_stops_it(kind, tiny_dir, tmp_path):
    model = tiny_dir / MODELS[kind]
    log_path = tmp_path / "run.json"
    proc = macprof("run", "--serve", kind, str(model), "--in-process", *RUN, "--log", str(log_path))
    assert "server load" in proc.stdout
    m = runlog.load(log_path).models[0]
    v = m.engine_versions
    assert v["served_by"] == "macprof" and v["server"] == kind and "--host 127.0.0.1" in v["command"]
    assert v["version"] and v["startup_s"] > 0
    assert v["cold_start_to_first_token_s"] >= v["startup_s"] and v["cold_first_request_ttft_s"] > 0
    assert "Server overhead" in proc.stdout and {x.identity.name for x in runlog.load(log_path).models} == {
        m.identity.name, f"{model.stem}@in-process"}  # --in-process: the same file, in-process
    assert not psutil.pid_exists(v["pid"]) or v["pid"] not in [p.pid for p in _servers(model)]
    assert not _servers(model)
    requests = [r for r in m.phases.warm.requests if r.status == "ok"]
    requests += [p.reuse for p in m.phases.prefix.pairs if p.reuse and p.reuse.status == "ok"]
    assert len(requests) >= 4
    assert "exact prompt lengths" in v["tokenizer"]  # --serve knows the file: the model's own tokenizer
    for r in requests:
        srv = r.server
        assert r.prompt_tokens == 24 and srv["prompt_tokens_source"] in ("usage", "tokenize endpoint")
        assert r.n_tokens == srv["completion_tokens"]
        if kind == "llama.cpp":  # logprobs name each chunk's token; min_tokens holds EOS off
            assert srv["count_source"] == "per-chunk logprobs/tokens" and srv["completion_tokens"] == GEN
            assert sum(srv["chunk_tokens"]) == GEN
        else:  # usage; EOS cannot be ignored, so a short answer is flagged with its real count
            assert srv["count_source"] == "usage" and srv["completion_tokens"] >= 1
            assert srv["completion_tokens"] == GEN or any(f.startswith("count:") for f in srv["flags"])
    reused = [p.reuse.reused_tokens for p in m.phases.prefix.pairs if p.kind == "measured"]
    if kind == "mlx":
        assert all(n and n > 0 for n in reused)  # mlx_lm.server's usage.prompt_tokens_details
    else:
        assert all(n is None for n in reused)  # llama-cpp-python's server does not say
    levels = {lv.id: lv for lv in m.phases.concurrency.levels}
    assert (levels["c1"].sent, levels["c2"].sent) == (2, 4)
    assert all(lv.ok == lv.sent and len(lv.requests) == lv.sent for lv in levels.values())
    assert m.phases.warm.memory.peak_rss_bytes  # the server's own RSS, sampled


def test_ctrl_c_stops_the_server(tiny_dir, tmp_path):
    model = tiny_dir / MODELS["llama.cpp"]
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", "--serve", "llama.cpp", str(model), "--phases",
                             "concurrency", "--concurrency", "1", "--load-requests", "100000", "--load-seconds", "600",
                             "--prompt-tokens", "8", "--gen-tokens", "64", "--log", str(tmp_path / "run.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    deadline = time.monotonic() + 120
    while not _servers(model) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _servers(model), "the server did not start"
    time.sleep(3)  # into the measurement
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(120)
    assert rc == 130
    assert not _servers(model)
