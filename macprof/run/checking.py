"""A task's checker, run after the attempt's timed window, under its own bound (the tasks phase).

The checkers (run/checkers.py) are pure functions of a reply the model wrote and a spec the
task file gave: either can make one slow (a regex such as ``(a+)+$`` on a long reply backtracks
for ever, and Python's ``re`` cannot be interrupted), deep (a reply nested 1,000 deep is a
RecursionError in jsonschema) or raise. So they run in a child process of the worker's, started
once per phase: each check is one JSON line there and one back, bounded by ``bound_s`` in time
and CHECK_MEMORY_BYTES in memory (the worker watches the child's RSS); past either, or when the
child raises or dies, the check is the attempt's failure to be judged, with the reason, and the
child is started again for the next. The attempt is never cut for it: the worker tells the
parent the timed part ended (``check_start``) and the parent then waits the checker's bound.

What a check cost is recorded apart (the attempt's ``check_ns``): it is in neither the attempt's
wall time nor the time per correct answer.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from macprof.errors import reason
from macprof.run import checkers

CHECK_BOUND_S = 10.0  # at most; --timeout where that is less (the attempt's own bound is the check's too)
CHECK_MEMORY_BYTES = 1 << 30
_POLL_S = 0.05


def bound_of(timeout: float) -> float:
    """The bound of one check: CHECK_BOUND_S, or --timeout where that is less."""
    return min(CHECK_BOUND_S, timeout)


@dataclass(frozen=True)
class Judged:
    """A check's outcome: the verdict, or None and why it could not be had; its own time (ns)."""

    verdict: checkers.Verdict | None
    ns: int
    error: str | None = None

    @property
    def as_verdict(self) -> checkers.Verdict:
        """What the attempt records: the verdict, or "not right" saying why it could not judge."""
        if self.verdict is not None:
            return self.verdict
        return checkers.Verdict(False, f"the checker could not judge the reply ({self.error})")


class Judge:
    """The checker's child process, for the phase's life (a context manager)."""

    def __init__(self, bound_s: float, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.bound_s, self.clock = bound_s, clock
        self._proc: subprocess.Popen | None = None
        self._buf = b""
        self._over_memory = False

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for fh in (proc.stdin, proc.stdout):
                if fh is not None:
                    fh.close()

    def _start(self) -> subprocess.Popen:
        # its own interpreter: a fork of a worker holding a model (Metal, threads) is not safe
        # the checks go on its stdin, as JSON: nothing of a task or a reply reaches its command line
        proc = subprocess.Popen([sys.executable, "-m", "macprof.run.checking"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._proc, self._buf = proc, b""
        ready = self._line(proc, 60.0, watch_memory=False)  # its checkers imported: not in the first check's time
        if ready is None:
            self.close()
            raise RuntimeError("the checker's process did not start")
        return proc

    def check(self, spec: dict, reply: str, tools: list[dict] | None = None, fmt: str = "json") -> Judged:
        """The verdict of ``spec`` on ``reply``, bounded; never raises for what the check does."""
        try:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        except (OSError, RuntimeError) as exc:
            return Judged(None, 0, f"its process could not start: {exc}")
        t0 = self.clock()
        assert proc.stdin is not None
        why: str | None = None
        try:
            proc.stdin.write(json.dumps({"spec": spec, "reply": reply, "tools": tools, "fmt": fmt}).encode() + b"\n")
            proc.stdin.flush()
            line = self._line(proc, self.bound_s)
        except OSError as exc:
            line, why = None, f"its process could not be reached: {exc.strerror or exc}"
        ns = self.clock() - t0
        if line is None:
            why = why or self._why_not(proc)
            self.close()  # a check past its bound, or a dead child: the next check gets a new one
            return Judged(None, ns, why)
        out = json.loads(line)
        if "error" in out:
            return Judged(None, ns, out["error"])
        tool = checkers.ToolValidity(*out["tool"]) if out.get("tool") else None
        return Judged(checkers.Verdict(out["correct"], out["message"], tool), ns)

    def _why_not(self, proc: subprocess.Popen) -> str:
        if self._over_memory:
            return f"it held more than {CHECK_MEMORY_BYTES >> 20} MiB"
        rc = proc.poll()
        if rc is not None:
            return f"its process died ({'signal ' + str(-rc) if rc < 0 else 'exit code ' + str(rc)})"
        return f"it ran past its bound of {self.bound_s:g} s"

    def _line(self, proc: subprocess.Popen, bound_s: float, watch_memory: bool = True) -> bytes | None:
        """The child's next line, or None past ``bound_s``, past CHECK_MEMORY_BYTES, or at its EOF."""
        import psutil

        assert proc.stdout is not None
        self._over_memory = False
        deadline = time.monotonic() + bound_s
        fd = proc.stdout.fileno()
        try:
            ps: psutil.Process | None = psutil.Process(proc.pid) if watch_memory else None
        except psutil.Error:
            ps = None
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if sel.select(min(left, _POLL_S)):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        return None
                    self._buf += chunk
                elif ps is not None:
                    try:
                        if ps.memory_info().rss > CHECK_MEMORY_BYTES:
                            self._over_memory = True
                            return None
                    except psutil.Error:
                        pass
        line, _, self._buf = self._buf.partition(b"\n")
        return line


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    try:
        verdict = checkers.check(request["spec"], request["reply"], request.get("tools"), request.get("fmt") or "json")
    except checkers.Unjudgeable as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - what the checker raised is the check's failure, with its reason
        return {"error": f"it raised {reason(exc)[:300]}"}
    tool = verdict.tool
    return {"correct": verdict.correct, "message": verdict.message,
            "tool": [tool.parses, tool.right_function, tool.arguments_valid] if tool else None}


def main() -> None:
    """The child: one request a line on stdin, one answer a line on stdout."""
    import jsonschema  # noqa: F401 - imported before "ready": not in the first check's time

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        answer = _answer(json.loads(line))
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
