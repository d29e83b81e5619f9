"""How long `macprof collect` and `macprof board` take at a leaderboard's size (issue #36, item 4).
The targets, on a 2-core machine: 500 default-run logs collected into a new results database in
under 20 s, and the board page of those 500 written from the database in under 3 s. Speed is
measured here, never in a unit test.

The logs are benchmarks/many_logs.py's: copies of one real default run (by default
tests/fixtures/runlogs/other-machine-demo-small.json, six models), each made its own run (its own
start time, its warm decode stretched by a seeded factor and its figures recomputed from the
stamps, saved with its digest), so every copy verifies as a log `run` wrote would, and collect
does all its work on each: parse, verify in full (every figure rebuilt from the raw records),
write its rows.

Each timing is one fresh process (`python -m macprof collect|board`), wall clock, the command line
a user runs: collect into a new database each time (a database that has the runs already would
only skip them), board from the database the last collect wrote; and, with no target, board from
the 500 files themselves (`board-logs`: collected into memory first, so collect's time and
more). A first run of each is not
counted (the page cache and .pyc files as a user has them); the median of --reps is reported,
with the min and max, the machine's load average before and after (other jobs share it), and
the page's size:

    python benchmarks/results_db.py [--logs 500] [--reps 3] [--dir DIR] [--only collect|board|board-logs] [--json]
    python benchmarks/results_db.py --profile collect   # where the time goes (cProfile, top 25)

Writing 500 copies takes about a minute; --dir keeps them, and reuses them when it holds them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_logs import FIXTURE, ROOT, profile, report, time_once, timings, write_logs  # noqa: E402

TARGETS = {"collect": 20.0, "board": 3.0}  # seconds, for 500 logs on a 2-core machine
# also timed, with no target: the board made from the log files themselves (collected in memory first)
COMMANDS = ("collect", "board", "board-logs")
LOGS = 500


def copies(source: Path, folder: Path, n: int) -> list[Path]:
    """n runs in ``folder``: the ones there where it holds exactly those, else written anew."""
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted(folder.glob("run-*.json"))
    if [p.name for p in found] == [f"run-{i:03d}.json" for i in range(n)]:
        return found
    for p in found:
        p.unlink()
    return write_logs(source, folder, n)


def command(what: str, folder: Path, db: Path, page: Path) -> list[str]:
    if what == "collect":
        return [sys.executable, "-m", "macprof", "collect", str(folder), "--db", str(db)]
    return [sys.executable, "-m", "macprof", "board", str(db if what == "board" else folder), "-o", str(page)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", type=int, default=LOGS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--log", type=Path, default=FIXTURE, help="the real run log to copy [%(default)s]")
    ap.add_argument("--only", choices=COMMANDS)
    ap.add_argument("--dir", type=Path, help="keep the logs here (and reuse them) instead of a temporary folder")
    ap.add_argument("--profile", choices=COMMANDS, help="profile one run of this command instead of timing")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = args.dir or work / "logs"
        paths = copies(args.log, folder, args.logs)
        db, page = work / "results.sqlite", work / "board.html"
        fresh = lambda: db.unlink(missing_ok=True)  # noqa: E731 - collect into a new database each time
        if args.profile:
            if args.profile == "board":
                subprocess.run(command("collect", folder, db, page), check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            else:
                fresh()
            profile(command(args.profile, folder, db, page), args.top)
            return
        result = {"logs": args.logs, "log_kb": round(statistics.mean(p.stat().st_size for p in paths) / 1000),
                  "source": str(args.log), "reps": args.reps, "cpus": os.cpu_count(),
                  "load_before": [round(x, 2) for x in os.getloadavg()], "commands": {}}
        for what in [args.only] if args.only else COMMANDS:
            if what == "board" and not db.exists():  # its database, written once, not timed
                subprocess.run(command("collect", folder, db, page), check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            runs = []
            for rep in range(args.reps + 1):  # the first not counted
                if what == "collect":
                    fresh()
                took = time_once(command(what, folder, db, page))
                if rep:
                    runs.append(took)
            result["commands"][what] = timings(runs, TARGETS.get(what) if args.logs == LOGS else None)
        result["load_after"] = [round(x, 2) for x in os.getloadavg()]
        result["db_mb"] = round(db.stat().st_size / 1e6, 1) if db.exists() else None
        result["page_mb"] = round(page.stat().st_size / 1e6, 1) if page.exists() else None
    report(result, args.json, f"{args.logs} logs of {result['log_kb']} kB ({args.log.name}), {os.cpu_count()} CPUs, "
                              f"median of {args.reps} fresh processes; load average {result['load_before']} before, "
                              f"{result['load_after']} after:", f"  database {result['db_mb']} MB, page {result['page_mb']} MB")


if __name__ == "__main__":
    main()
