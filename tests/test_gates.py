"""Gates judge only what was measured: `compare --fail-if` against a run that measured nothing,
a `macprof run` that measured nothing, and folders of logs holding other files and shared
copies (each faulty file or condition made here from the recorded tiny-a / tiny-b runs)."""

import json
import shutil

import pytest

from macprof.store import runlog
from tests.conftest import FIXTURES, cli as run, recomputed
from tests.test_run import FAULT_ARGS, macprof

LOGS = FIXTURES / "runlogs"
A, B = LOGS / "tiny-a.json", LOGS / "tiny-b.json"
MODELS = ("demo-tiny-q8_0", "demo-tiny-q4_k_m", "demo-tiny-mlx-f16", "demo-tiny-mlx-8bit")


def nothing_measured(src, dst, how="errors"):
    """A copy of a real log in which no warm request succeeded: each one raised ("errors"),
    or the worker died loading the model before any request ("crashed")."""
    log = json.loads(src.read_text())
    for m in log["models"]:
        warm = m["phases"]["warm"]
        if how == "errors":
            for r in warm["requests"]:
                r.update(status="error", error="RuntimeError: llama_decode returned -1", token_times=[], tokens=[],
                         n_tokens=0, ttft_s=None, decode_tok_s=None, e2e_tok_s=None, prefill_tok_s=None)
        else:
            warm["requests"] = []
            m["failures"] = [{"phase": "warm", "status": "crashed", "reason": "the worker was killed (SIGKILL)",
                              "signal": "SIGKILL"}]
    dst.write_text(json.dumps(recomputed(log)))
    runlog.load(dst)  # a valid run log: only its measurements are missing
    return dst


# -- 6. compare --fail-if judges only what was measured ----------------------------------------
@pytest.mark.parametrize("how", ["errors", "crashed"])
def test_fail_if_against_a_run_that_measured_nothing_exits_2(tmp_path, how):
    empty = nothing_measured(B, tmp_path / "nothing-measured.json", how)
    r = run("compare", A, empty, "--fail-if", "decode:-5%")
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("macprof: error: --fail-if cannot judge decode tok/s of ")
    for name in MODELS:
        assert f"{name}@nothing-measured (5 vs 0 successful requests)" in r.stderr
    assert "a gate judges only what was measured" in r.stderr
    # the other way round: the baseline's run is the one that measured nothing
    r = run("compare", empty, A, "--fail-if", "ttft:+10%")
    assert r.exit_code == 2 and "warm TTFT of demo-tiny-q8_0@tiny-a (0 vs 5 successful requests)" in r.stderr


def test_fail_if_with_nothing_in_common_exits_2():
    """A gate with no model of the baseline's run in another run would pass on nothing."""
    r = run("compare", A, LOGS / "other-machine-demo-small.json", "--fail-if", "decode:-5%")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "--fail-if has nothing to judge: no model of the baseline's run (tiny-a) appears in another run" in r.stderr
    assert run("compare", A, "--fail-if", "decode:-5%").exit_code == 2
    assert run("compare", A, B, "--fail-if", "decode:-99%").exit_code == 0  # measured on both sides: judged


def test_fail_if_memory_needs_the_figure_on_both_sides(tmp_path):
    log = json.loads(B.read_text())
    for phase in log["models"][0]["phases"].values():  # the model's peak RSS is the largest over its phases
        if phase.get("memory"):
            phase["memory"]["peak_rss_bytes"] = None
    (tmp_path / "no-rss.json").write_text(json.dumps(log))
    r = run("compare", A, tmp_path / "no-rss.json", "--fail-if", "memory:+50%")
    assert r.exit_code == 2 and "peak RSS of demo-tiny-q8_0@no-rss (no peak RSS against demo-tiny-q8_0@tiny-a)" in r.stderr
    assert run("compare", A, B, "--fail-if", "memory:+50%").exit_code == 0


# -- 13. a run that measured nothing -----------------------------------------------------------
def _config(tmp_path, *models, engine="llama.cpp"):
    """Every model but the first (the broken one) on ``engine``."""
    cfg = tmp_path / "models.toml"
    cfg.write_text("".join(f'[[models]]\nname = "{name}"\nengine = "{engine if i else "llama.cpp"}"\npath = "{path}"\n\n'
                           for i, (name, path) in enumerate(models)))
    return cfg


def test_a_run_where_every_model_was_refused_exits_3(tmp_path, cache_root):
    for name in ("notes.gguf", "empty.gguf"):
        (tmp_path / name).write_text("not a model\n" if name == "notes.gguf" else "")
    cfg = _config(tmp_path, ("notes", tmp_path / "notes.gguf"), ("empty", tmp_path / "empty.gguf"))
    log = tmp_path / "refused.json"
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log), check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    error = proc.stderr.strip().split("\n")[-1]
    assert error == (f"macprof: error: the run measured nothing: every model was refused or failed (the warnings "
                     f"above say why); the run log is written: {log}")
    data = runlog.load(log)  # the log is still written, with why
    assert [m.failures[0].status for m in data.models] == ["refused", "refused"]
    assert "notes: load failed (refused)" in proc.stdout


def test_a_run_whose_only_measurable_model_crashed_after_its_warm_up_exits_3(fake_dir, tmp_path):
    """A warm-up is not a measurement: the model loaded and warmed up, then every measured
    request was lost to the crash."""
    (tmp_path / "notes.gguf").write_text("not a model\n")
    cfg = _config(tmp_path, ("notes", tmp_path / "notes.gguf"), ("crashes", fake_dir / "fake-a.gguf"), engine="fake")
    log = tmp_path / "crashed.json"
    fault = {"MACPROF_TEST_FAULT": json.dumps({"model": "crashes", "kind": "segfault", "after_requests": 1})}
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log), env=fault, check=False)
    assert proc.returncode == 3, proc.stderr
    crashed = runlog.load(log).models[1]
    assert crashed.failures[0].status == "crashed"
    assert [r.kind for r in crashed.phases.warm.requests if r.status == "ok"] == ["warmup"]


# -- 15. folders of logs -----------------------------------------------------------------------
def _original(src, dst):
    """A run log as `macprof run` writes it: model paths and the host id still in it."""
    log = json.loads(src.read_text())
    log.pop("redacted", None)
    log["machine"]["host_id"] = "5bce98f7"
    for m in log["models"]:
        m["identity"]["path"] = f"/home/someone/models/{m['identity']['name']}"
    dst.write_text(json.dumps(log))
    return dst


def test_a_folder_skips_what_is_not_a_log_and_counts_a_run_once(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    _original(A, runs / "tiny-a.json")
    shutil.copy(B, runs / "tiny-b.json")
    # a shared copy that sorts before its original, as `macprof share -o` may name it
    assert run("share", runs / "tiny-a.json", "-o", runs / "0-posted.json").exit_code == 0
    assert run("share", runs / "tiny-a.json").exit_code == 0  # and the default name, beside it
    (runs / "bandwidth-5bce98f7.json").write_text(json.dumps({"gbs": 23.6, "utc": "2026-11-30T20:52:04Z"}))
    (runs / "empty.json").write_text("")
    (runs / "list.json").write_text("[1, 2]")
    r = run("compare", runs, "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert sorted({row["run"] for row in rows}) == ["tiny-a", "tiny-b"] and len(rows) == 2 * len(MODELS)
    assert rows[0]["run"] == "tiny-a"  # where the run was first found: the baseline stays that run
    (note,) = r.stderr.strip().split("\n")
    assert note.startswith("macprof: passed over 5 file(s): ")
    for why in (f"{runs / 'bandwidth-5bce98f7.json'} (not a macprof run log)", f"{runs / 'empty.json'} (empty file)",
                f"{runs / 'list.json'} (not a macprof run log)",
                f"{runs / '0-posted.json'} (the same run as {runs / 'tiny-a.json'}, a copy written by macprof share)",
                f"{runs / 'tiny-a.shared.json'} (the same run as {runs / 'tiny-a.json'}, a copy written by macprof share)"):
        assert why in note
    plot = run("plot", runs, "-o", tmp_path / "chart.png")  # plot reads folders the same way
    assert plot.exit_code == 0 and plot.stderr.startswith("macprof: passed over 5 file(s)")


def test_a_file_named_explicitly_must_be_a_log(tmp_path):
    (tmp_path / "bandwidth.json").write_text(json.dumps({"gbs": 23.6}))
    (tmp_path / "empty.json").write_text("")
    for name, why in (("bandwidth.json", "not a macprof run log"), ("empty.json", "not valid JSON")):
        r = run("compare", A, tmp_path / name)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and f"{tmp_path / name}: {why}" in r.stderr
    r = run("compare", tmp_path)  # a folder of nothing but other files
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"macprof: error: no run logs found in {tmp_path} (passed over: ")
    # named twice on purpose: both are counted, as asked
    assert len(json.loads(run("compare", A, A, "--format", "json").stdout)["rows"]) == 2 * len(MODELS)


def test_a_broken_log_in_a_folder_is_still_an_error(tmp_path):
    """A file that says it is a run log (it has a schema_version) but is not a valid one is not
    passed over: a gate over the folder would silently judge fewer runs."""
    shutil.copy(A, tmp_path / "a.json")
    log = json.loads(B.read_text())
    del log["models"][0]["identity"]
    (tmp_path / "broken.json").write_text(json.dumps(log))
    r = run("compare", tmp_path)
    assert r.exit_code == 2 and "broken.json: does not match the run-log schema" in r.stderr
