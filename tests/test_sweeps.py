"""Grids, KV-depth sweeps and batch sweeps: the case plan (pure), then `macprof run` with the
fake engine (fast tier) and with the real engines on the tiny demo models (slow)."""

import json
from pathlib import Path

import pytest

from macprof import cases, config
from macprof.engines.capabilities import CAPABILITIES
from macprof.analyse import build, ceilings, estimate
from macprof.collect import modelinfo
from macprof.measure import stats
from macprof.model.events import parse_event
from macprof.model.log import RunLog
from macprof.model.phases import PlannedCase, Sweep, SweepCase
from macprof.store import runlog
from macprof.config.settings import command_line_settings, implied_phases
from macprof.render.exporters import to_text
from macprof.render.sweeps import batch_table, tradeoff_line
from tests.conftest import cli
from tests.test_run import macprof

GEN = 12
DEPTHS = (0, 200, 900, 1020)  # the models hold 1024 tokens: 1020 + 1 + GEN does not fit
BATCHES = (1, 3)
REPS = 2
MODELS = {"fake": ("fake-a", "fake-b"), "real": ("demo-tiny-q8_0", "demo-tiny-mlx-f16")}


# -- the plan (pure) --------------------------------------------------------------------------
def test_grid_plan_is_the_product_plus_shapes():
    s = config.Settings(phases=("grid",), prompt_grid=(128, 512, 2048), gen_grid=(16, 256), shapes=("rag",))
    grid = cases.plan(s)["grid"]
    assert [c["id"] for c in grid] == ["p128-g16", "p128-g256", "p512-g16", "p512-g256", "p2048-g16", "p2048-g256", "rag"]
    rag = grid[-1]
    assert (rag["prompt_tokens"], rag["gen_tokens"]) == cases.SHAPES["rag"][:2]
    assert grid[1]["context_tokens"] == 128 + 256 / 2


def test_shapes_alone_and_no_grid_lists():
    assert [c["id"] for c in cases.plan(config.Settings(phases=("grid",), shapes=("chat", "code")))["grid"]] == ["chat", "code"]
    only = cases.plan(config.Settings(phases=("grid",), prompt_tokens=64, gen_tokens=8))["grid"]
    assert [(c["prompt_tokens"], c["gen_tokens"]) for c in only] == [(64, 8)]


def test_depth_and_batch_plans():
    p = cases.plan(config.Settings(phases=("depth", "batch"), depths=(0, 4096), batches=(1, 8), prompt_tokens=100,
                                   gen_tokens=64))
    assert [(c["id"], c["prompt_tokens"], c["context_tokens"]) for c in p["depth"]] == [("d0", 1, 33.0), ("d4096", 4097, 4129.0)]
    assert [(c["id"], c["batch"], cases.tokens_per_sequence(c)) for c in p["batch"]] == [("b1", 1, 164), ("b8", 8, 164)]
    assert "grid" not in p and "warm" not in p


@pytest.mark.parametrize("given,phases_given,expect", [
    (dict(prompt_tokens=[128, 512]), False, {"phases": ["grid"], "prompt_tokens": 128, "prompt_grid": [128, 512]}),
    (dict(prompt_tokens=[256]), False, {"prompt_tokens": 256, "prompt_grid": None}),
    (dict(gen_tokens=[64], depth=[0, 1024], batch=[1, 2]), False, {"phases": ["depth", "batch"], "gen_tokens": 64}),
    (dict(shape="rag, chat"), False, {"phases": ["grid"], "shapes": ["rag", "chat"]}),
    (dict(depth=[0, 512]), True, {"depths": [0, 512]}),  # --phases given: it decides
])
def test_command_line_sweeps(given, phases_given, expect):
    """Command-line lengths and sweeps -> settings, as `macprof run` reads them: a list of lengths
    is a grid (its first value also the length every other phase uses); without --phases, sweep
    options run only the sweeps they ask for."""
    args = dict(prompt_tokens=None, gen_tokens=None, shape=None, depth=None, batch=None) | given
    out = command_line_settings(args)
    phases = implied_phases(out, phases_given, serving=False, resumed=False)
    out = out | ({"phases": phases} if phases else {})
    for key, value in expect.items():
        assert out[key] == value, key
    if phases_given or not expect.get("phases"):
        assert "phases" not in out


def test_tradeoff_math_on_constructed_cases():
    """Ratios to B=1, measured against predicted, and the one-line summary."""
    def case(b, agg, itl, pred_agg, pred_itl):
        return SweepCase.from_json({"id": f"b{b}", "batch": b, "status": "ok", "summary": {"aggregate_decode_tok_s": {"median": agg},
                "itl_s": {"median": itl, "p99": itl * 1.5}}, "check": None,
                "prediction": {"measured": {"itl_s": pred_itl, "aggregate_tok_s": pred_agg, "bound": "memory"}}})

    cs = [case(1, 50.0, 0.020, 60.0, 1 / 60), case(8, 305.0, 0.0248, 480.0, 1 / 60 * 1.0)]
    rows = ceilings.batch_tradeoff(cs)
    assert rows[1].aggregate_vs_b1 == pytest.approx(6.1)
    assert rows[1].itl_p50_vs_b1 == pytest.approx(1.24)
    assert rows[1].predicted_aggregate_vs_b1 == pytest.approx(8.0)
    assert rows[1].measured_over_predicted_aggregate == pytest.approx(305 / 480)
    line = tradeoff_line(Sweep(tradeoff=rows))
    assert line.startswith("B=8: aggregate x6.10, each user's ITL x1.24 (predicted x8.00, x1.00")
    assert "x6.10" in to_text(batch_table(Sweep(cases=cs, tradeoff=rows)))


def test_engine_without_batching_is_recorded_not_faked():
    from macprof.run.phases import PhaseContext
    from macprof.run.phases.sweeps import run_batch

    class NoBatch:
        capabilities = {**dict.fromkeys(CAPABILITIES), "batch": "this engine decodes one sequence at a time"}

        def reset_peak_memory(self):
            pass

        def memory(self):
            return {}

    events = []
    s = config.Settings(phases=("batch",), batches=(1, 4))
    run_batch(PhaseContext(NoBatch(), None, s, lambda e: events.append(e.to_json()), cases=cases.plan(s)["batch"]))
    assert [(e["event"], e.get("case")) for e in events] == [("case_unsupported", "b1"), ("case_unsupported", "b4"),
                                                             ("phase_memory", None)]
    assert events[0]["reason"] == NoBatch.capabilities["batch"]


def test_a_case_that_cannot_be_set_up_is_that_case_s_error():
    """open_batch fails for B=8 (say, no memory for 8 KV streams): b8 is failed, with the
    engine's reason, and the phase still ends normally."""
    from macprof.errors import MacprofError
    from macprof.run.phases import PhaseContext
    from macprof.run.phases.sweeps import run_batch

    class NoRoom:
        capabilities = dict.fromkeys(CAPABILITIES)

        def reset_peak_memory(self):
            pass

        def reset(self):
            pass

        def memory(self):
            return {}

        def open_batch(self, size, tokens_per_seq):
            raise MacprofError(f"llama.cpp could not create a context for {size} sequences of {tokens_per_seq} tokens")

    events = []
    s = config.Settings(phases=("batch",), batches=(8,), prompt_tokens=32, gen_tokens=8)
    run_batch(PhaseContext(NoRoom(), None, s, lambda e: events.append(e.to_json()), cases=cases.plan(s)["batch"]))
    assert [e["event"] for e in events] == ["case_error", "phase_memory"]
    planned = [PlannedCase.from_json(c) for c in cases.plan(s)["batch"]]
    (b8,) = build._build_sweep("batch", planned, [parse_event({**e, "model": "m"}) for e in events], [], None, 0, None).cases
    assert b8.status == "failed" and "could not create a context for 8 sequences of 56 tokens" in b8.reason


# -- runs: the fake engine, and the real ones -------------------------------------------------
@pytest.fixture(scope="module", params=["fake", pytest.param("real", marks=pytest.mark.slow)])
def sweep_log(request, tmp_path_factory):
    """-> (run log, its path, the finished process, model names)."""
    root = request.getfixturevalue("fake_dir" if request.param == "fake" else "tiny_build")
    out = tmp_path_factory.mktemp("sweeps")
    log = out / "sweeps.json"
    proc = macprof("run", "--config", str(root / "models.toml"), "--models", ",".join(MODELS[request.param]),
                   "--prompt-tokens", "24,96", "--gen-tokens", f"{GEN},4", "--depth", ",".join(map(str, DEPTHS)),
                   "--batch", ",".join(map(str, BATCHES)), "--reps", str(REPS), "--timeout", "120", "--log", str(log))
    return json.loads(log.read_text()), log, proc, MODELS[request.param]


def _measured(case):
    return [r for r in case["requests"] if r["kind"] == "measured"]


def test_sweeps_alone_run_only_the_sweeps(sweep_log):
    data, log, _, _ = sweep_log
    runlog.load(log)  # valid against the schema
    for m in data["models"]:
        assert list(m["phases"]) == ["grid", "depth", "batch"]
        assert m["settings"]["gen_tokens"] == GEN and m["settings"]["gen_grid"] == [GEN, 4]


def test_grid_one_case_per_combination(sweep_log):
    for m in sweep_log[0]["models"]:
        grid = m["phases"]["grid"]["cases"]
        assert [(c["prompt_tokens"], c["gen_tokens"]) for c in grid] == [(24, GEN), (24, 4), (96, GEN), (96, 4)]
        for c in grid:
            assert c["status"] == "ok" and len(_measured(c)) == REPS
            for r in c["requests"]:
                assert r["status"] == "ok" and r["reused_tokens"] == 0
                assert r["prompt_tokens"] == c["prompt_tokens"] and r["n_tokens"] == len(r["tokens"]) == c["gen_tokens"]
            assert c["summary"]["decode_tok_s"]["n"] == REPS
            assert c["roofline"]["context_tokens"] == c["prompt_tokens"] + c["gen_tokens"] / 2


def test_depth_cases_start_with_d_tokens_cached(sweep_log):
    for m in sweep_log[0]["models"]:
        depth = {c["depth"]: c for c in m["phases"]["depth"]["cases"]}
        for d in DEPTHS[:-1]:
            c = depth[d]
            assert c["status"] == "ok", c["reason"]
            assert c["fill"]["cached_tokens"] == d  # the engine reports d tokens in the cache
            for r in c["requests"]:
                assert r["cached_tokens_before"] == d and r["reused_tokens"] == d  # restored, not recomputed
                assert r["computed_prompt_tokens"] == 1 and r["prompt_tokens"] == d + 1
                assert r["n_tokens"] == GEN and r["status"] == "ok"
                if d:
                    assert r["t0"] > c["fill"]["t_end"]  # the fill is not inside any request's timing
        too_deep = depth[DEPTHS[-1]]
        assert too_deep["status"] == "refused" and "holds 1024" in too_deep["reason"] and not too_deep["requests"]


def _model_file(m: dict) -> estimate.ModelFile:
    """A logged model's file as `macprof estimate` reads it (its shape at f16 K/V)."""
    path = Path(m["identity"]["path"])
    return estimate.ModelFile(path, modelinfo.inspect(path))


def test_depth_ceilings_fall_with_depth_and_match_estimate(sweep_log):
    data = sweep_log[0]
    gbs, tflops = data["bandwidth"]["measured"]["gbs"], data["bandwidth"]["measured"]["tflops"]
    assert tflops > 0  # the matmul probe's figure: the compute side of the measured roofline
    for m in data["models"]:
        model = _model_file(m)
        ok = [c for c in m["phases"]["depth"]["cases"] if c["status"] == "ok"]
        ceilings = [c["roofline"]["measured"]["ceiling_tok_s"] for c in ok]
        assert ceilings == sorted(ceilings, reverse=True) and ceilings[0] > ceilings[-1]
        for c in ok:
            e = estimate.estimate(model=model, bandwidth_gbs=gbs, tflops=tflops, context=c["context_tokens"])
            assert c["roofline"]["measured"]["ceiling_tok_s"] == pytest.approx(e["ceiling_tok_s"], rel=1e-12)
            assert c["roofline"]["measured"]["efficiency"] == pytest.approx(
                c["summary"]["decode_tok_s"]["median"] / e["ceiling_tok_s"])


def test_batch_sequences_equal_one_at_a_time(sweep_log):
    """Every sequence of every batch has exactly GEN tokens, and the first measured batch's
    tokens are those of the same prompts run alone: checked by macprof in the run, and here
    again, independently, by this test with the engine in-process."""
    from macprof import engines
    from macprof.engines.base import EngineSettings
    from macprof.run.prompts import PromptBuilder
    from macprof.run.phases.common import compare_outputs

    for m in sweep_log[0]["models"]:
        engine = engines.create(m["identity"]["engine"])
        engine.load_model(Path(m["identity"]["path"]), EngineSettings(n_ctx=256))
        engine.load_tokenizer()
        builder = PromptBuilder(engine, seed=0)  # the worker's seed: the same prompts
        try:
            for c in m["phases"]["batch"]["cases"]:
                assert c["status"] == "ok" and len(_measured(c)) == REPS
                for r in c["requests"]:
                    assert r["batch"] == c["batch"] and len(r["tokens"]) == c["batch"]
                    assert all(len(seq) == GEN for seq in r["tokens"]) and len(r["token_times"]) == GEN
                assert c["check"]["n"] == c["batch"] and c["check"]["failed"] == 0
                first = _measured(c)[0]
                for j, seq in enumerate(first["tokens"]):
                    prompt = builder.prompt(f"batch:{c['batch']}:1:{j}", c["prompt_tokens"])
                    engine.reset()
                    alone = list(engine.generate(list(prompt.ids), GEN))
                    assert compare_outputs(engine, prompt, alone, seq).passed, (c["id"], j, alone, seq)
        finally:
            engine.close()


def test_batch_predictions_match_estimate(sweep_log):
    from click.testing import CliRunner

    from macprof.cli import main

    data = sweep_log[0]
    gbs, tflops = data["bandwidth"]["measured"]["gbs"], data["bandwidth"]["measured"]["tflops"]
    for m in data["models"]:
        model, phase = _model_file(m), m["phases"]["batch"]
        for c, row in zip(phase["cases"], phase["tradeoff"]):
            e = estimate.estimate(model=model, bandwidth_gbs=gbs, tflops=tflops, context=c["context_tokens"],
                                  batches=[c["batch"]])
            pred = c["prediction"]["measured"]
            assert pred["bound"] == e["batch"][0]["bound"]
            assert pred["itl_s"] == pytest.approx(e["batch"][0]["itl_s"], rel=1e-12)
            assert pred["aggregate_tok_s"] == pytest.approx(e["batch"][0]["aggregate_tok_s"], rel=1e-12)
            # and the command itself, given the same inputs on its command line
            out = CliRunner().invoke(main, ["estimate", m["identity"]["path"], "--bandwidth", repr(gbs), "--tflops",
                                            repr(tflops), "--context", str(int(c["context_tokens"])),
                                            "--batch", str(c["batch"]), "--json"])
            assert out.exit_code == 0 and c["context_tokens"] == int(c["context_tokens"])
            assert json.loads(out.output)["batch"][0]["aggregate_tok_s"] == pytest.approx(pred["aggregate_tok_s"], rel=1e-12)
            agg = c["summary"]["aggregate_decode_tok_s"]["median"]
            assert row["measured_over_predicted_aggregate"] == pytest.approx(agg / pred["aggregate_tok_s"])
            per_seq = sorted(r["decode_tok_s"] for r in _measured(c))
            assert agg == pytest.approx(c["batch"] * stats.summarize(per_seq)["median"])


def test_show_and_plot_present_the_sweeps(sweep_log, tmp_path):
    _, log, proc, _ = sweep_log
    for out in (proc.stdout, cli("show", log).output):
        assert "grid (warm protocol per case" in out and "p96-g4" in out
        assert "decode after d tokens already in the KV cache" in out and "REFUSED" in out
        assert "batched decoding" in out and "B=3: aggregate x" in out and "each user's ITL x" in out
    chart = tmp_path / "sweeps.png"
    assert cli("plot", log, "-o", chart).exit_code == 0
    from PIL import Image

    # no warm phase, so no bars: grid, depth, batch aggregate and batch ITL, 2 rows of 2, 120 dpi
    assert Image.open(chart).size == (10 * 120, round(2 * 5.5 * 120))


def test_compare_a_sweep_case_across_models(sweep_log):
    from click.testing import CliRunner

    from macprof.analyse import compare as cmp
    from macprof.cli import main

    data, log, _, models = sweep_log
    rows = cmp.rows_from(runlog.load(log), "run", cmp.parse_case("depth:d200"))
    assert [r["model"] for r in rows] == list(models)
    for r, m in zip(rows, data["models"]):
        case = m["phases"]["depth"]["cases"][1]
        assert r["decode_tok_s"] == case["summary"]["decode_tok_s"]["median"] and r["conditions"]["lengths"] == (201, GEN)
        assert sorted(r["samples"]["decode"]) == sorted(q["decode_tok_s"] for q in _measured(case))
    out = CliRunner().invoke(main, ["compare", str(log), "--case", "batch:b3", "--format", "csv"])
    assert out.exit_code == 0 and "case_ttft_s" in out.output and len(out.output.strip().splitlines()) == 1 + len(models)
    for bad, message in (("depth:d999", "no model in these logs has the case 'depth:d999'"),
                         ("cold:x", "expected PHASE:ID with PHASE grid, depth, batch, bench")):
        out = CliRunner().invoke(main, ["compare", str(log), "--case", bad])
        assert out.exit_code == 2 and message in out.output and out.output.count("\n") == 1


def test_a_crash_in_a_sweep_loses_one_case(fake_dir, tmp_path):
    """The worker segfaults in case d50: it is recorded, and a fresh worker goes on with d100."""
    log = tmp_path / "crash.json"
    fault = {"model": "fake-a", "kind": "segfault", "after_requests": 3}  # d0: 2 requests, d50: 1
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--depth", "0,50,100",
            "--gen-tokens", "4", "--reps", "1", "--log", str(log), env={"MACPROF_TEST_FAULT": json.dumps(fault)})
    data = json.loads(log.read_text())
    d0, d50, d100 = data["models"][0]["phases"]["depth"]["cases"]
    assert d0["status"] == "ok" and d100["status"] == "ok" and len(_measured(d100)) == 1
    assert d50["status"] == "failed" and d50["failures"][0]["signal"] == "SIGSEGV"


def test_sweep_warnings():
    from macprof.render.summary import warnings

    def case(cid, median, stdev, failed=0):
        return {"id": cid, "summary": {"decode_tok_s": {"median": median, "stdev": stdev}},
                "check": {"failed": failed} if failed is not None else None}

    model = {"identity": {"name": "m"}, "failures": [], "phases": {
        "depth": {"cases": [case("d0", 100.0, 2.0, None), case("d4096", 50.0, 9.0, None)]},
        "batch": {"cases": [case("b1", 100.0, 1.0), case("b8", 80.0, 1.0, failed=2)]}}}
    out = warnings(RunLog.from_json({"complete": True, "models": [model]}))
    assert "m: depth decode tok/s varies by more than 10% of its median in d4096: close other programs, add --reps or --delay" in out
    assert "m: batched decoding changed the output beyond a near-tie in b8" in out
    assert not any("d0" in w or "b1" in w for w in out)


def test_recorded_sweep_log_reads_renders_and_compares():
    """tests/fixtures/runlogs/tiny-sweeps.json: a real run of today's schema with every sweep
    (recorded by tests/fixtures/runlogs/make.sh), read back by the readers of today."""
    from click.testing import CliRunner

    from macprof.cli import main

    path = Path(__file__).parent / "fixtures" / "runlogs" / "tiny-sweeps.json"
    log = runlog.load(path)
    for m in log.models:
        assert m.phases.grid and m.phases.depth and m.phases.batch
        assert {c.id for c in m.phases.grid.cases} >= {"chat"} and [c.depth for c in m.phases.depth.cases] == [0, 64, 256]
        assert [c.batch for c in m.phases.batch.cases] == [1, 2, 4] and m.phases.batch.tradeoff
    out = CliRunner().invoke(main, ["show", str(path)])
    assert out.exit_code == 0 and "decode after d tokens" in out.output and "batched decoding" in out.output
    rows = CliRunner().invoke(main, ["compare", str(path), "--case", "depth:d256", "--format", "json"])
    assert rows.exit_code == 0 and len(json.loads(rows.output)["rows"]) == len(log.models)
