"""A model sharded over an MLX distributed group (issue #16). The fast tests check the group's
math, the settings, the launch command and the failure reasons; the slow ones run two local
ranks over loopback (mlx.launch, ring backend) on the tiny demo model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from macprof import config
from macprof.cli import main
from macprof.config.dist import Distributed, from_cli
from macprof.errors import MacprofError
from macprof.measure import distributed as dm
from macprof.run import distributed as launch
from macprof.store import runlog
from macprof.store.verify import verify_file
from tests.test_run import macprof


# -- the group's ceiling (pure) --------------------------------------------------------------
def _group(**kw):
    base = dict(weight_bytes=40e9, layers=80, hidden=8192, element_bytes=2.0, rank_bandwidth=(400e9, 400e9), link=10e9)
    return dm.Group(**{**base, **kw})


def test_tensor_payload_and_ring_wire():
    assert dm.tensor_payload_bytes(2, 256, 2) == 2048  # the tiny demo model: 2 sums x 2 layers x 256 x 2 bytes
    assert dm.ring_wire_bytes(1000, 2) == 1000 and dm.ring_wire_bytes(1000, 4) == 1500 and dm.ring_wire_bytes(1000, 1) == 0


def test_tensor_step_is_the_slowest_ranks_share_plus_the_collectives():
    r = dm.tensor_step_s(_group(latency=10e-6))
    wire = dm.ring_wire_bytes(2 * 80 * 8192 * 2, 2)
    assert r["read_s"] == pytest.approx(20e9 / 400e9)
    assert r["comm_s"] == pytest.approx(wire / 10e9 + 160 * 10e-6)
    assert r["tok_s"] == pytest.approx(1 / (r["read_s"] + r["comm_s"]))
    slow = dm.tensor_step_s(_group(rank_bandwidth=(400e9, 100e9)))  # the slow rank sets the pace
    assert slow["read_s"] == pytest.approx(20e9 / 100e9)


def test_pipeline_reads_each_ranks_layers_in_turn():
    r = dm.pipeline_step_s(_group(layers=3, rank_bandwidth=(100e9, 50e9)))
    assert r["layers_per_rank"] == [2, 1]  # mlx-lm's split: the low ranks get the extra layer
    assert r["read_s"] == pytest.approx(40e9 * 2 / 3 / 100e9 + 40e9 / 3 / 50e9)
    assert r["wire_bytes_per_token"] == 2 * 8192 * 2


def test_an_unbounded_link_is_a_latency_model_and_writes_no_infinity():
    p = dm.predict(_group(link=float("inf"), latency=1e-3))
    assert p["link_gbs"] is None and p["tensor"]["comm_s"] == pytest.approx(160e-3)
    json.dumps(p, allow_nan=False)


def test_ranks_on_one_host_share_its_bandwidth():
    assert dm.rank_bandwidths(["127.0.0.1", "127.0.0.1"], 10.0) == (5.0, 5.0)
    assert dm.rank_bandwidths(["a", "b", "b"], 12.0) == (12.0, 6.0, 6.0)


def test_estimate_hosts_gives_both_layouts():
    args = ["estimate", "--params", "70e9", "--bits", "4.5", "--layers", "80", "--hidden", "8192", "--bandwidth", "546",
            "--hosts", "2", "--link-gbs", "10", "--json"]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    g = json.loads(out.output)["group"]
    assert g["size"] == 2 and g["tensor"]["tok_s"] > g["pipeline"]["tok_s"] > 0
    assert g["tensor"]["wire_bytes_per_token"] == 2 * 80 * 8192 * 2


@pytest.mark.parametrize("extra, message", [
    (["--hosts", "2"], "--link-gbs"),
    (["--hosts", "1", "--link-gbs", "10"], "2 or more"),
    (["--hosts", "2", "--link-gbs", "10", "--layers", "80"], "--hidden"),
])
def test_estimate_hosts_bad_input_is_one_line_and_exit_2(extra, message):
    out = CliRunner().invoke(main, ["estimate", "--params", "8e9", "--bits", "4", "--bandwidth", "100", *extra])
    assert out.exit_code == 2 and message in out.output


# -- settings --------------------------------------------------------------------------------
def _toml(tmp_path, fake_dir, entry: str, engine: str = "fake"):
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "m"\nengine = "{engine}"\npath = "{fake_dir / "fake-b.gguf"}"\n{entry}\n')
    return cfg


def test_a_distributed_table_is_read_and_merged_with_the_command_line():
    s = config.check_settings("x", config.merge(config.Settings(), {"distributed": {"hosts": ["10.0.0.1", "10.0.0.2"]}},
                                                {"distributed": {"parallel": "pipeline"}}))
    assert s.distributed == Distributed(("10.0.0.1", "10.0.0.2"), "ring", "pipeline", None)
    assert config.settings_from_dict(config.settings_dict(s)) == s
    assert "distributed" not in config.settings_dict(config.Settings())  # one-machine logs keep their layout
    assert from_cli("2", None, None, None) == {"hosts": ["127.0.0.1", "127.0.0.1"]}


@pytest.mark.parametrize("entry, message", [
    ('distributed = { hosts = ["127.0.0.1"] }', "two or more hosts"),
    ('distributed = { hosts = ["a", "b"], backend = "tcp" }', "backend must be one of"),
    ('distributed = { hosts = ["a", "b"], parallel = "expert" }', "tensor or pipeline"),
    ('distributed = { hosts = ["a", "b"], speed = 3 }', "unknown key 'speed'"),
    ('distributed = { backend = "ring" }', "needs hosts"),
    ('distributed = { hosts = ["a", "b"] }', 'only engine "mlx"'),
])
def test_bad_distributed_tables_are_one_line(tmp_path, fake_dir, entry, message):
    with pytest.raises(MacprofError, match=message):
        config.load(_toml(tmp_path, fake_dir, entry))


# -- launching and failing -------------------------------------------------------------------
def test_the_ranks_are_launched_by_mlx_launch():
    cmd = launch.command("/venv/bin/python", Distributed(("127.0.0.1", "127.0.0.1")))
    # each value joined to its option (argparse reads --opt=value), so no host can be read as an option
    assert "--backend=ring" in cmd and "--hosts=127.0.0.1,127.0.0.1" in cmd
    assert cmd[-4:] == ["--", "/venv/bin/python", "-m", "macprof.run.worker"]
    assert "mlx._distributed_utils.launch" in " ".join(cmd) or cmd[0].endswith("mlx.launch")


def test_the_rank_that_died_is_named():
    tail = "rank 1: RuntimeError: boom\n[WARNING] Node with rank 1 exited with code 3\n[WARNING] Node with rank 0 was killed\n"
    assert launch.rank_reason(tail, 2) == "rank 1 of 2 exited with code 3 (RuntimeError: boom)"
    assert launch.rank_reason("Node with rank 0 exited with code -11", 2) == "rank 0 of 2 died from SIGSEGV"
    assert launch.rank_reason("nothing of the kind", 2) is None


# -- two local ranks over loopback (the real engine) ------------------------------------------
SMALL = ["--phases", "warm", "--prompt-tokens", "16", "--gen-tokens", "8", "--reps", "1"]


def _mlx_toml(tmp_path, root, *models: str) -> str:
    path = root / "mlx" / "demo-tiny-f16"
    cfg = tmp_path / "models.toml"
    cfg.write_text("".join(f'[[models]]\nname = "{name}"\nengine = "mlx"\npath = "{path}"\n{extra}\n\n'
                           for name, extra in (m.split("|", 1) for m in models)))
    return str(cfg)


TP2 = 'tp2|distributed = { hosts = ["127.0.0.1", "127.0.0.1"], backend = "ring", parallel = "tensor" }'


@pytest.mark.slow
def test_two_ranks_tensor_parallel_beside_one_process(tiny_dir, tmp_path):
    log = tmp_path / "run.json"
    macprof("run", "--config", _mlx_toml(tmp_path, tiny_dir, "one|", TP2), "--log", str(log), *SMALL)
    one, tp2 = runlog.load(log).models
    assert not tp2.failures and tp2.complete
    tokens = [[r.tokens for r in m.phases.warm.requests] for m in (one, tp2)]
    assert tokens[0] == tokens[1]  # sharding changes where the sums are done, not the greedy tokens
    g = tp2.distributed
    assert g.size == 2 and [r["rank"] for r in g.ranks] == [0, 1] and g.ranks[1]["host_id"]
    (timeline,) = g.timelines
    assert timeline["rank"] == 1 and len(timeline["requests"]) == 2  # warm-up + 1
    assert all(r["tokens_match_rank0"] and len(r["token_times"]) == 8 for r in timeline["requests"])
    assert [c["rank"] for c in g.comm] == [0, 1]
    assert all(c["steps"] == 8 and 0 < c["comm_share"] <= 1 and c["collectives_per_token"] == 4 for c in g.comm)
    assert g.bytes_per_token["payload"] == g.bytes_per_token["measured_payload"] == 2 * 2 * 256 * 2
    assert g.prediction["tensor"]["tok_s"] > 0 and g.efficiency is not None
    assert one.distributed is None and "distributed" not in one.to_json()
    shown = macprof("show", str(log))
    assert "distributed: 2 ranks" in shown.stdout and "tokens equal rank 0" in shown.stdout
    assert verify_file(log).ok and shown.stderr == ""  # its timelines recompute; its communication pass stays as recorded


def _refused(tmp_path, tiny_dir, entry: str) -> str:
    log = tmp_path / "run.json"
    proc = macprof("run", "--config", _mlx_toml(tmp_path, tiny_dir, "one|", f"bad|{entry}"), "--log", str(log), *SMALL)
    one, bad = runlog.load(log).models
    assert proc.returncode == 0 and one.phases.warm.summary.decode_tok_s.n == 1  # the model before it is kept
    (failure,) = bad.failures
    assert failure.status == "refused" and "\n" not in failure.reason
    return failure.reason


@pytest.mark.slow
def test_pipeline_where_mlx_lm_has_none_is_refused_with_the_reason(tiny_dir, tmp_path):
    reason = _refused(tmp_path, tiny_dir, 'distributed = { hosts = ["127.0.0.1", "127.0.0.1"], parallel = "pipeline" }')
    assert reason.startswith("pipeline parallel is not supported") and "llama model has no model.pipeline()" in reason


@pytest.mark.slow
def test_a_backend_this_mlx_lacks_is_refused(tiny_dir, tmp_path):
    reason = _refused(tmp_path, tiny_dir, 'distributed = { hosts = ["127.0.0.1", "127.0.0.1"], backend = "jaccl" }')
    assert reason == "backend 'jaccl' is not available in this MLX build (mx.distributed.is_available('jaccl') is False)"


@pytest.mark.slow
def test_a_host_that_does_not_answer_is_refused(tiny_dir, tmp_path):
    reason = _refused(tmp_path, tiny_dir, 'distributed = { hosts = ["127.0.0.1", "127.0.0.2"] }')
    assert reason.startswith("host 127.0.0.2 ")


@pytest.mark.slow
def test_a_rank_that_dies_is_named_and_what_was_measured_is_kept(tiny_dir, tmp_path):
    log = tmp_path / "run.json"
    fault = json.dumps({"kind": "segfault", "after_requests": 1, "rank": 1})
    macprof("run", "--config", _mlx_toml(tmp_path, tiny_dir, TP2), "--log", str(log), *SMALL[:-1], "2",
            env={"MACPROF_TEST_FAULT": fault}, check=False)
    (m,) = runlog.load(log).models
    (failure,) = m.failures
    assert failure.status == "crashed" and failure.reason.startswith("rank 1 of 2 died from SIGSEGV")
    first, *rest = m.phases.warm.requests
    assert (first.kind, first.status) == ("warmup", "ok")  # rank 0's request before the fault is kept
    assert all(r.status != "ok" for r in rest)  # the one in flight is recorded as not done


def test_run_hosts_on_the_command_line_reaches_the_preflight(fake_dir, tmp_path):
    log = tmp_path / "run.json"
    proc = macprof("run", str(fake_dir / "fake-b.gguf"), "--hosts", "2", "--parallel", "tensor", "--phases", "warm",
                   "--log", str(log), check=False)
    assert proc.returncode == 3  # the only model was refused
    (m,) = runlog.load(log).models
    assert m.settings.distributed.hosts == ("127.0.0.1", "127.0.0.1")
    assert m.failures[0].reason == "engine 'llama.cpp' cannot be sharded: only mlx runs over MLX's distributed runtime"
