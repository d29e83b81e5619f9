"""Check `macprof run --preset llama-bench` and `macprof export --format llama-bench-json` against
llama-bench itself, built from the llama.cpp sources the installed llama-cpp-python vendors
(benchmarks/build_llama_bench.sh), on one GGUF model.

Pairs of runs, alternating which side goes first (A/B, then B/A: a shared machine's load moves
both sides of a pair alike):
- llama-bench: `-m MODEL -p 512 -n 128 -r REPS -o json`, with the threads and flash attention
  that macprof's preset resolves on this machine (read from the engine as it loads the model:
  `-t` its n_threads, `-fa on|off` what llama.cpp made of "auto"; llama-bench itself would write
  flash_attn -1 for auto, and compare-llama-bench.py matches rows on every setting);
- macprof: `macprof run MODEL --preset llama-bench --reps REPS`, then `macprof export --format
  llama-bench-json`.
Per pair: pp512 and tg128 tok/s of each side (avg_ts, llama-bench's definition on both sides);
over the pairs: each side's median, and the median of the paired ratios macprof / llama-bench with
its 95 % percentile bootstrap interval (measure/significance.py median_interval).

Then llama.cpp's own scripts/compare-llama-bench.py (GitPython and tabulate: `pip install -e
".[bench]"`) reads every pair's llama-bench JSON and macprof's export side by side. It compares two
builds by build_commit, and both sides are the same llama.cpp build (macprof's export names the
vendored commit, as llama-bench does), so macprof's rows are given the build name "macprof" here,
in this script's copy, for that script to set them apart.

    python benchmarks/llama_bench_check.py MODEL.gguf [--llama-bench PATH] [--pairs 4] [--reps 5]
        [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = {"pp512": (512, 0), "tg128": (0, 128)}


def resolved(model: Path) -> tuple[int, str]:
    """(threads, flash attention on|off) as macprof's llama.cpp engine resolves them for this model."""
    from macprof.engines.base import EngineSettings
    from macprof.engines.llama_cpp import LlamaCppEngine

    engine = LlamaCppEngine()
    engine.load_model(model, EngineSettings(n_ctx=512 + 16))
    try:
        s = engine.resolved_settings()
        fa = s["flash_attn"].value
        if fa is None:
            raise SystemExit(f"flash attention unresolved: {s['flash_attn'].unknown}")
        return int(s["n_threads"].value), "on" if fa == "enabled" else "off"
    finally:
        engine.close()


def run_llama_bench(binary: Path, model: Path, reps: int, threads: int, fa: str, out: Path) -> list[dict]:
    cmd = [str(binary), "-m", str(model), "-p", "512", "-n", "128", "-r", str(reps), "-o", "json",
           "-t", str(threads), "-fa", fa]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    out.write_text(proc.stdout)
    return json.loads(proc.stdout)


def run_macprof(model: Path, reps: int, out: Path) -> list[dict]:
    macprof = [sys.executable, "-m", "macprof"]
    log = out.with_suffix(".log.json")
    subprocess.run([*macprof, "run", str(model), "--preset", "llama-bench", "--reps", str(reps), "--log", str(log),
                    "--force-overwrite"], capture_output=True, text=True, check=True)
    subprocess.run([*macprof, "export", str(log), "--format", "llama-bench-json", "-o", str(out)],
                   capture_output=True, text=True, check=True)
    rows = json.loads(out.read_text())
    # compare-llama-bench.py sets two builds apart by build_commit; both sides are one llama.cpp build
    relabelled = out.with_suffix(".macprof-build.json")
    relabelled.write_text(json.dumps([{**r, "build_commit": "macprof"} for r in rows], indent=1))
    return rows


def tok_s(rows: list[dict]) -> dict[str, float]:
    return {name: next(r["avg_ts"] for r in rows if (r["n_prompt"], r["n_gen"], r["n_depth"]) == (*shape, 0))
            for name, shape in TESTS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--llama-bench", type=Path, help="llama-bench binary [built by build_llama_bench.sh]")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, help="where the outputs go [a temporary folder]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from macprof.measure.significance import median_interval
    from macprof.measure.stats import median

    binary = args.llama_bench or Path(subprocess.run(["bash", str(HERE / "build_llama_bench.sh")], capture_output=True,
                                                     text=True, check=True).stdout.strip().splitlines()[-1])
    out = args.out or Path(tempfile.mkdtemp(prefix="llama-bench-check-"))
    out.mkdir(parents=True, exist_ok=True)
    threads, fa = resolved(args.model)
    load = [os.getloadavg()[0]]
    pairs = []
    for i in range(args.pairs):
        sides = {}
        for side in (("llama-bench", "macprof") if i % 2 == 0 else ("macprof", "llama-bench")):
            if side == "llama-bench":
                sides[side] = tok_s(run_llama_bench(binary, args.model, args.reps, threads, fa, out / f"llama-bench-{i}.json"))
            else:
                sides[side] = tok_s(run_macprof(args.model, args.reps, out / f"macprof-{i}.json"))
            load.append(os.getloadavg()[0])
        pairs.append(sides)
    summary = {}
    for test in TESTS:
        ratios = [p["macprof"][test] / p["llama-bench"][test] for p in pairs]
        summary[test] = {"llama-bench": median([p["llama-bench"][test] for p in pairs]),
                         "macprof": median([p["macprof"][test] for p in pairs]),
                         "ratio": median(ratios), "interval": median_interval(ratios), "ratios": ratios}
    script = binary.resolve().parents[2] / "scripts" / "compare-llama-bench.py"
    build = json.loads((out / "llama-bench-0.json").read_text())[0]["build_commit"]
    inputs = [x for i in range(args.pairs) for x in ("-i", str(out / f"llama-bench-{i}.json"), "-i",
                                                      str(out / f"macprof-{i}.macprof-build.json"))]
    missing = [name for name in ("git", "tabulate") if importlib.util.find_spec(name) is None]
    if missing:  # the script's own imports: say which, not its traceback
        compared = subprocess.CompletedProcess([], 1, "", f"not run: compare-llama-bench.py imports {', '.join(missing)} "
                                                          f"(GitPython, tabulate): pip install -e \".[bench]\"")
    else:
        compared = subprocess.run([sys.executable, str(script), "--tool", "llama-bench", *inputs, "-b", build,
                                   "-c", "macprof"], capture_output=True, text=True, cwd=out)
    result = {"model": str(args.model), "llama_bench": str(binary), "threads": threads, "flash_attn": fa,
              "pairs": pairs, "summary": summary, "load_1min": load, "outputs": str(out),
              "compare_llama_bench": compared.stdout if compared.returncode == 0 else compared.stderr}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.model.name}: llama-bench ({binary}) against macprof --preset llama-bench, {args.pairs} alternated "
          f"pairs of {args.reps} reps each side; -t {threads} -fa {fa} (macprof's resolved); 1-min load "
          f"{min(load):.2f}..{max(load):.2f} on {os.cpu_count()} cores")
    for i, p in enumerate(pairs):
        print(f"  pair {i}: " + "; ".join(f"{t} llama-bench {p['llama-bench'][t]:.2f}, macprof {p['macprof'][t]:.2f}"
                                          for t in TESTS))
    for test, s in summary.items():
        low, high = s["interval"]
        print(f"{test}: llama-bench {s['llama-bench']:.2f} tok/s, macprof {s['macprof']:.2f} tok/s (medians); "
              f"macprof / llama-bench {s['ratio']:.3f} [{low:.3f}, {high:.3f}] (median paired ratio, 95% bootstrap)")
    print(f"\nscripts/compare-llama-bench.py -b {build} (llama-bench) -c macprof, outputs in {out}:")
    print(result["compare_llama_bench"])


if __name__ == "__main__":
    main()
