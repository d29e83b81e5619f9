"""`macprof run --serve` against the real servers on the tiny demo models, on 127.0.0.1 only:
mlx_lm.server, llama-cpp-python's server and llama.cpp's own llama-server (a binary: from PATH,
$MACPROF_LLAMA_SERVER or where benchmarks/build_llama_server.sh builds it; skipped, saying so,
where there is none). Token counts are exact (the server's free count, or an untimed counting
request), EOS is held off on each (min_tokens, logit_bias, ignore_eos), prefix reuse is what the
server reports (mlx_lm.server and llama-server in their replies, llama-cpp-python's in its log), each concurrency
level sends the requests it planned, and no server process is left, after a run and after a
Ctrl-C. A user-started mlx_lm.server is measured with its model's tokenizer found from the model
id it serves, and with word prompts (and the warning) where none can be had."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from macprof.store import runlog
from tests.test_children import _alive
from tests.test_run import macprof

pytestmark = pytest.mark.slow
GEN = 4
RUN = ["--phases", "warm,prefix,concurrency", "--concurrency", "1,2", "--prompt-tokens", "24", "--prefix-tokens", "16",
       "--gen-tokens", str(GEN), "--reps", "2", "--slo", "ttft:60s,itl:60s", "--timeout", "120"]
MODELS = {"llama.cpp": "gguf/demo-tiny-f16.gguf", "mlx": "mlx/demo-tiny-f16", "llama-server": "gguf/demo-tiny-f16.gguf"}
EOS = {"llama.cpp": "min_tokens", "mlx": "logit_bias", "llama-server": "ignore_eos"}


def llama_server() -> str | None:
    """A llama-server binary: $MACPROF_LLAMA_SERVER, PATH, or benchmarks/build_llama_server.sh's default folder."""
    found = os.environ.get("MACPROF_LLAMA_SERVER") or shutil.which("llama-server")
    if found and Path(found).is_file():
        return found
    version = importlib.metadata.version("llama-cpp-python")
    built = Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-bench-{version}" / f"llama_cpp_python-{version}" / \
        "vendor/llama.cpp/build/bin/llama-server"
    return str(built) if built.is_file() else None


def _env(kind: str) -> dict:
    """llama-server is run from PATH: the one found, first."""
    if kind != "llama-server":
        return {}
    binary = llama_server()
    if binary is None:
        pytest.skip("no llama-server binary: build one with benchmarks/build_llama_server.sh (or put llama.cpp's on PATH)")
    return {"PATH": f"{Path(binary).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _servers(model_path) -> list[psutil.Process]:
    """Server processes on this model (macprof's own command line names it)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(model_path) in cmd and ("llama_cpp.server" in cmd or "mlx_lm server" in cmd or "llama-server" in cmd):
            out.append(p)
    return out


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_serve_measures_the_real_server_and_stops_it(kind, tiny_dir, tmp_path):
    model = tiny_dir / MODELS[kind]
    log_path = tmp_path / "run.json"
    proc = macprof("run", "--serve", kind, str(model), "--in-process", *RUN, "--log", str(log_path), env=_env(kind))
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
    for r in requests:  # EOS held off: exactly GEN tokens, each chunk's counted, so decode is known
        srv = r.server
        assert r.prompt_tokens == 24 and srv.prompt_tokens_source in ("usage", "tokenize endpoint")
        # (a byte of a character the reply ends on comes in a chunk with no text: counted, not stamped)
        assert srv.completion_tokens == GEN == sum(srv.chunk_tokens) + (srv.unstamped_tokens or 0)
        assert r.n_tokens == sum(srv.chunk_tokens) and (r.decode_tok_s or r.n_tokens < 2)
        assert srv.eos.startswith(EOS[kind]) and not [f for f in srv.flags if not f.startswith(("multi-token", "unstamped"))]
        if kind == "llama.cpp":  # no free count: an untimed counting request after the timed one
            assert srv.count_source.startswith("counting request") and srv.counting.status == "ok"
        else:  # streamed usage (and llama-server's own timings beside it)
            assert srv.count_source == "usage"
            assert (srv.timings or {}).get("prompt_s") is not None if kind == "llama-server" else not srv.timings
    measured = [p for p in m.phases.prefix.pairs if p.kind == "measured"]
    # usage.prompt_tokens_details / timings.cache_n; llama-cpp-python's server only in its log
    assert all(p.reuse.reused_tokens and p.reuse.reused_tokens > 0 for p in measured)
    source = {"llama.cpp": "the server's log", "mlx": "usage.", "llama-server": "timings.cache_n"}[kind]
    assert all(p.reuse.server.cached_tokens_source.startswith(source) for p in measured)
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


def test_a_sigkilled_run_leaves_no_server_and_a_bare_resume_finishes_it(tiny_dir, tmp_path):
    """Rows 3 and 15 of the second hostile campaign: `kill -9` of macprof during `--serve
    llama.cpp M` leaves no server (nor anything else it started) running; then `macprof run
    --resume JOURNAL` alone, in a folder with no models.toml, starts the server again and
    finishes the run."""
    model = tiny_dir / MODELS["llama.cpp"]
    log, journal = tmp_path / "run.json", tmp_path / "run.journal.jsonl"
    reps = 12
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", "--serve", "llama.cpp", str(model), "--phases",
                             "warm", "--reps", str(reps), "--prompt-tokens", "8", "--gen-tokens", "48", "--timeout",
                             "120", "--log", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not (journal.exists() and journal.read_text().count('"event":"request"') >= 3):
        assert proc.poll() is None, "the run ended before it was killed"
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert _servers(model) and len(children) >= 3  # the server, its watcher, the worker
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    end = time.monotonic() + 5
    while (_alive(children) or _alive(_servers(model))) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _alive(_servers(model)) and not _alive(children), [p.cmdline()[:3] for p in _alive(children)]
    done = subprocess.run([sys.executable, "-m", "macprof", "run", "--resume", str(journal)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    m = runlog.load(log).models[0]
    assert runlog.load(log).complete and m.identity.name.endswith("@llama.cpp-server")
    assert len([r for r in m.phases.warm.requests if r.kind == "measured" and r.status == "ok"]) == reps
    assert not _alive(_servers(model))


def test_a_running_mlx_server_is_measured_with_its_models_tokenizer(tiny_dir, tmp_path):
    """`--endpoint` to an mlx_lm.server the user started: the model id it serves (a folder) is
    resolved through the model stores, so prompts are exact and its EOS is held off by
    logit_bias (a decode figure); served as "default_model", no tokenizer can be had: word
    prompts, their real lengths, and the warning."""
    from macprof.run.serve import free_port

    model, port = tiny_dir / MODELS["mlx"], free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlx_lm", "server", "--model", str(model), "--host", "127.0.0.1",
                               "--port", str(port), "--log-level", "WARNING"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        from macprof.engines import wire

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                wire.get_json(url.removesuffix("/v1") + "/health", timeout=2.0)
                break
            except wire.ServerError:
                time.sleep(0.2)
        short = ["--phases", "warm", "--prompt-tokens", "24", "--gen-tokens", str(GEN), "--reps", "2", "--timeout", "120"]
        exact, words = tmp_path / "exact.json", tmp_path / "words.json"
        macprof("run", "--endpoint", url, "--model", str(model), *short, "--log", str(exact))
        out = macprof("run", "--endpoint", url, "--model", "default_model", *short, "--log", str(words)).stdout
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
    m = runlog.load(exact).models[0]
    assert "resolved through the model stores" in m.engine_versions["tokenizer"]
    for r in (r for r in m.phases.warm.requests if r.kind == "measured"):
        assert r.prompt_tokens == 24 and r.server.completion_tokens == GEN and r.decode_tok_s
        assert "logit_bias -100 on the EOS ids" in r.server.eos  # what holds it off there
    m = runlog.load(words).models[0]
    assert m.engine_versions["tokenizer"].startswith("words")
    counted = {r.prompt_tokens for r in m.phases.warm.requests if r.kind == "measured"}
    assert counted and 24 not in counted and "where 24 were asked" in out  # the demo tokenizer splits English words
