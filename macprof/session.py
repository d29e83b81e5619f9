"""One measuring session from end to end, the pipeline in order: the orchestrator collects
and runs (journaling every event), the analysis builds the run log from the journal, the
store writes it atomically. The CLI calls this; no stage calls a later one.

SIGINT and SIGTERM are handled from the journal's creation until the log is saved
(macprof/run/signals.py): during the run the first one stops it and the log is written marked
incomplete; after the run's end is journaled, one is recorded and the save finished, and the
caller (the CLI) says what happened. Every run log and journal is created exclusively: a name
already taken is an error unless the user passes ``overwrite`` (--force-overwrite).
"""

from __future__ import annotations

import os
from pathlib import Path

from macprof.analyse.build import build
from macprof.collect.system import host_id, utc_now
from macprof.config import ModelSpec
from macprof.errors import MacprofError
from macprof.model.events import Request
from macprof.model.phase_events import QualityChunkScored
from macprof.model.tasks import TaskAttemptDone
from macprof.model.log import RunLog
import macprof.run.resume
from macprof.run.resume import SUFFIX
from macprof.run import signals
from macprof.run.journal import Journal
from macprof.run.orchestrator import Runner
from macprof.run.phases.api import Parents
from macprof.run.progress import Display
from macprof.store.runlog import read_journal, save


def journal_path(log_path: Path) -> Path:
    return log_path.with_suffix(SUFFIX)


def log_path_for(log_path: Path | None, resume: Path | None, runs_dir: Path = Path("runs")) -> Path:
    """The run log of `macprof run`: --log, the one beside the --resume journal, or a new name."""
    if resume is not None:
        if log_path is not None:
            raise MacprofError("--log and --resume together: a resumed run writes the log beside its journal")
        if not resume.name.endswith(SUFFIX):
            raise MacprofError(f"{resume}: not a journal (a journal's name ends in {SUFFIX}: "
                               f"the one beside the run log)")
        return resume.with_name(resume.name.removesuffix(SUFFIX) + ".json")
    path = log_path or default_log_path(runs_dir)
    if path.suffix != ".json":
        raise MacprofError(f"{path}: the run log must be a .json file")
    return path


def measure(models: tuple[ModelSpec, ...], log_path: Path, progress: Display | None,
            resume: bool = False, overwrite: bool = False) -> RunLog:
    """Run, build, save. ``resume``: continue the journal beside ``log_path`` (and replace its
    log). Ctrl-C before the journal holds anything raises KeyboardInterrupt, the empty journal
    removed; after that the run's log is written, incomplete if it was cut short."""
    with signals.guard():
        # each phase's parent side, once for the run: its checks stop a bad input here, in one
        # line, and what it reads (a task file) serves the resume's check and every worker
        parents = Parents(models, journal_path(log_path))
        journal = _open_journal(models, log_path, resume, overwrite, parents)
        try:
            events = Runner(models, journal, progress, parents=parents).run()
        except BaseException:
            if not resume and not journal.events:  # nothing measured: no journal to keep
                journal.path.unlink(missing_ok=True)
            raise
        signals.disarm()  # the run's end is journaled: from here on a signal waits for the save
        log = build(events)
        save(log, log_path, replace=overwrite or resume)
    return log


def _open_journal(models: tuple[ModelSpec, ...], log_path: Path, resume: bool, overwrite: bool,
                  parents: Parents) -> Journal:
    path = journal_path(log_path)
    if not resume:
        if log_path.exists() and not overwrite:
            raise MacprofError(f"{log_path}: a run log is already there: it is never overwritten; pass "
                               f"--force-overwrite to replace it, or choose another --log")
        return Journal.create(path, overwrite)
    journal = Journal.reopen(path)  # locked first: no other run appends while it is read
    try:
        events = read_journal(path)
        macprof.run.resume.check(path, events, models, parents)
    except BaseException:
        journal.close()
        raise
    journal.continue_with(events)
    return journal


def interrupted_note(log: RunLog, log_path: Path) -> str:
    """The one line a signal leaves on stderr: what was written, and where every event is."""
    journal = journal_path(log_path)
    if log.complete:
        return (f"macprof: interrupted after the run ended: the run log {log_path} is written and complete; "
                f"every event is in the journal {journal}")
    return (f"macprof: interrupted: the run log {log_path} is written, marked incomplete; every measurement is in "
            f"the journal {journal}: `macprof run --resume {journal}` with the same config and options measures the rest")


def measured_anything(log_path: Path) -> bool:
    """Whether the run of ``log_path`` measured at least one request (a warm-up is not a
    measurement), scored a quality chunk or ran a task's attempt, from its journal: every event is
    there, a resumed run's included."""
    # a request's status as journaled (a line must have it), not a record made of each event
    return any((isinstance(e, Request) and getattr(e, "status") == "ok" and e.kind != "warmup")
               or isinstance(e, QualityChunkScored) or (isinstance(e, TaskAttemptDone) and e.record().status == "ok")
               for e in read_journal(journal_path(log_path)))


def default_log_path(runs_dir: Path) -> Path:
    """runs/<UTC second>-<host id>-<random>.json: two runs started in the same second on one
    host get two names (and were they ever to draw the same, the journal's exclusive creation
    refuses the second)."""
    stamp = utc_now().removesuffix("+00:00").replace("-", "").replace(":", "") + "Z"  # 20261201T045301Z
    return runs_dir / f"{stamp}-{host_id()}-{os.urandom(3).hex()}.json"

