"""The whole `macprof run` path against the engine's own benchmark, each in a process of its own.

The in-process loop (bench/loop.py) cannot see what the run path adds around it: the worker
process and how it is started, the parent's RSS sampling and event handling, the journal,
the context the worker creates. Here each pair is one real `macprof run` (a depth case: the
cache holds DEPTH tokens, GEN tokens are decoded, REPS measured requests; its figure is the
median decode tok/s of those requests, read from the run log) and one run of the reference
with the same depth, length, threads and repetitions:
- llama.cpp: llama-bench (`-p 0 -n GEN -d DEPTH -t THREADS -r REPS`, its mean tg tok/s), a
  binary built from the same llama.cpp sources (benchmarks/build_llama_bench.sh);
- MLX: mlx_lm.stream_generate in a fresh process (bench/mlx_reference.py), as mlx_lm.benchmark
  runs it, put on this project's definition (n - 1) / (t_n - t_1).
The order alternates within pairs (A/B, B/A); the reported figure is the median of the paired
ratios with a seeded bootstrap interval, so a 3 % difference is resolved only when the interval
is narrower than that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from macprof.errors import MacprofError
from macprof.measure.significance import median_interval
from macprof.measure.stats import summarize


def _macprof_run(config: Path, model, n: int, depth: int, threads: int | None, reps: int) -> float:
    from macprof.store.runlog import load

    name = model.name
    # the model as it was named: its models.toml entry, or its reference on the command line,
    # after "--" (a reference that starts with "-" is no option)
    which, refs = (["--engine", model.engine], [model.source.ref]) if model.source else \
        ([f"--config={config}", f"--models={name}"], [])
    with tempfile.TemporaryDirectory(prefix="macprof-overhead-") as tmp:
        log = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "macprof", "run", *which, "--depth", str(depth), "--gen-tokens", str(n), "--reps", str(reps), "--log", str(log)]
        if threads:
            cmd += ["--threads", str(threads)]
        cmd += ["--", *refs]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not log.exists():
            raise MacprofError(f"overhead: `macprof run` failed ({done.returncode}): {done.stderr.strip()[-300:]}")
        (model,) = load(log).models
        case = model.phases.depth.cases[0] if model.phases.depth else None
        rate = case.summary.decode_tok_s.median if case else None
        if rate is None:
            raise MacprofError(f"overhead: the run of {name} measured no decode rate ({case and case.reason})")
        return rate


def _llama_bench(binary: Path, model: Path, n: int, depth: int, threads: int, reps: int) -> float:
    from macprof.bench.loop import bench_model

    out = subprocess.run([str(binary), "-m", bench_model(model), "-p", "0", "-n", str(n), "-d", str(depth),
                          "-t", str(threads), "-r", str(reps), "-o", "json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise MacprofError(f"overhead: {binary} failed ({out.returncode}): {out.stderr.strip()[-300:]}")
    (row,) = json.loads(out.stdout)
    return float(row["avg_ts"])  # n decodes over their time: the same rhythm as (n-1)/(t_n - t_1)


def _mlx_reference(model: Path, n: int, depth: int, reps: int) -> float:
    out = subprocess.run([sys.executable, "-m", "macprof.bench.mlx_reference", str(model), str(n), str(depth),
                          str(reps)], capture_output=True, text=True)
    if out.returncode != 0:
        raise MacprofError(f"overhead: the mlx_lm reference failed: {out.stderr.strip()[-300:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_tok_s"])


def reference_for(engine: str, model: Path, n: int, depth: int, threads: int, reps: int,
                  llama_bench: Path | None) -> tuple[str, Callable[[], float]]:
    if engine == "llama.cpp":
        if llama_bench is None:
            raise MacprofError("overhead --path run: llama.cpp's reference is llama-bench itself; build it with "
                               "benchmarks/build_llama_bench.sh and pass --llama-bench PATH")
        return (f"llama-bench tg{n} @ d{depth}, -r {reps}",
                lambda: _llama_bench(llama_bench, model, n, depth, threads, reps))
    return (f"mlx_lm.stream_generate in a fresh process, {reps} reps",
            lambda: _mlx_reference(model, n, depth, reps))


def measure(model, config: Path, n: int, depth: int, pairs: int, threads: int, reps: int,
            llama_bench: Path | None = None, progress: Callable[[str], None] = lambda s: None) -> dict:
    """``model`` is a config.ModelSpec; ``threads`` is given to both sides (llama-bench needs a number)."""
    ref_name, reference = reference_for(model.engine, model.path, n, depth, threads, reps, llama_bench)
    ours, refs, ratios = [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            a = _macprof_run(config, model, n, depth, threads, reps)
            b = reference()
        else:
            b = reference()
            a = _macprof_run(config, model, n, depth, threads, reps)
        ours.append(a)
        refs.append(b)
        ratios.append(a / b)
        progress(f"{model.name}: full path pair {i + 1}/{pairs}: macprof run {a:.1f} tok/s, "
                 f"reference {b:.1f} tok/s, ratio {a / b:.3f}")
    low, high = median_interval(ratios)
    return {"path": "run", "engine": model.engine, "model": model.name, "reference": ref_name, "gen_tokens": n,
            "depth": depth, "threads": threads, "reps": reps, "pairs": pairs, "macprof_tok_s": ours,
            "reference_tok_s": refs, "ratios": ratios, "median_ratio": summarize(ratios)["median"],
            "ratio_ci95": [low, high], "macprof_median": summarize(ours)["median"],
            "reference_median": summarize(refs)["median"]}


def threads_for(model, threads: int | None) -> int:
    """The full path gives both sides the same thread count; llama-bench needs a number."""
    if threads or model.engine != "llama.cpp":
        return threads or 0
    from macprof.engines.llama_cpp_facts import default_threads

    return default_threads()[0]


def table(results: list[dict]) -> str:
    """`macprof overhead`'s results, loop and full path alike, one row each."""
    from macprof.render.text import fmt_x, render_table

    rows = [[r["model"], r["path"], r["reference"], f"{r['macprof_median']:.1f}", f"{r['reference_median']:.1f}",
             f"{r['median_ratio']:.3f}", "-" if not r.get("ratio_ci95") or r["ratio_ci95"][0] is None else
             f"{fmt_x(r['ratio_ci95'][0])}..{fmt_x(r['ratio_ci95'][1])}", str(r["pairs"])] for r in results]
    return render_table(["model", "path", "reference", "macprof tok/s p50", "reference tok/s p50",
                         "median paired ratio", "95% CI", "pairs"], rows)
