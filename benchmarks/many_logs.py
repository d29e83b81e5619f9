"""How long `macprof compare` and `macprof plot` take on many run logs (issue #22, "many logs
stay fast"). The target: 50 default-run logs (six models each) compared in under 2 s and plotted
in under 5 s on a 2-core machine. Speed is measured here, never in a unit test.

The logs are copies of one real log, by default tests/fixtures/runlogs/other-machine-demo-small.json
(a default `macprof run` of the six small demo models, passed through `macprof share`); --log takes
any other, e.g. a default run of your own. Each copy is made a distinct run as logset sees it
(macprof/store/logset.py: run_key): its own started_utc / ended_utc, an hour apart. The same
machine, as 50 reruns on one machine would be. Each copy's warm requests are decoded faster or
slower by a seeded factor (within 3%): their raw token stamps after the first are stretched, and
every figure is recomputed from the stamps by build itself (analyse/unbuild.py), so that no run's
samples equal another's (nothing that could reuse one run's figures for another, a cache keyed on
values, makes the copies cheap) and each copy is a log macprof could have written: it verifies
(store/verify.py) and carries its digest, as `run` saves it (store/runlog.py).

Each timing is one fresh process (`python -m macprof compare|plot`), wall clock, the same
command line a user runs; the median of --reps runs is reported, with the min and max:

    python benchmarks/many_logs.py [--logs 50] [--reps 5] [--only compare|plot] [--json]
    python benchmarks/many_logs.py --profile compare   # where the time goes (cProfile, top 25)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "runlogs" / "other-machine-demo-small.json"
TARGETS = {"compare": 2.0, "plot": 5.0}  # seconds, for 50 logs on a 2-core machine


def _stretched(times: list, factor: float) -> list:
    """Token stamps (ns) decoded ``factor`` times as fast: the first token where it was, each gap
    after it divided by ``factor``."""
    if not times:
        return times
    first = times[0]
    return [first + round((t - first) / factor) for t in times]


def write_logs(source: Path, folder: Path, n: int, seed: int = 0) -> list[Path]:
    """n distinct runs made from ``source``: started an hour apart, decode sped up or slowed per
    run, figures recomputed from the stamps, saved with their digest."""
    from macprof.analyse.unbuild import rebuilt
    from macprof.model.log import RunLog
    from macprof.store import runlog

    base = json.loads(source.read_text(encoding="utf-8"))
    base.pop("digest", None)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        log = json.loads(json.dumps(base))  # a deep copy
        t0 = start + dt.timedelta(hours=i)
        log["started_utc"], log["ended_utc"] = t0.isoformat(), (t0 + dt.timedelta(minutes=5)).isoformat()
        for model in log.get("models") or []:
            warm = (model.get("phases") or {}).get("warm") or {}
            for req in warm.get("requests") or []:
                req["token_times"] = _stretched(req.get("token_times") or [], 1 + rng.uniform(-0.03, 0.03))
        typed = runlog.parse(f"copy {i} of {source}", json.dumps(log), log)
        log["models"] = rebuilt(typed).to_json()["models"]
        path = folder / f"run-{i:03d}.json"
        runlog.save(RunLog.from_json(log), path)  # as run writes it: validated, its digest, atomically
        paths.append(path)
    return paths


def command(what: str, folder: Path, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "macprof", what, str(folder)]
    return cmd + (["-o", str(out / "chart.png")] if what == "plot" else [])


def time_once(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - t


def profile(cmd: list[str], top: int) -> None:
    """The command under cProfile in a fresh process; the top entries by cumulative time."""
    with tempfile.TemporaryDirectory() as tmp:
        stats = Path(tmp) / "prof"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(stats), *cmd[1:]], check=True,
                       stdout=subprocess.DEVNULL, cwd=ROOT)
        import pstats

        pstats.Stats(str(stats)).sort_stats("cumulative").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=int, default=50)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--log", type=Path, default=FIXTURE, help="the real run log to copy [%(default)s]")
    ap.add_argument("--only", choices=sorted(TARGETS))
    ap.add_argument("--dir", type=Path, help="write the logs here (kept) instead of a temporary folder")
    ap.add_argument("--profile", choices=sorted(TARGETS), help="profile one run of this command instead of timing")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        paths = write_logs(args.log, folder, args.logs)
        size_kb = statistics.mean(p.stat().st_size for p in paths) / 1000
        out = Path(tmp)
        if args.profile:
            profile(command(args.profile, folder, out), args.top)
            return
        result = {"logs": args.logs, "log_kb": round(size_kb), "source": str(args.log), "reps": args.reps,
                  "cpus": os.cpu_count(), "commands": {}}
        for what in [args.only] if args.only else sorted(TARGETS):
            cmd = command(what, folder, out)
            time_once(cmd)  # a first run, not counted: the page cache and .pyc files as a user has them
            runs = [time_once(cmd) for _ in range(args.reps)]
            result["commands"][what] = {"median_s": statistics.median(runs), "min_s": min(runs), "max_s": max(runs),
                                        "runs_s": runs, "target_s": TARGETS[what] if args.logs == 50 else None}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.logs} logs of {size_kb:.0f} kB ({args.log.name}), {os.cpu_count()} CPUs, median of {args.reps} fresh processes:")
    for what, r in result["commands"].items():
        target = f", target < {r['target_s']:g} s" if r["target_s"] else ""
        print(f"  macprof {what:8} {r['median_s']:6.2f} s  (min {r['min_s']:.2f}, max {r['max_s']:.2f}{target})")


if __name__ == "__main__":
    main()
