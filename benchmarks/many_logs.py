"""How long `macprof compare` and `macprof plot` take on many run logs (issue #22, "many logs
stay fast"). The target: 50 default-run logs (six models each) compared in under 2 s and plotted
in under 5 s on a 2-core machine. Speed is measured here, never in a unit test.

The logs are copies of one real log, by default tests/fixtures/runlogs/other-machine-demo-small.json
(a default `macprof run` of the six small demo models, passed through `macprof share`); --log takes
any other, e.g. a default run of your own. Each copy is made a distinct run as logset sees it
(macprof/store/logset.py: run_key): its own started_utc / ended_utc, an hour apart. The same
machine, as 50 reruns on one machine would be. Each copy's requests run at a seeded speed of
their own (every stamp after a request's start moved by a factor within 3%), so that no run's
samples equal another's: nothing that could reuse one run's figures for another (a cache keyed on
values) makes the copies cheap. Every figure is then recomputed from those stamps by build itself
(analyse/unbuild.py) and the copy gets its content digest, as `macprof run` writes a log: each
copy verifies, as a real run's log does (`compare` checks each: store/verify.py). --no-digest
leaves the digest out, as logs written before it have none (`compare` then rebuilds each one's
figures to check them, the slower path).

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


def _requests(value):
    """Every request of a log's JSON: whatever holds a start stamp and token stamps."""
    if isinstance(value, dict):
        if "t0" in value and "token_times" in value:
            yield value
        for v in value.values():
            yield from _requests(v)
    elif isinstance(value, list):
        for v in value:
            yield from _requests(v)


def _slowed(req: dict, factor: float) -> None:
    """The request's stamps after its start moved by ``factor``: as if it ran that much slower."""
    t0 = req["t0"]
    for stamp in ("t_tokenized", "t_prefilled"):  # a bench pp request's prefill is stamped too
        if req.get(stamp) is not None:
            req[stamp] = t0 + round((req[stamp] - t0) * factor)
    req["token_times"] = [t0 + round((t - t0) * factor) for t in req["token_times"]]


def write_logs(source: Path, folder: Path, n: int, seed: int = 0, digest: bool = True) -> list[Path]:
    """n distinct runs made from ``source``: started an hour apart, each request's stamps moved
    by a factor per run, every figure recomputed from them, and the digest where ``digest``."""
    sys.path.insert(0, str(ROOT))
    from macprof.analyse.unbuild import rebuilt
    from macprof.store import runlog
    from macprof.store.digest import stamped

    base = json.loads(source.read_text(encoding="utf-8"))
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        log = json.loads(json.dumps(base))  # a deep copy
        t0 = start + dt.timedelta(hours=i)
        log["started_utc"], log["ended_utc"] = t0.isoformat(), (t0 + dt.timedelta(minutes=5)).isoformat()
        for req in _requests(log.get("models")):
            _slowed(req, 1 + rng.uniform(-0.03, 0.03))
        # every figure recomputed from the moved stamps, as `macprof verify` rebuilds a log (not
        # tests/conftest.py's helper: importing the test setup would change the timed processes' env)
        log = {**log, "models": rebuilt(runlog.parse(str(source), json.dumps(log))).to_json()["models"]}
        log = stamped(log) if digest else log
        path = folder / f"run-{i:03d}.json"
        path.write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")  # as runlog.save writes
        paths.append(path)
    return paths


def command(what: str, folder: Path, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "macprof", what, str(folder)]
    return cmd + (["-o", str(out / "chart.png")] if what == "plot" else [])


def time_once(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - t


def timings(runs: list[float], target: float | None) -> dict:
    """A command's timed runs: median, min, max, each run, and its target (None: none at this size)."""
    return {"median_s": statistics.median(runs), "min_s": min(runs), "max_s": max(runs), "runs_s": runs,
            "target_s": target}


def timing_line(what: str, r: dict) -> str:
    target = f", target < {r['target_s']:g} s" if r["target_s"] else ""
    return f"  macprof {what:10} {r['median_s']:6.2f} s  (min {r['min_s']:.2f}, max {r['max_s']:.2f}{target})"


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
    ap.add_argument("--no-digest", action="store_true", help="logs as written before the digest: compare rebuilds each")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        paths = write_logs(args.log, folder, args.logs, digest=not args.no_digest)
        size_kb = statistics.mean(p.stat().st_size for p in paths) / 1000
        out = Path(tmp)
        if args.profile:
            profile(command(args.profile, folder, out), args.top)
            return
        result = {"logs": args.logs, "log_kb": round(size_kb), "source": str(args.log), "reps": args.reps,
                  "digest": not args.no_digest,
                  "cpus": os.cpu_count(), "commands": {}}
        for what in [args.only] if args.only else sorted(TARGETS):
            cmd = command(what, folder, out)
            time_once(cmd)  # a first run, not counted: the page cache and .pyc files as a user has them
            runs = [time_once(cmd) for _ in range(args.reps)]
            result["commands"][what] = timings(runs, TARGETS[what] if args.logs == 50 else None)
    report(result, args.json, f"{args.logs} logs of {size_kb:.0f} kB ({args.log.name}, "
                              f"{'with' if result['digest'] else 'without'} digest), {os.cpu_count()} CPUs, median of "
                              f"{args.reps} fresh processes:")


def report(result: dict, as_json: bool, header: str, *after: str) -> None:
    """The timings: as JSON, or the header, a line per command and the lines ``after``."""
    if as_json:
        print(json.dumps(result, indent=1))
        return
    print(header)
    for what, r in result["commands"].items():
        print(timing_line(what, r))
    for line in after:
        print(line)


if __name__ == "__main__":
    main()
