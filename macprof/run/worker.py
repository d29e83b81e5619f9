"""One engine + one model in its own process; streams JSON lines to the parent.

Run as ``python -m macprof.run.worker``: reads one JSON job from stdin, writes one JSON event per
line to the original stdout. Everything the engines print goes to stderr (fd 1 is pointed
at fd 2), so no library can corrupt the event stream. A crash, a hang or an OOM kill of
this process costs only the request in flight: the parent has every earlier event.
"""

import time

T_MAIN = time.perf_counter_ns()  # first statement: interpreter start-up ends here

import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, Callable  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

if TYPE_CHECKING:
    from macprof.run.job import WorkerJob


def _rss() -> int | None:
    """This process's resident set, as psutil's memory_info().rss reads it. On Linux from
    /proc/self/statm directly (psutil's own source): importing psutil took 20 ms of each worker's
    start-up, and the first reading is taken before anything else is imported."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/statm", "rb") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:  # noqa: BLE001
        return None


def _mac(phase_boundary: bool = True) -> dict:
    """macOS: the worker's physical footprint (GPU buffers included, which RSS misses) and, at a
    phase boundary, the thermal state; nothing elsewhere, so other logs keep their layout."""
    if sys.platform != "darwin":
        return {}
    from macprof.collect import footprint, macos

    now, peak = footprint.read(os.getpid())
    if not phase_boundary:
        return {"footprint_bytes": now}
    state, source = macos.thermal_state()
    # NSProcessInfo's state only: pmset's Intel fallback is another figure (a CPU speed limit)
    return {"footprint_bytes": now, "footprint_max_bytes": peak,
            "thermal_state": state if source == macos.NS_THERMAL_SOURCE else None}


def _weights(engine, path: str) -> dict:
    """How the engine holds its weights and, mapped, how many bytes of the model's files are
    resident now (mincore: those clean file-backed pages are what macOS's footprint leaves out,
    analyse/headline.py); nothing where another process holds them (a server)."""
    held = engine.weights_held
    if held is None:
        return {}
    if held != "mapped":
        return {"weights_held": held}
    from pathlib import Path

    from macprof.collect import residency
    from macprof.files import filekind
    from macprof.errors import MacprofError

    try:
        resident: int | None = sum(residency.file_residency(f)[0] for f in filekind.model_files(Path(path)))
    except (OSError, MacprofError):
        resident = None  # the file went away or cannot be mapped: unknown, never 0
    return {"weights_held": held, "mapped_resident_bytes": resident}


def _silent(event) -> None:
    """A rank other than 0: its events stay home (run/rank.py gathers its stamps)."""


class Stream:
    def __init__(self) -> None:
        fd = os.dup(1)
        os.dup2(2, 1)  # library prints go to stderr
        sys.stdout = sys.stderr
        self.out = os.fdopen(fd, "w", buffering=1)
        from macprof.model.records import json_line  # imported once the worker runs, as the rest of macprof

        self.line = json_line

    def __call__(self, event) -> None:  # a macprof.model.events.Event
        self.out.write(self.line(event))
        self.out.flush()


def run(job: "WorkerJob", emit) -> None:
    rss = _rss()  # before any of macprof is imported
    from macprof.model import events as ev

    emit(ev.Started(pid=os.getpid(), t_main=T_MAIN, rss_bytes=rss))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    fault = os.environ.get("MACPROF_TEST_FAULT")
    if fault:  # test hook: an engine that crashes, hangs or is OOM-killed mid-phase
        emit = _with_fault(emit, json.loads(fault), job.name)

    from macprof import engines
    from macprof.config import settings_from_dict
    from macprof.engines.base import EngineSettings
    from macprof.errors import MacprofError

    settings = settings_from_dict(job.settings)
    group = None
    if settings.distributed is not None:  # one rank of a sharded model (run/rank.py)
        from macprof.run import rank

        group = rank.open_group(settings.distributed.to_dict())
        emit = group.keep(emit)
    # macprof's own start-up ends here: the engine's import is timed from this stamp, so a cold
    # start's import_s is the engine's alone (nothing imported above is shared with an engine:
    # numpy, which llama.cpp and MLX import, is not)
    t_import_start = time.perf_counter_ns()
    engine = engines.create(job.engine) if group is None else rank.sharded(job.engine, group)
    t_imported = time.perf_counter_ns()
    try:
        engine.load_model(Path(job.path), EngineSettings(n_ctx=job.n_ctx, threads=settings.threads,
                                                         kv_type=settings.kv_type, endpoint=job.endpoint))
    except MacprofError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the engine raises, say which file
        raise MacprofError(f"{job.path}: {job.engine} could not load the model: {type(exc).__name__}: {exc}") from None
    t_model = time.perf_counter_ns()
    engine.load_tokenizer()
    t_tokenizer = time.perf_counter_ns()
    emit(ev.Loaded(t_import_start=t_import_start, t_imported=t_imported, t_model=t_model, t_tokenizer=t_tokenizer, rss_bytes=_rss(),
                   engine_memory=engine.memory(), versions=engine.versions(), vocab_size=engine.vocab_size,
                   tokenizer_separate=engine.separate_tokenizer, engine_settings=engine.resolved_settings(),
                   **_mac(False)))

    if group is not None:
        rank.group_event(group, emit)
    builder = _phases(job, engine, settings, emit, group.phase_end if group is not None else None)
    if group is not None:
        rank.finish(group, engine, builder, settings, emit)
    engine.close()


def _phases(job: "WorkerJob", engine, settings, emit, after=None):
    """The job's phases in turn, each between a phase_start and a phase_end event; ``after``
    (a distributed rank's) runs after each phase_end. Returns the prompt builder."""
    from macprof.collect import peak
    from macprof.model import events as ev
    from macprof.phases import REGISTRY
    from macprof.run.phases import PHASES, PhaseContext, prepared_of
    from macprof.run.phases.common import done_cached, done_requests
    from macprof.run.prompts import PromptBuilder

    builder = PromptBuilder(engine)  # its default seed: every phase, model and run the same prompts
    for phase in job.phases:
        # with power readable, the parent measures the idle baseline while this worker waits,
        # model loaded and nothing running; the wait's start bounds the baseline's window. Not
        # before a trial's requests (a cold start): a wait there would change what it measures.
        idle_s = job.idle_baseline_s if REGISTRY[phase].idle_baseline else 0.0
        t_idle = time.perf_counter_ns()
        if idle_s > 0:
            time.sleep(idle_s)
        emit(ev.PhaseStart(phase=phase, rss_bytes=_rss(), t=time.perf_counter_ns(),
                           t_idle_start=t_idle if idle_s > 0 else None, **_mac()))
        was_reset = peak.reset()
        PHASES[phase](PhaseContext(engine, builder, settings, emit, cases=job.cases.get(phase, []),
                                   trial=job.trial, done=done_requests(job.done), done_cached=done_cached(job.done),
                                   n_ctx=job.n_ctx, prepared=prepared_of(job, phase)))
        os_peak, scope = peak.read(was_reset)
        emit(ev.PhaseEnd(phase=phase, rss_bytes=_rss(), os_peak_rss_bytes=os_peak, os_peak_scope=scope,
                         t=time.perf_counter_ns(), **_mac(), **_weights(engine, job.path)))
        if after is not None:
            after(phase, emit)
    return builder


def _with_fault(emit, fault: dict, model: str):
    """MACPROF_TEST_FAULT='{"model": NAME, "kind": "segfault|hang|oom", "after_requests": N, "rank": R,
    "phase": P, "case": C, "at": EVENT}': the fault strikes when request N+1 of that model's worker
    starts (in phase P when given, at a request of case C when given: a task's id in the tasks
    phase; on rank R of a distributed model, 0 by default); with "at", just after the worker
    emitted an event of that kind instead (a task_attempt: between two attempts)."""
    if fault.get("model") not in (None, model) or fault.get("rank", 0) != int(os.environ.get("MLX_RANK", "0")):
        return emit
    import signal

    from macprof.phases import REGISTRY

    done = 0
    # a phase whose unit of progress is no request (its registry line's progress_event) is struck
    # at its N+1th such event instead
    unit = REGISTRY[fault["phase"]].progress_event if fault.get("phase") in REGISTRY else "request"

    def wrapped(event) -> None:
        nonlocal done
        emit(event)
        if event.KIND == "request":
            done += 1
        elif event.KIND == unit:
            done += 1
            if done > fault.get("after_requests", 0):
                if fault["kind"] == "hang":
                    time.sleep(3600)
                os.kill(os.getpid(), signal.SIGKILL)
        elif (event.KIND == fault.get("at", "request_start") and done >= fault.get("after_requests", 0)
              and fault.get("phase") in (None, getattr(event, "phase", None))
              and fault.get("case") in (None, getattr(event, "case", getattr(event, "task", None)))):
            if fault["kind"] == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif fault["kind"] == "oom":  # what the OOM killer does
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault["kind"] == "hang":
                time.sleep(3600)

    return wrapped


def main() -> None:
    from macprof.collect import lifeline
    from macprof.run.job import decode

    lifeline.hold()  # the parent's death, a SIGKILL included, ends this worker (collect/lifeline.py)
    emit: Callable[[Any], None] = Stream()
    job = decode(sys.stdin.buffer.readline())
    if job.settings.get("distributed") and os.environ.get("MLX_RANK", "0") != "0":
        emit = _silent  # mlx.launch merges every rank's stdout: only rank 0 streams events
    try:
        run(job, emit)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which records it
        from macprof.errors import MacprofError
        from macprof.model import events as ev

        message = str(exc) if isinstance(exc, MacprofError) else f"{type(exc).__name__}: {exc}"
        emit(ev.Error(message=message))
        if emit is _silent:
            print(f"rank {os.environ.get('MLX_RANK')}: {message}", file=sys.stderr, flush=True)
        sys.exit(3)
    from macprof.model import events as ev

    emit(ev.Done())


if __name__ == "__main__":
    main()
