"""How long `macprof verify` takes on a default run's log (issue #36 item 4: under 1 s on a
2-core machine). Speed is measured here, never in a unit test.

The log is tests/fixtures/runlogs/other-machine-demo-small.json by default (a default `macprof
run` of the six small demo models: cold, warm and prefix, 530 kB), or --log any other. It is
read and saved once by macprof (store/runlog.py save), so that it carries its content digest as a
run writes it today and verify checks all three things: the digest (sha256 of the canonical
form), the impossible figures and every summary rebuilt from the raw records.

Each timing is one fresh process (`python -m macprof verify LOG`), wall clock, the command line
a user runs; the median of --reps runs is reported with the min and max, and the machine's load
average before and after (other work on the machine slows a timing; the target is for a quiet one):

    python benchmarks/verify_speed.py [--reps 9] [--log LOG] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_logs import FIXTURE, ROOT, timings  # noqa: E402

TARGET_S = 1.0


def digested(source: Path, folder: Path) -> Path:
    """``source`` saved by macprof: the same log, with its digest."""
    sys.path.insert(0, str(ROOT))
    from macprof.store import runlog

    out = folder / source.name
    runlog.save(runlog.load(source), out)
    return out


def time_once(log: Path) -> float:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "macprof", "verify", str(log)], stdout=subprocess.PIPE, cwd=ROOT,
                          text=True)
    elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"verify did not pass on {log}:\n{done.stdout}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--log", type=Path, default=FIXTURE, help="the run log to verify [%(default)s]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = digested(args.log, Path(tmp))
        load_before = os.getloadavg()
        time_once(log)  # a first run, not counted: the page cache and .pyc files as a user has them
        runs = [time_once(log) for _ in range(args.reps)]
        load_after = os.getloadavg()
    result = {"log": str(args.log), "log_kb": round(args.log.stat().st_size / 1000), "reps": args.reps,
              "cpus": os.cpu_count(), **timings(runs, TARGET_S), "load_before": load_before, "load_after": load_after}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"macprof verify {args.log.name} ({result['log_kb']} kB, with its digest), {os.cpu_count()} CPUs, "
          f"median of {args.reps} fresh processes:")
    print(f"  {result['median_s']:.2f} s  (min {result['min_s']:.2f}, max {result['max_s']:.2f}, target < {TARGET_S:g} s); "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")


if __name__ == "__main__":
    main()
