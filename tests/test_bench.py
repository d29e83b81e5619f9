"""The bench phase (llama-bench's pp and tg tests) and `--preset llama-bench`: the plan and the preset
(pure), then `macprof run` on the fake engine (fast tier) and on the real llama.cpp demo model (slow)."""

import json

import pytest

from macprof import cases, config
from macprof.analyse.llamabench import bench_tests
from macprof.config.settings import PRESETS, command_line_settings, setting_flags
from macprof.engines.base import EngineSettings
from macprof.engines.fake import BOS, FakeEngine
from macprof.run.phases.bench import random_ids
from macprof.store import runlog
from tests.conftest import cli
from tests.test_run import macprof

REPS = 3


def test_bench_plan_is_llama_benchs_tests():
    s = config.Settings(phases=("bench",), prompt_tokens=512, gen_tokens=128)
    plan = cases.plan(s)["bench"]
    assert [(c["id"], c["test"], c["prompt_tokens"], c["gen_tokens"]) for c in plan] == [
        ("pp512", "pp", 512, 0), ("tg128", "tg", 1, 128)]
    several = cases.plan(config.Settings(phases=("bench",), prompt_grid=(64, 512), gen_grid=(16, 128)))["bench"]
    assert [c["id"] for c in several] == ["pp64", "pp512", "tg16", "tg128"]


def _flags(**given):
    values = {param: None for param, _, _, _ in setting_flags()}
    return command_line_settings({**values, **given})


def test_preset_sets_its_values_and_a_flag_beside_it_wins():
    got = _flags(preset="llama-bench")
    assert {k: got[k] for k in PRESETS["llama-bench"]} == {"phases": ["bench"], "prompt_tokens": 512,
                                                            "gen_tokens": 128, "reps": 5}
    assert got["preset"] == "llama-bench" and got["threads"] is None  # the engine's default: llama-bench's
    mine = _flags(preset="llama-bench", reps=2, gen_tokens=[64])
    assert mine["reps"] == 2 and mine["gen_tokens"] == 64 and mine["prompt_tokens"] == 512
    assert "llama-bench (phases bench, prompt_tokens 512, gen_tokens 128, reps 5)" in " ".join(cli("run", "--help").output.split())


def test_random_ids_begin_as_the_models_prompts_do(fake_dir):
    engine = FakeEngine()
    engine.load_model(fake_dir / "fake-b.gguf", EngineSettings(n_ctx=600))
    ids = random_ids(engine, 512, "bench:pp512:1")
    assert len(ids) == 512 and ids[0] == BOS and all(0 <= t < engine.vocab_size for t in ids)
    assert ids == random_ids(engine, 512, "bench:pp512:1") != random_ids(engine, 512, "bench:pp512:2")
    assert random_ids(engine, 1, "x") == [BOS]


@pytest.fixture(scope="module", params=["fake", pytest.param("real", marks=pytest.mark.slow)])
def bench_log(request, tmp_path_factory):
    """A `--preset llama-bench` run, shortened: -> (the log's JSON, its path)."""
    if request.param == "fake":
        model, lengths = str(request.getfixturevalue("fake_dir") / "fake-a.gguf"), ("--engine", "fake")
    else:
        model, lengths = str(request.getfixturevalue("tiny_build") / "gguf/demo-tiny-q4_k_m.gguf"), ()
    log = tmp_path_factory.mktemp("bench") / "bench.json"
    macprof("run", model, *lengths, "--preset", "llama-bench", "--prompt-tokens", "64", "--gen-tokens", "16",
            "--reps", str(REPS), "--log", str(log))
    return json.loads(log.read_text()), log


def test_bench_measures_pp_and_tg_apart(bench_log):
    data, path = bench_log
    runlog.load(path)  # valid against the schema
    (m,) = data["models"]
    assert list(m["phases"]) == ["bench"] and m["settings"]["preset"] == "llama-bench"
    pp, tg = m["phases"]["bench"]["cases"]
    assert (pp["id"], pp["test"], pp["status"], tg["id"], tg["test"], tg["status"]) == (
        "pp64", "pp", "ok", "tg16", "tg", "ok")
    for r in pp["requests"]:  # the prompt computed into an empty cache, no token generated
        assert r["n_tokens"] == 0 and not r["token_times"] and r["t_prefilled"] > r["t_tokenized"] >= r["t0"]
        assert r["prompt_tokens"] == r["computed_prompt_tokens"] == 64 and r["reused_tokens"] == 0
        assert r["prefill_tok_s"] == pytest.approx(64e9 / (r["t_prefilled"] - r["t_tokenized"]))
    warmup, *measured = tg["requests"]
    assert warmup["kind"] == "warmup" and warmup["n_tokens"] == 1  # llama-bench's 1-token warm-up
    assert len(measured) == REPS
    for r in measured:  # 16 single-token steps from an empty cache, the first fed token the model's BOS
        assert r["prompt_tokens"] == 1 and r["n_tokens"] == 16 and r["reused_tokens"] == 0


def test_bench_tests_by_llama_benchs_definitions(bench_log):
    """The export's figures, recomputed here from the raw stamps: pp = P / its batch's time, tg = N
    over the time of all N tokens, the first included (e2e from the ids), not macprof's decode."""
    data, path = bench_log
    (m,) = runlog.load(path).models
    tests, missing = bench_tests(m)
    assert missing == [] and [t.name for t in tests] == ["pp64", "tg16"]
    pp, tg = tests
    raw = data["models"][0]["phases"]["bench"]["cases"]
    pp_ns = [r["t_prefilled"] - r["t_tokenized"] for r in raw[0]["requests"] if r["kind"] == "measured"]
    tg_ns = [r["token_times"][-1] - r["t_tokenized"] for r in raw[1]["requests"] if r["kind"] == "measured"]
    assert list(pp.figures.samples_ns) == pp_ns and list(tg.figures.samples_ns) == tg_ns
    assert pp.figures.avg_ts == pytest.approx(sum(64e9 / t for t in pp_ns) / REPS)
    assert tg.figures.avg_ts == pytest.approx(sum(16e9 / t for t in tg_ns) / REPS)
    assert [t.n_prompt for t in tests] == [64, 0] and [t.n_gen for t in tests] == [0, 16]


def test_bench_log_records_the_settings_as_resolved(bench_log):
    data, _ = bench_log
    (m,) = data["models"]
    resolved = m["engine_settings"]
    assert resolved["n_threads"]["value"] >= 1
    if m["identity"]["engine"] == "llama.cpp":  # never "auto": what llama.cpp made of it
        assert resolved["flash_attn"]["asked"] == "auto" and resolved["flash_attn"]["value"] in ("enabled", "disabled")
        rows = json.loads(cli("export", data and _path(bench_log), "--format", "llama-bench-json").output)
        assert {r["flash_attn"] for r in rows} == {1 if resolved["flash_attn"]["value"] == "enabled" else 0}
        assert {r["n_threads"] for r in rows} == {resolved["n_threads"]["value"]}
        assert {r["build_commit"] for r in rows} != {"unknown"}  # ggml_commit() of the installed library


def _path(log):
    return log[1]
