"""One worker process, watched from the parent: spawn it with its job, journal each event it
streams as it arrives, sample its RSS while a phase runs, enforce the load and request
deadlines, and turn a crash, a hang or a kill into one recorded failure.

RSS is sampled every RSS_PERIOD_S, only while a phase runs; the peak recorded for a phase is the
larger of those samples and the high-water mark the worker reads from its own OS at the phase's
end (run/worker.py), so a spike between two samples is not missed.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Callable

import psutil

from macprof.collect import footprint, lifeline
from macprof.config import ModelSpec, settings_from_dict
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.phases import Failure
from macprof.model.tasks import TaskCheckStart
from macprof.run import distributed
from macprof.run.job import WorkerJob, encode
from macprof.run.sampling import TelemetrySampler

RSS_PERIOD_S = 0.1
LOAD_TIMEOUT_S = 600.0  # loading and prompt building: generous, a 70 B model loads slowly
CHECK_GRACE_S = 30.0  # past a checker's own bound (the worker kills its checker then): the worker's time to record it


@dataclass
class WorkerResult:
    phases_done: list[str]
    failure: Failure | None = None  # what the failure journaled records
    loaded: bool = True  # False: the model never loaded, so another worker would fail the same way
    goes_on: bool = False  # the failed phase goes on after the request cut (run/phases/api.py Parent.cut)


@dataclass
class _State:
    """What the parent knows of the worker so far, updated event by event."""

    timeout: float
    phase: str | None = None
    request: ev.RequestStart | None = None
    # the request's reply is complete and its checker runs (check_start): the deadline is then the
    # checker's bound and its grace, not the request's --timeout
    checking: TaskCheckStart | None = None
    deadline: float = field(default_factory=lambda: time.monotonic() + LOAD_TIMEOUT_S)
    peak: int = 0
    samples: int = 0
    footprint_peak: int = 0  # macOS: the largest phys_footprint sampled in the phase
    footprint_samples: int = 0
    footprint_max_at_start: int | None = None
    done_phases: list[str] = field(default_factory=list)
    failure: tuple[str, str | None] | None = None  # (status, reason)
    finished: bool = False
    loaded: bool = False
    own_peak: bool = True  # the worker's own OS peak counts (not when the model is a server's)
    t_end: int | None = None  # perf_counter_ns when the watch ended: the worker's EOF, or its kill at the timeout
    items_ended: int = 0  # the items this worker recorded in the phase running (ENDS_ITEM events)

    def on_event(self, event: ev.Event) -> ev.Event:
        """Update the state; returns the event to journal (a phase's end with its RSS figures)."""
        if isinstance(event, ev.RequestStart):
            self.request, self.checking, self.deadline = event, None, time.monotonic() + self.timeout
        elif event.ENDS_ITEM:  # its request, an attempt's record or refusal, a request_end: it is recorded
            self.request, self.checking, self.deadline = None, None, time.monotonic() + LOAD_TIMEOUT_S
            self.items_ended += 1
        elif isinstance(event, TaskCheckStart):  # the attempt's timed part ended: its checker has its own bound
            self.checking, self.deadline = event, time.monotonic() + event.bound_s + CHECK_GRACE_S
        elif isinstance(event, ev.Loaded):
            self.loaded = True
        elif isinstance(event, ev.PhaseStart):
            self.phase, self.peak, self.samples, self.items_ended = event.phase, 0, 0, 0
            self.footprint_peak, self.footprint_samples, self.footprint_max_at_start = 0, 0, event.footprint_max_bytes
        elif isinstance(event, ev.PhaseEnd):
            own = event.os_peak_rss_bytes if event.os_peak_scope == "phase" and self.own_peak else None
            peak = max(self.peak, own or 0)
            event = event.replace(peak_rss_bytes=peak or None, rss_samples=self.samples)
            if event.has("footprint_bytes") and self.own_peak:
                event = event.replace(footprint_samples=self.footprint_samples, peak_footprint_bytes=footprint.phase_peak(
                    max(self.footprint_peak, event.footprint_bytes or 0), self.footprint_max_at_start,
                    event.footprint_max_bytes))
            elif event.has("footprint_bytes"):  # a server holds the model: its footprint is the parent's samples
                # alone, the worker's own figures are the client's
                event = event.replace(footprint_samples=self.footprint_samples, peak_footprint_bytes=self.footprint_peak or None)
            self.done_phases.append(event.phase)
            self.phase, self.request, self.checking, self.deadline = None, None, None, time.monotonic() + LOAD_TIMEOUT_S
        elif isinstance(event, ev.Done):
            self.finished = True
        elif isinstance(event, ev.Error):
            self.failure = ("error", event.message)
        return event

    def sample(self, ps: psutil.Process | None) -> None:
        if self.phase is not None and ps is not None:
            try:
                self.peak, self.samples = max(self.peak, ps.memory_info().rss), self.samples + 1
            except psutil.Error:
                pass
            now, _ = footprint.read(ps.pid)  # (None, None) off macOS
            if now is not None:
                self.footprint_peak, self.footprint_samples = max(self.footprint_peak, now), self.footprint_samples + 1

    def overdue(self) -> tuple[str, str] | None:
        """("timeout", why) once the deadline has passed, naming the limit it was: the request's
        --timeout, a checker's bound and grace, or the time allowed to load or between two items."""
        if time.monotonic() <= self.deadline:
            return None
        if self.checking is not None:
            c = self.checking
            return "timeout", (f"the checker of task {c.task!r} attempt {c.attempt} exceeded its bound ({c.bound_s:g} s) "
                               f"and the worker's grace ({CHECK_GRACE_S:g} s) to record it; worker killed")
        what, limit = (("request", self.timeout) if self.request else
                       ("loading" if not self.loaded else "the work between two items", LOAD_TIMEOUT_S))
        return "timeout", f"{what} exceeded the {limit:g} s timeout; worker killed"


def spawn(python: str, job: WorkerJob) -> tuple[subprocess.Popen, IO[bytes], int]:
    """The worker process with its job on stdin; its stderr goes to a temporary file (its tail
    is kept with a failure). Returns the process, that file and the spawn time (ns)."""
    stderr = tempfile.TemporaryFile()
    spec = settings_from_dict(job.settings).distributed
    cmd = [python, "-m", "macprof.run.worker"] if spec is None else distributed.command(python, spec)
    t_spawn = time.perf_counter_ns()
    # the worker ends with this process however this one ends, SIGKILL included (collect/lifeline.py):
    # it holds the line itself; mlx.launch, someone else's program, gets a watcher (it and its ranks)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                            **(lifeline.popen_args(env) if spec is None else {"env": env}))
    if spec is not None:
        lifeline.watch_group(proc.pid)  # ends by itself with the group
    assert proc.stdin is not None
    proc.stdin.write(encode(job) + b"\n")
    if spec is None:  # mlx.launch forwards its stdin to every rank and, at its end, spins: kept open (wait closes it)
        proc.stdin.close()
    else:
        proc.stdin.flush()
    return proc, stderr, t_spawn


def watch(proc: subprocess.Popen, timeout: float, journal: Callable[[ev.Event], None],
          on_request: Callable[[ev.Request], None], kill: Callable[[], None],
          telemetry: TelemetrySampler | None = None, rss_pid: int | None = None) -> _State:
    """Pump the worker's events into ``journal`` until it is done, dies or overruns a deadline;
    ``telemetry`` samples beside the RSS and journals a phase's samples after its phase_end.
    ``rss_pid``: whose RSS the phases' peaks are (a server macprof started, not the client
    worker; -1: no process of ours holds the model, so no peak)."""
    state = _State(timeout=timeout, own_peak=rss_pid is None)
    ps = _ps(proc.pid if rss_pid is None else rss_pid) if rss_pid != -1 else None
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines = Lines()
    try:
        while not state.finished:
            if sel.select(timeout=RSS_PERIOD_S):
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    state.t_end = time.perf_counter_ns()
                    break  # EOF: the worker ended (or died)
                for line in lines.feed(chunk):
                    event = _parse_event(line)
                    if event is not None:
                        journal(state.on_event(event))
                        if isinstance(event, ev.Request):
                            on_request(event)
                        elif telemetry is not None:
                            _telemetry_event(telemetry, event, journal)
            state.sample(ps)
            if telemetry is not None:
                telemetry.tick()
            state.failure = state.overdue() or state.failure
            if state.failure and state.failure[0] == "timeout":
                state.t_end = time.perf_counter_ns()
                kill()
                break
        if telemetry is not None and telemetry.start is not None:  # died mid-phase: keep what was sampled
            journal(telemetry.phase_end(ev.PhaseEnd(phase=telemetry.start.phase)))
    finally:
        sel.close()
    return state


def _telemetry_event(telemetry: TelemetrySampler, event: ev.Event, journal: Callable[[ev.Event], None]) -> None:
    if isinstance(event, ev.PhaseStart):
        telemetry.phase_start(event)
    elif isinstance(event, ev.PhaseEnd):
        journal(telemetry.phase_end(event))


def failure_record(model: ModelSpec, worker_id: str, state: _State, rc: int | None, stderr: IO[bytes]) -> ev.Failure | None:
    failure = state.failure or (None if state.finished else ("crashed", _exit_reason(rc)))
    if failure is None:
        return None
    spec = model.settings.distributed
    if spec is not None and failure[0] == "crashed":  # mlx.launch exits 0 whatever its ranks did: name the rank
        failure = (failure[0], distributed.rank_reason(_tail(stderr), len(spec.hosts)) or failure[1])
    request = state.request
    return ev.Failure.of(Failure(
        status=failure[0], reason=failure[1],
        # a worker that died before the model loaded failed the load, not a phase
        phase=(request.phase if request else None) or state.phase if state.loaded else None,
        index=request.index if request else None, kind=request.kind if request else None,
        case=request.case if request else None, mode=request.mode if request else None, exit_code=rc,
        signal=signal.Signals(-rc).name if rc is not None and rc < 0 else None, stderr_tail=_tail(stderr)),
        model=model.name, worker=worker_id)


def _ps(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


MAX_EVENT_LINE = 16 << 20  # bytes; a request of 32k tokens with its stamps is about 1 MB


class Lines:
    """A worker's stdout cut into lines in time linear in its length (``buf += chunk`` and a
    search from the start each time made one 100 MB line quadratic), each at most
    MAX_EVENT_LINE bytes: a longer one is passed over whole, counted in ``dropped``, as a
    malformed line is, and the lines after it are read as usual."""

    def __init__(self, limit: int = MAX_EVENT_LINE) -> None:
        self.limit, self.dropped = limit, 0
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False

    def feed(self, chunk: bytes) -> list[bytes]:
        out = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if not self._skipping and self._size + len(piece) <= self.limit:
                out.append(b"".join(self._parts) + piece)
            else:
                self.dropped += 1
            self._parts, self._size, self._skipping = [], 0, False
            start = end + 1
        rest = chunk[start:]
        if rest and not self._skipping:
            if self._size + len(rest) > self.limit:
                self._parts, self._size, self._skipping = [], 0, True
            else:
                self._parts.append(rest)
                self._size += len(rest)
        return out


def _parse_event(line: bytes) -> ev.Event | None:
    """A worker's line as an event; a line that is not JSON (a library that wrote to fd 1 before
    the worker redirected it) is passed over, as a journal reader would. An event its record's
    types refuse is macprof's own bug: passed over too (the run goes on), but said on stderr,
    never dropped in silence."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    try:
        return ev.parse_event(data, "worker")
    except MacprofError as exc:
        print(f"macprof: a worker's event was refused, not journaled: {exc}", file=sys.stderr)
        return None


def wait(proc: subprocess.Popen) -> int | None:
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def _exit_reason(rc: int | None) -> str:
    if rc is None:
        return "worker did not exit"
    if rc < 0:
        name = signal.Signals(-rc).name
        if name == "SIGKILL":
            return "worker killed by SIGKILL (the out-of-memory killer does this)"
        return f"worker died from {name}"
    return f"worker exited with code {rc} before finishing"


def _tail(fh: IO[bytes], limit: int = 2000) -> str:
    try:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
