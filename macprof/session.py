"""One measuring session from end to end, the pipeline in order: the orchestrator collects
and runs (journaling every event), the analysis builds the run log from the journal, the
store writes it atomically. The CLI calls this; no stage calls a later one."""

from __future__ import annotations

from pathlib import Path

from macprof.analyse.build import build
from macprof.collect.system import host_id, utc_now
from macprof.config import ModelSpec
from macprof.model.events import Event, Request
from macprof.model.log import RunLog
from macprof.run.orchestrator import Runner
from macprof.run.progress import Display
from macprof.store.runlog import read_journal, save


def journal_path(log_path: Path) -> Path:
    return log_path.with_suffix(".journal.jsonl")


def measure(models: tuple[ModelSpec, ...], log_path: Path, progress: Display | None,
            resume_events: list[Event] | None = None) -> RunLog:
    events = Runner(models, journal_path(log_path), progress).run(resume_events)
    log = build(events)
    save(log, log_path)
    return log


def measured_anything(log_path: Path) -> bool:
    """Whether the run of ``log_path`` measured at least one request (a warm-up is not a
    measurement), from its journal: every event is there, a resumed run's included."""
    return any(isinstance(e, Request) and e.status == "ok" and e.kind != "warmup"
               for e in read_journal(journal_path(log_path)))


def default_log_path(runs_dir: Path) -> Path:
    stamp = utc_now().removesuffix("+00:00").replace("-", "").replace(":", "") + "Z"  # 20261201T045301Z
    return runs_dir / f"{stamp}-{host_id()}.json"
