"""`macprof run` end to end, and the faults it must survive: on the fake engine (the fast tier),
and the end-to-end assertions again on the real engines with the tiny demo models (slow)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from macprof.store import runlog
from macprof.measure import stats

GEN = 8
COMMON = ["--prompt-tokens", "192", "--prefix-tokens", "176", "--gen-tokens", str(GEN), "--reps", "2",
          "--cold-trials", "1", "--timeout", "60"]


def macprof(*args, env=None, check=True):
    proc = subprocess.run([sys.executable, "-m", "macprof", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"macprof {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


FAKE = ("fake-a", "fake-b")
REAL = ("demo-tiny-q4_k_m", "demo-tiny-mlx-f16")


@pytest.fixture(scope="module", params=["fake", pytest.param("real", marks=pytest.mark.slow)])
def e2e_log(request, tmp_path_factory):
    """-> (run log path, the finished process, model names): one run of two models."""
    root = request.getfixturevalue("fake_dir" if request.param == "fake" else "tiny_build")
    names = FAKE if request.param == "fake" else REAL
    log = tmp_path_factory.mktemp("run") / "e2e.json"
    proc = macprof("run", "--config", str(root / "models.toml"), "--models", ",".join(names), *COMMON,
                   "--log", str(log))
    return log, proc, names


# what only a real engine shows: the same run, its real-engine instance
real_engines = pytest.mark.parametrize("e2e_log", [pytest.param("real", marks=pytest.mark.slow)], indirect=True)


def all_requests(model):
    ph = model["phases"]
    reqs = list(ph["warm"]["requests"])
    for pair in ph["prefix"]["pairs"]:
        reqs += [pair["reuse"], pair["noreuse"]]
    for trial in ph["cold"]["trials"]:
        reqs += [trial["first_request"], trial["second_request"]]
    return reqs


def test_run_log_validates_and_is_complete(e2e_log):
    path, proc, names = e2e_log
    data = json.loads(path.read_text())
    runlog.validate(data)
    assert data["complete"] is True
    assert [m["identity"]["name"] for m in data["models"]] == list(names)
    assert names[0] in proc.stdout and str(path) in proc.stdout
    assert data["definitions"]["decode_tok_s"] == "(n - 1) / (t_n - t_1)"


def test_every_request_has_exact_token_count(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        reqs = all_requests(m)
        assert len(reqs) == 3 + 2 * 3 + 2  # warm (warm-up + 2), prefix (3 pairs), cold (first + second)
        for r in reqs:
            assert r["status"] == "ok"
            assert len(r["tokens"]) == len(r["token_times"]) == r["n_tokens"] == GEN
            assert r["prompt_tokens"] == 192


def test_summaries_recompute_from_raw_samples(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        warm = m["phases"]["warm"]
        measured = [r for r in warm["requests"] if r["kind"] == "measured"]
        ttft = [(r["token_times"][0] - r["t0"]) / 1e9 for r in measured]
        decode = [(GEN - 1) / ((r["token_times"][-1] - r["token_times"][0]) / 1e9) for r in measured]
        assert warm["summary"]["ttft_s"]["median"] == pytest.approx(stats.summarize(ttft)["median"])
        assert warm["summary"]["decode_tok_s"]["p95"] == pytest.approx(stats.summarize(decode)["p95"])
        itls = [(b - a) / 1e9 for r in measured for a, b in zip(r["token_times"], r["token_times"][1:])]
        assert warm["summary"]["itl_s"]["max"] == pytest.approx(max(itls))


def test_prefix_reuse_output_unchanged(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        pref = m["phases"]["prefix"]
        for pair in pref["pairs"]:
            assert pair["reuse"]["reused_tokens"] == 176
            assert pair["noreuse"]["reused_tokens"] == 0
            assert pair["check"]["passed"], pair["check"]
        assert pref["summary"]["checks"]["failed"] == 0


@real_engines
def test_prefix_reuse_is_faster(e2e_log):
    """A real engine skips the cached prefix's computation (the fake engine's speed means nothing):
    it computes only the suffix, and its quickest reused TTFT beats the quickest uncached one (the
    minimum, not the median of two: one request slowed by another process must not decide)."""
    for m in json.loads(e2e_log[0].read_text())["models"]:
        pairs = [p for p in m["phases"]["prefix"]["pairs"] if p["kind"] == "measured"]
        for p in pairs:
            assert p["reuse"]["computed_prompt_tokens"] < p["noreuse"]["computed_prompt_tokens"]
        assert min(p["reuse"]["ttft_s"] for p in pairs) < min(p["noreuse"]["ttft_s"] for p in pairs)


def test_cold_trials_report_residency(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        (trial,) = m["phases"]["cold"]["trials"]
        res = trial["residency"]
        assert res["file_bytes"] == m["identity"]["total_bytes"]
        assert 0.0 <= res["fraction"] <= 1.0 and res["label"]
        for key in ("interpreter_s", "import_s", "model_load_s", "ready_s", "time_to_first_token_s"):
            assert trial[key] is not None and trial[key] > 0, key
        assert trial["ready_s"] < trial["time_to_first_token_s"]
        # ready is the engine's start-up alone: macprof's own (harness_s) is timed apart, not in it
        parts = trial["interpreter_s"] + trial["import_s"] + trial["model_load_s"] + (trial["tokenizer_load_s"] or 0)
        # (an engine whose tokenizer comes with the model reports no tokenizer_load_s, yet its
        # no-op load_tokenizer call, microseconds, is inside ready_s)
        assert trial["harness_s"] > 0 and trial["ready_s"] == pytest.approx(parts, abs=1e-3)


def test_memory_is_recorded(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        assert m["phases"]["warm"]["memory"]["peak_rss_bytes"] >= m["memory"]["rss_after_load_bytes"] > 0
        kv = m["memory"]["kv_cache"]
        assert kv["computed_bytes"] == kv["bytes_per_token"] * (192 + GEN)
        assert kv["measured_bytes"] > 0


def test_how_the_weights_are_held_is_recorded_with_their_resident_bytes(e2e_log):
    """llama.cpp (and the fake engine, which does as it does) map the model file: each phase
    records it with the file's resident bytes, which a macOS footprint leaves out and the
    headline adds there; MLX copies its weights (nothing mapped to add)."""
    data = json.loads(e2e_log[0].read_text())
    for m in data["models"]:
        mem = m["phases"]["warm"]["memory"]
        held = "copied" if m["identity"]["engine"] == "mlx" else "mapped"
        assert mem["weights_held"] == held
        if held == "mapped":  # loaded and decoded: every page of the file is resident
            assert mem["mapped_resident_bytes"] == m["identity"]["total_bytes"]
        else:
            assert "mapped_resident_bytes" not in mem
        # Linux: the headline is RSS, which counts the mapped pages the process touched already
        head = summary(e2e_log[0])[m["identity"]["name"]]
        assert head["memory_figure"] == "RSS" and head["memory_weights"] == "counted"


def summary(path):
    from macprof.render.summary import summary_rows
    from macprof.store import runlog

    return {r["model"]: r for r in summary_rows(runlog.load(path))}


@real_engines
def test_mlx_memory_is_recorded(e2e_log):
    data = json.loads(e2e_log[0].read_text())
    mlx = data["models"][1]["phases"]["warm"]["memory"]["engine"]
    assert mlx["mlx_peak_bytes"] >= mlx["mlx_active_bytes"] > 0
    for r in data["models"][1]["phases"]["warm"]["requests"]:  # MLX peak, reset before each request
        assert r["engine_memory"]["mlx_peak_bytes"] >= r["engine_memory"]["mlx_active_bytes"] > 0


def test_show_renders_the_log(e2e_log):
    out = macprof("show", str(e2e_log[0])).stdout
    assert e2e_log[2][1] in out and "cold trial 1" in out and "prefix TTFT speed-up" in out


# -- faults: each leaves every other measurement intact --------------------------------------
FAULT_ARGS = ["--phases", "warm", "--prompt-tokens", "32", "--gen-tokens", "4", "--reps", "3"]
KILL_REPS = 40


def run_with_fault(fake_dir, tmp_path, fault, timeout="60"):
    log = tmp_path / "fault.json"
    env = {"MACPROF_TEST_FAULT": json.dumps(fault)}
    proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", ",".join(FAKE), *FAULT_ARGS,
                   "--timeout", timeout, "--log", str(log), env=env)
    return json.loads(log.read_text()), proc


@pytest.mark.parametrize("kind,status,signal_name", [("segfault", "crashed", "SIGSEGV"), ("oom", "crashed", "SIGKILL")])
def test_crashing_engine_is_recorded(fake_dir, tmp_path, kind, status, signal_name):
    data, proc = run_with_fault(fake_dir, tmp_path, {"model": "fake-a", "kind": kind, "after_requests": 2})
    bad, good = data["models"]
    (failure,) = bad["failures"]
    assert failure["status"] == status and failure["signal"] == signal_name and failure["phase"] == "warm"
    assert failure["index"] == 1  # warm-up and request 0 done, request 1 in flight
    done = [r for r in bad["phases"]["warm"]["requests"] if r["status"] == "ok"]
    assert len(done) == 2  # the warm-up and the first measured request survive
    assert len([r for r in good["phases"]["warm"]["requests"] if r["kind"] == "measured"]) == 3
    assert "crashed" in proc.stdout  # the summary's warnings name the failure


def test_hanging_engine_times_out(fake_dir, tmp_path):
    t = time.monotonic()
    data, _ = run_with_fault(fake_dir, tmp_path, {"model": "fake-a", "kind": "hang", "after_requests": 1},
                             timeout="1")
    assert time.monotonic() - t < 120
    bad, good = data["models"]
    (failure,) = bad["failures"]
    assert failure["status"] == "timeout" and "1 s" in failure["reason"]
    assert len([r for r in good["phases"]["warm"]["requests"] if r["status"] == "ok"]) == 4


def test_killed_parent_journal_is_recovered(fake_dir, tmp_path):
    log = tmp_path / "killed.json"
    journal = tmp_path / "killed.journal.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", "--config", str(fake_dir / "models.toml"),
                             "--models", ",".join(FAKE), *FAULT_ARGS, "--reps", str(KILL_REPS),
                             "--log", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill once some requests are journaled
        if journal.exists() and journal.read_text().count('"event":"request"') >= 5:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not log.exists()  # never a half-written run log
    completed = journal.read_text().count('"event":"request"')
    recovered = runlog.load(journal)
    assert recovered.complete is False
    n = sum(len(m.phases.warm.requests) for m in recovered.models)
    assert n == completed >= 5
    out = macprof("show", str(journal)).stdout
    assert "INCOMPLETE" in out
    # --resume finishes the run: models already measured are kept, the rest measured
    done_before = {m.identity.name for m in recovered.models if m.complete}
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", ",".join(FAKE),
            *FAULT_ARGS, "--reps", str(KILL_REPS), "--resume", str(journal))
    final = runlog.load(log)
    assert final.complete is True
    assert [m.identity.name for m in final.models] == list(FAKE)
    for m in final.models:
        assert len(m.phases.warm.requests) == KILL_REPS + 1
    starts = [e.model for e in runlog.read_journal(journal) if e.KIND == "model_start"]
    for name in done_before:
        assert starts.count(name) == 1  # finished before the kill: not measured again


def test_ceiling_in_every_decode_figure(e2e_log):
    from macprof.analyse.estimate import estimate

    data = json.loads(e2e_log[0].read_text())
    measured_gbs = data["bandwidth"]["measured"]["gbs"]
    assert measured_gbs > 0
    for m in data["models"]:
        shape = m["shape"]
        for phase in ("warm", "prefix"):
            roof = m["phases"][phase]["roofline"]
            assert roof["context_tokens"] == 192 + GEN / 2
            meas = roof["measured"]
            same = estimate(file_size_gb=shape["weight_bytes_per_token"] / 1e9, bandwidth_gbs=measured_gbs,
                            layers=shape["n_layers"], kv_heads=shape["n_kv_heads"], head_dim=shape["head_dim"],
                            context=int(roof["context_tokens"]))
            # the side that binds is measured too: a matmul probe slowed by a loaded machine can make
            # the compute side bind, and then the ceiling is under the memory-only one
            if meas["bound"].startswith("memory"):
                assert meas["ceiling_tok_s"] == pytest.approx(same["ceiling_tok_s"])
            else:
                assert meas["bound"] == "compute" and meas["ceiling_tok_s"] < same["ceiling_tok_s"]
            assert meas["efficiency"] == pytest.approx(roof["decode_tok_s"] / meas["ceiling_tok_s"])
            # on this machine no chip is published: the spec side says why, never a number
            if data["machine"]["chip"] is None:
                assert roof["spec"]["bandwidth_gbs"] is None and roof["spec"]["reason"]
    out = macprof("show", str(e2e_log[0])).stdout
    assert "(measured)" in out and "ceiling at" in out


def test_drop_cache_makes_a_cold_start_cold(fake_dir, tmp_path):
    log = tmp_path / "drop.json"
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "cold",
            "--cold-trials", "1", "--prompt-tokens", "16", "--gen-tokens", "2", "--drop-cache", "--log", str(log))
    (trial,) = json.loads(log.read_text())["models"][0]["phases"]["cold"]["trials"]
    if sys.platform == "darwin":
        assert trial["drop_cache"]["dropped"] is False and "purge" in trial["drop_cache"]["reason"]
    else:
        assert trial["drop_cache"]["dropped"] is True
        assert trial["residency"]["fraction"] < 0.05 and trial["residency"]["label"].startswith("cold")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_sigterm_writes_an_incomplete_log(fake_dir, tmp_path, sig):
    log = tmp_path / "term.json"
    journal = tmp_path / "term.journal.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", "--config", str(fake_dir / "models.toml"),
                             "--models", ",".join(FAKE), *FAULT_ARGS, "--reps", "400",
                             "--log", str(log)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count('"event":"request"') >= 5:
            break
        time.sleep(0.05)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130
    data = runlog.load(log)
    assert data.complete is False and data.interrupted is True
    assert len(data.models[0].phases.warm.requests) >= 5
    assert "incomplete" in out


def test_a_file_that_is_not_a_model_is_refused_and_the_run_goes_on(fake_dir, tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is a text file, not a model\n")
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "bad"\nengine = "llama.cpp"\npath = "{bad}"\n\n'
                   f'[[models]]\nname = "good"\nengine = "fake"\npath = "{fake_dir / "fake-b.gguf"}"\n')
    log = tmp_path / "bad.json"
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log))
    data = runlog.load(log)
    bad_m, good_m = data.models
    (failure,) = bad_m.failures
    assert failure.status == "refused" and f"{bad}: not a GGUF file" in failure.reason
    assert len([r for r in good_m.phases.warm.requests if r.status == "ok"]) == 4
    assert "bad: load failed (refused)" in proc.stdout
