"""The roofline against the seed documents' worked examples (to their printed precision) and
`macprof estimate` reproducing them."""

import json

import pytest
from click.testing import CliRunner

from macprof.cli import main
from macprof.analyse.estimate import estimate
from macprof.measure.roofline import Roofline, kv_bytes_per_token


def test_l40s_8b_bf16():
    # 8e9 params x 2 bytes = 16 GB; 864 GB/s; 362 TFLOP/s BF16
    e = estimate(params=8e9, bytes_per_param=2, bandwidth_gbs=864, tflops=362)
    assert round(e["weight_read_s"] * 1e3, 1) == 18.5  # "16 / 864 ≈ 0,0185 s, soit 18,5 ms"
    assert round(e["compute_s"] * 1e3, 2) == 0.04  # "environ 0,04 ms"
    assert e["read_over_compute"] > 400  # "plus de quatre cents fois plus lente"
    assert round(e["ceiling_tok_s"]) == 54  # "1 / 0,0185 ≈ 54 tokens par seconde"
    assert e["bound"] == "memory"


def test_m5_pro_8b_q4_k_m():
    e = estimate(file_size_gb=4.9, chip="M5 Pro")
    assert e["bandwidth_gbs"] == 307
    assert round(e["ceiling_tok_s"]) == 63  # "307 / 4,9 ≈ 63 tokens/s"


def test_llama3_8b_kv_cache():
    per_token = kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2)
    assert per_token == 128 * 1024  # "128 Kio par token"
    assert per_token * 4096 == 512 * 2**20  # "512 Mio pour 4K tokens"
    assert round(per_token * 4096 / 1e9, 2) == 0.54  # "environ 0,54 Go"


def test_batching_one_and_eight_users():
    e = estimate(params=8e9, bytes_per_param=2, bandwidth_gbs=864, tflops=362, layers=32, kv_heads=8,
                 head_dim=128, context=4096, batches=[1, 8])
    one, eight = e["batch"]
    assert round(one["itl_s"] * 1e3, 1) == 19.1  # "de 19,1 ..."
    assert round(eight["itl_s"] * 1e3, 1) == 23.5  # "... à 23,5 ms"
    assert eight["aggregate_vs_batch1"] > 6  # "multiplié par plus de six"
    assert eight["bound"] == "memory"


def test_compute_bound_at_large_batch():
    r = Roofline(weight_bytes=16e9, bandwidth=864e9, active_params=8e9, flops=362e12)
    assert r.bound(batch=1) == "memory" and r.bound(batch=2048) == "compute"
    assert r.step_s(batch=2048) == pytest.approx(2048 * 2 * 8e9 / 362e12)


def test_estimate_cli_prints_the_examples():
    out = CliRunner().invoke(main, ["estimate", "--params", "8B", "--bytes-per-param", "2", "--bandwidth", "864",
                                    "--tflops", "362", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                                    "--context", "4096", "--batch", "1,8"]).output
    for text in ("18.5 ms per token", "0.0442 ms", "54.0 at 0", "128.0 KiB per token", "512.0 MiB (0.54 GB)",
                 "19.1 ms", "23.5 ms", "x6.52"):
        assert text in out, text
    m5 = CliRunner().invoke(main, ["estimate", "--file-size", "4.9", "--chip", "M5 Pro", "--json"])
    assert round(json.loads(m5.output)["ceiling_tok_s"]) == 63


def test_estimate_needs_a_known_chip_variant():
    r = CliRunner().invoke(main, ["estimate", "--file-size", "4", "--chip", "M4 Max"])
    assert r.exit_code == 2 and "give --gpu-cores" in r.output
    r = CliRunner().invoke(main, ["estimate", "--file-size", "4", "--chip", "M4 Max", "--gpu-cores", "32", "--json"])
    assert json.loads(r.output)["bandwidth_gbs"] == 410


BW = ["--bandwidth", "100"]


@pytest.mark.parametrize("args,option", [
    (["--params", "nan", "--bits", "4", *BW], "--params"),
    (["--params", "inf", "--bits", "4", *BW], "--params"),
    (["--params", "1e308", "--bits", "4", *BW], "--params"),
    (["--params", "-8B", "--bits", "4", *BW], "--params"),
    (["--params", "8B", "--active-params", "0", "--bits", "4", *BW], "--active-params"),
    (["--params", "8B", "--bits", "0", *BW], "--bits"),
    (["--params", "8B", "--bytes-per-param", "nan", *BW], "--bytes-per-param"),
    (["--params", "8B", "--bytes-per-param", "-2", *BW], "--bytes-per-param"),
    (["--file-size", "1e308", *BW], "--file-size"),
    (["--file-size", "0", *BW], "--file-size"),
    (["--file-size", "4", "--bandwidth", "nan"], "--bandwidth"),
    (["--file-size", "4", "--bandwidth", "0"], "--bandwidth"),
    (["--file-size", "4", "--bandwidth", "1e308"], "--bandwidth"),
    (["--file-size", "4", *BW, "--tflops", "-1"], "--tflops"),
    (["--file-size", "4", *BW, "--tflops", "inf"], "--tflops"),
    (["--file-size", "4", "--chip", "M4 Max", "--gpu-cores", "0"], "--gpu-cores"),
    (["--file-size", "4", *BW, "--context", "-5"], "--context"),
    (["--file-size", "4", *BW, "--layers", "0", "--kv-heads", "8", "--head-dim", "128"], "--layers"),
    (["--file-size", "4", *BW, "--layers", "32", "--kv-heads", "0", "--head-dim", "128"], "--kv-heads"),
    (["--file-size", "4", *BW, "--layers", "32", "--kv-heads", "8", "--head-dim", "-1"], "--head-dim"),
    (["--file-size", "4", *BW, "--kv-bits", "nan"], "--kv-bits"),
    (["--file-size", "4", *BW, "--batch", "0"], "--batch"),
    (["--file-size", "4", *BW, "--batch", "1,8,0"], "--batch"),
])
def test_estimate_refuses_meaningless_numbers(args, option):
    r = CliRunner().invoke(main, ["estimate", *args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"macprof: error: estimate: {option} must be ") and r.output.count("\n") == 1


def test_estimate_library_checks_its_inputs_too():
    from macprof.errors import MacprofError

    with pytest.raises(MacprofError, match="--bandwidth must be a number from 0.001 to 1e"):
        estimate(file_size_gb=4, bandwidth_gbs=float("nan"))
    with pytest.raises(MacprofError, match="--batch must be an integer"):
        estimate(file_size_gb=4, bandwidth_gbs=100, batches=[True])


def test_estimate_unknown_chip_lists_the_known_ones():
    r = CliRunner().invoke(main, ["estimate", "--file-size", "4", "--chip", "M4 Mx"])
    assert r.exit_code == 2 and "--chip 'M4 Mx': unknown chip (known: M1, M1 Pro," in r.output
    assert "M4 Max" in r.output and "M5 Pro" in r.output
    ok = CliRunner().invoke(main, ["estimate", "--file-size", "4.9", "--chip", "apple  m5 pro", "--json"])
    assert json.loads(ok.output)["bandwidth_gbs"] == 307
    binned = CliRunner().invoke(main, ["estimate", "--file-size", "4", "--chip", "M4 Max", "--gpu-cores", "36"])
    assert binned.exit_code == 2 and "(give --gpu-cores 32 or 40)" in binned.output
