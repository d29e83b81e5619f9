"""What the run-log records cost (issue #22, item 2): the data model's import, a log decoded
into records and encoded back, a journal parsed into events.

    python benchmarks/records.py [--repeat N]

Inputs are the test fixtures: tests/fixtures/runlogs/other-machine-demo-small.json (a 530 kB
default run on another machine) and a journal of incomplete.journal.jsonl's lines repeated to
about the same size (each copy renumbered). Each figure is the median of N timed calls after one
untimed call (and the minimum, the least disturbed on a shared machine); the import is the
same over N fresh interpreters. Run it against two trees (say
with PYTHONPATH=<tree>) to compare a change: it uses only RunLog.from_json / to_json and
store.runlog.read_journal, which every version has.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNLOGS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "runlogs"
LOG = RUNLOGS / "other-machine-demo-small.json"
JOURNAL = RUNLOGS / "incomplete.journal.jsonl"


def _median_ms(fn, repeat: int) -> tuple[float, float]:
    """(median, min) in ms: on a shared machine the minimum is the figure least disturbed."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, min(times) * 1e3


def _import_ms(repeat: int) -> tuple[float, float]:
    code = ("import time; t = time.perf_counter(); import macprof.model.log, macprof.model.events; "
            "print(time.perf_counter() - t)")
    out = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
           for _ in range(repeat)]
    return statistics.median(out) * 1e3, min(out) * 1e3


def _big_journal(folder: Path, copies: int = 25) -> Path:
    lines = [json.loads(line) for line in JOURNAL.read_text().splitlines() if line.strip()]
    out = []
    for copy in range(copies):
        for i, d in enumerate(lines):
            out.append(json.dumps({**d, "seq": copy * len(lines) + i}, separators=(",", ":")))
    path = folder / "big.journal.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    from macprof.model.log import RunLog
    from macprof.store import runlog

    data = runlog.migrate(json.loads(LOG.read_text()))
    log = RunLog.from_json(data)
    assert log.to_json() == data, "the log does not re-encode to the same JSON"
    with tempfile.TemporaryDirectory() as tmp:
        journal = _big_journal(Path(tmp))
        size = journal.stat().st_size
        events = len(runlog.read_journal(journal))
        parse = _median_ms(lambda: runlog.read_journal(journal), args.repeat)
    rows = [
        ("import macprof.model.log, .events (fresh interpreter)", _import_ms(args.repeat)),
        (f"RunLog.from_json, {LOG.name} ({LOG.stat().st_size / 1e3:.0f} kB)", _median_ms(lambda: RunLog.from_json(data),
                                                                                        args.repeat)),
        ("RunLog.to_json, the same log", _median_ms(log.to_json, args.repeat)),
        (f"read_journal, {events} events ({size / 1e3:.0f} kB)", parse),
    ]
    print(f"python {sys.version.split()[0]}, median and min of {args.repeat}")
    for what, (median, least) in rows:
        print(f"{median:9.2f} ms (min {least:7.2f})  {what}")


if __name__ == "__main__":
    main()
