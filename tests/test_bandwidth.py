"""The bandwidth probe runs and reports a spread (its accuracy against STREAM is a benchmark:
benchmarks/stream_check.py)."""

import json

from click.testing import CliRunner

from macprof.collect import probes
from macprof.cli import main


def test_cpu_probe_small():
    r = probes.measure(device="cpu", threads=2, sizes_mib=[32, 64], reps=3)
    assert r["best_gbs"] >= r["median_gbs"] > 0 and len(r["samples_gbs"]) == 6
    assert set(r["per_size"]) == {"32", "64"}


def test_mlx_probe_path_runs():
    # On Apple Silicon this is the GPU probe; on Linux MLX runs the same code on the CPU.
    r = probes.measure(device="gpu", sizes_mib=[16], reps=2)
    assert r["best_gbs"] > 0 and r["per_size"]["16"]["copy_gbs"]["median"] > 0


def test_cached_per_machine(cache_root, monkeypatch):
    calls = []
    monkeypatch.setattr(probes, "measure", lambda **kw: calls.append(kw) or {"median_gbs": 1.0, "device": "cpu"})
    monkeypatch.setattr(probes, "measure_flops", lambda **kw: {"median_tflops": 0.1})
    path = cache_root / "bw-test"
    monkeypatch.setenv("MACPROF_CACHE", str(path))
    first, second = probes.cached(), probes.cached()
    assert len(calls) == 1 and first["cached"] is False and second["cached"] is True
    probes.cached(max_age_s=0)
    assert len(calls) == 2 and second["flops"]["median_tflops"] == 0.1


def test_matmul_probes():
    cpu = probes.measure_flops(device="cpu", n=256, reps=3)
    assert cpu["best_tflops"] >= cpu["median_tflops"] > 0 and len(cpu["samples_tflops"]) == 3
    gpu = probes.measure_flops(device="gpu", n=64, reps=2)  # MLX (on Linux, on the CPU)
    assert gpu["median_tflops"] > 0 and "MLX" in gpu["method"]


def test_cli_json(monkeypatch):
    # the real probes, small: buffers of 32 MiB instead of the default sizes, a 256x256 matmul
    measure, flops = probes.measure, probes.measure_flops
    monkeypatch.setattr(probes, "measure", lambda **kw: measure(**{**kw, "sizes_mib": [32]}))
    monkeypatch.setattr(probes, "measure_flops", lambda **kw: flops(**{**kw, "n": 256}))
    r = CliRunner().invoke(main, ["bandwidth", "--device", "cpu", "--reps", "2", "--json"])
    out = json.loads(r.output)
    assert r.exit_code == 0 and out["best_gbs"] > 0 and out["flops"]["median_tflops"] > 0
