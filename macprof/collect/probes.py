"""Measured memory bandwidth: the probe behind `macprof bandwidth` and the run's ceiling.

On Apple Silicon the engines read weights on the GPU, so the probe uses MLX there (large
arrays, sum reductions and copies, each synchronised with mx.eval), in a child process: MLX
keeps the buffers it frees cached for the life of the process. Elsewhere it reads with
numpy on the CPU: one thread per core, each reducing its own slice of a buffer many times the
last-level cache (numpy releases the GIL in reductions, so the threads run in parallel). The
reduction is a maximum: one SIMD compare per element, so the cores wait on memory, not on
arithmetic (a float sum's pairwise adds cost about a tenth of the bandwidth here).
Read bandwidth = bytes read / time; best and median over repetitions and sizes.

Beside it, the peak matmul throughput on the same device (the compute side of the roofline,
for the batching prediction and the prefill ceiling where Apple publishes no FLOP figure):
square float32 matmuls through numpy's BLAS on the CPU, float16 through MLX on the GPU.
It is an upper bound: an engine's quantized kernels may reach less.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from macprof.collect.system import utc_now
from macprof.measure.stats import summarize, unstable

CACHE_TTL_S = 24 * 3600


def llc_bytes() -> int:
    """Last-level cache size (Linux sysfs); 32 MiB when unknown."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in base.glob("index*"):
        try:
            text = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 2**20}.get(text[-1], 1)
            best = max(best, int(text.rstrip("KM")) * mult)
        except (OSError, ValueError):
            continue
    return best or 32 * 2**20


def _numpy_probe(size_bytes: int, threads: int, reps: int) -> list[float]:
    from concurrent.futures import ThreadPoolExecutor  # here: every run imports this module, few measure

    import numpy as np

    n = size_bytes // 8
    buf = np.ones(n, dtype=np.float64)  # touched: every page is resident before timing
    bounds = np.linspace(0, n, threads + 1).astype(int)
    chunks = [buf[a:b] for a, b in zip(bounds, bounds[1:])]
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.maximum.reduce, chunks))  # warm-up
        for _ in range(reps):
            t = time.perf_counter()
            list(pool.map(np.maximum.reduce, chunks))
            rates.append(buf.nbytes / (time.perf_counter() - t) / 1e9)
    return rates


def _mlx_probe(size_bytes: int, reps: int) -> tuple[list[float], list[float]]:
    import mlx.core as mx

    a = mx.ones((size_bytes // 4,), dtype=mx.float32)
    mx.eval(a)
    reads, copies = [], []
    mx.eval(mx.sum(a))  # warm-up (kernel compilation)
    for _ in range(reps):
        t = time.perf_counter()
        mx.eval(mx.sum(a))
        reads.append(a.nbytes / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        b = a * 1.0  # a copy: reads and writes every byte once
        mx.eval(b)
        copies.append(2 * a.nbytes / (time.perf_counter() - t) / 1e9)
        del b
    return reads, copies


def isolated(name: str, **kwargs) -> dict:
    """Run the probe ``name`` (measure, measure_flops) in a fresh interpreter and return its
    result. MLX keeps the buffers a probe frees in its cache for the life of the process (GiBs
    here): in the parent they would stay held through the whole run, leaving less memory to
    the model and skewing the memory-refusal decision. A child gives all of it back on exit."""
    from macprof.collect import lifeline

    # the child ends with the parent, however the parent ends (collect/lifeline.py): GiBs of buffers
    code = ("import json, sys; from macprof.collect import lifeline; lifeline.hold(); from macprof.collect import probes; "
            "print(json.dumps(getattr(probes, sys.argv[1])(**json.loads(sys.argv[2]), isolate=False)))")
    out = subprocess.run([sys.executable, "-c", code, name, json.dumps(kwargs)], capture_output=True, text=True,
                         timeout=600, check=False, **lifeline.popen_args(dict(os.environ)))
    if out.returncode != 0:
        tail = (out.stderr or "").strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        raise RuntimeError(f"{name} in a separate process failed: {tail[0]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(device: str | None = None, threads: int | None = None, sizes_mib: list[int] | None = None,
            reps: int = 7, isolate: bool = True) -> dict:
    """Measure read bandwidth; device "gpu" (MLX, Apple Silicon default: in a separate process,
    see ``isolated``) or "cpu" (numpy)."""
    if device is None:
        device = "gpu" if sys.platform == "darwin" else "cpu"
    threads = threads or os.cpu_count() or 1
    llc = llc_bytes()
    if sizes_mib is None:
        import psutil

        base = max(512, 16 * llc // 2**20)
        cap = psutil.virtual_memory().available // 4 // 2**20
        sizes_mib = [min(base, cap), min(2 * base, cap)]
    if device == "gpu" and isolate:
        return isolated("measure", device=device, threads=threads, sizes_mib=sizes_mib, reps=reps)
    samples: list[float] = []
    per_size = {}
    for mib in sizes_mib:
        if device == "gpu":
            reads, copies = _mlx_probe(mib * 2**20, reps)
            per_size[str(mib)] = {"read_gbs": summarize(reads), "copy_gbs": summarize(copies)}
        else:
            reads = _numpy_probe(mib * 2**20, threads, reps)
            per_size[str(mib)] = {"read_gbs": summarize(reads)}
        samples += reads
    s = summarize(samples)
    return {"device": device, "method": "MLX sum reductions (mx.eval)" if device == "gpu" else
            f"numpy maximum.reduce, {threads} threads over buffers >= 16x the last-level cache",
            "threads": threads if device == "cpu" else None, "llc_bytes": llc, "sizes_mib": sizes_mib,
            "reps": reps, "best_gbs": s["max"], "median_gbs": s["median"], "stdev_gbs": s["stdev"],
            "samples_gbs": samples, "per_size": per_size, "utc": utc_now(), "pid": os.getpid()}


def measure_flops(device: str | None = None, n: int | None = None, reps: int = 5, isolate: bool = True) -> dict:
    """Peak matmul throughput: 2 n^3 operations per n x n matmul; median and best of ``reps``
    (MLX in a separate process, as ``measure``)."""
    if device is None:
        device = "gpu" if sys.platform == "darwin" else "cpu"
    if device == "gpu" and isolate:
        return isolated("measure_flops", device=device, n=n, reps=reps)
    if device == "gpu":
        import mlx.core as mx

        n = n or 4096
        a = mx.ones((n, n), dtype=mx.float16)
        matmul = lambda: mx.eval(a @ a)  # noqa: E731
        method = f"MLX float16 matmul {n}x{n}"
    else:
        import numpy as np

        n = n or 2048
        a = np.ones((n, n), dtype=np.float32)  # type: ignore[assignment]  # the other branch's array: each is used alone
        matmul = lambda: a @ a  # type: ignore[assignment]  # noqa: E731
        method = f"numpy float32 matmul {n}x{n} (BLAS, all cores)"
    matmul()  # warm-up: kernel compilation (MLX), BLAS threads starting (numpy)
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        matmul()
        rates.append(2 * n**3 / (time.perf_counter() - t) / 1e12)
    s = summarize(rates)
    return {"device": device, "method": method, "median_tflops": s["median"], "best_tflops": s["max"],
            "samples_tflops": rates, "pid": os.getpid()}


def _cache_path() -> Path:
    from macprof.files.fileid import cache_dir
    from macprof.collect.system import host_id

    return cache_dir() / f"bandwidth-{host_id()}.json"


def read_cache() -> tuple[dict, float] | None:
    """The probes' last result on this machine and when it was measured (time.time()), or None;
    never measures (`macprof models` shows it without running the probe)."""
    try:
        data = json.loads(_cache_path().read_text())
        if "flops" in data["result"] and isinstance(data["measured_at"], (int, float)):
            return data["result"], float(data["measured_at"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def noisy(result: dict) -> bool:
    """Whether a bandwidth probe's repetitions spread over measure/stats.py's ``UNSTABLE`` of their
    median: it ran while other work competed. It serves the command that measured it (a run's
    summary warns of it, by the same rule) but is not kept for the day's later runs."""
    return unstable({"median": result.get("median_gbs"), "stdev": result.get("stdev_gbs")})


def store(result: dict) -> None:
    """Keep a result (bandwidth, with matmul throughput under "flops") for this machine, unless
    it is noisy."""
    if noisy(result):
        return
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"measured_at": time.time(), "result": result}))
    except OSError:
        pass


def cached(max_age_s: float = CACHE_TTL_S, **kwargs) -> dict:
    """The probes' result for this machine (bandwidth, and matmul throughput under "flops"),
    re-measured when older than a day, or when the last one was too noisy to keep."""
    found = read_cache()
    if found is not None and time.time() - found[1] < max_age_s:
        return {**found[0], "cached": True}
    result = measure(**kwargs)
    try:
        result["flops"] = measure_flops(device=result.get("device"))
    except Exception as exc:  # noqa: BLE001 - the compute side stays unknown, with the reason
        result["flops"] = {"median_tflops": None, "reason": f"matmul probe failed: {exc}"}
    store(result)
    return {**result, "cached": False}
