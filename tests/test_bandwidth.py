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


def test_a_noisy_probe_serves_its_run_and_is_not_kept(cache_root, monkeypatch):
    """A probe whose repetitions spread over 10 % of their median (other work competed) is used by
    the run that measured it, never cached for the day's later runs, which measure again."""
    spreads = iter([0.5, 0.5, 0.01, 0.01])
    calls = []
    monkeypatch.setattr(probes, "measure", lambda **kw: calls.append(kw) or {"median_gbs": 4.0, "stdev_gbs": next(spreads),
                                                                             "device": "cpu"})
    monkeypatch.setattr(probes, "measure_flops", lambda **kw: {"median_tflops": 0.1})
    monkeypatch.setenv("MACPROF_CACHE", str(cache_root / "bw-noisy"))
    assert [probes.cached()["cached"] for _ in range(4)] == [False, False, False, True]
    assert len(calls) == 3  # noisy (12 %), noisy, quiet: kept, and read back the fourth time


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


def test_a_noisy_or_low_bandwidth_figure_is_warned_of_with_when_it_was_measured():
    """The summary names a measured bandwidth whose repetitions spread over 10 %, and the warm
    decode figures above the ceiling it gives (a log whose figures its raw records give)."""
    from macprof.render.summary import warnings
    from macprof.store import runlog
    from tests.conftest import FIXTURES, recomputed

    data = json.loads((FIXTURES / "runlogs" / "tiny-a.json").read_text())
    measured = data["bandwidth"]["measured"]
    assert not any("bandwidth" in w for w in warnings(runlog.parse("tiny-a", json.dumps(data))))
    measured.update(gbs=0.01, stdev_gbs=0.002, utc="2026-12-04T13:17:44+00:00", cached=True)
    log = runlog.parse("edited", json.dumps(recomputed(data)))
    said = [w for w in warnings(log) if "bandwidth" in w]
    assert said[0].startswith("the measured bandwidth 0.0 GB/s (measured 2026-12-04T13:17:44+00:00, cached) varied by "
                              "20% between its repetitions")
    above = [m.identity.name for m in log.models if m.phases.warm and m.phases.warm.roofline.measured.efficiency > 1]
    assert above and said[1].startswith("warm decode above the measured-bandwidth ceiling") \
        and said[1].count("demo-") == len(above)


def test_macprof_bandwidth_keeps_no_noisy_figure_and_says_so(cache_root, monkeypatch):
    monkeypatch.setattr(probes, "measure", lambda **kw: {"median_gbs": 4.0, "best_gbs": 5.0, "stdev_gbs": 1.0, "device": "cpu",
                                                         "method": "m", "sizes_mib": [1], "reps": 3})
    monkeypatch.setattr(probes, "measure_flops", lambda **kw: {"median_tflops": 0.1, "best_tflops": 0.1, "device": "cpu",
                                                               "method": "m"})
    monkeypatch.setenv("MACPROF_CACHE", str(cache_root / "bw-cli-noisy"))
    r = CliRunner().invoke(main, ["bandwidth"])
    assert r.exit_code == 0 and "not kept for the day's runs: its repetitions spread over 10% of their median" in r.output
    assert probes.read_cache() is None
