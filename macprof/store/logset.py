"""The run logs a command names (`compare`, `plot`): files, and folders of them.

A file named on the command line must be a run log: anything else is the usual one-line error.
A folder is what a user keeps beside their logs (the bandwidth cache, an empty file, notes):
a file there that does not claim to be a run log is passed over and named. A run is counted
once: `macprof share` writes its copy beside the original, and two rows of one run would
compare a run with itself (and weigh it twice).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from macprof.errors import MacprofError
from macprof.model.log import RunLog
from macprof.store import runlog


@dataclass(eq=False)  # an entry is itself: two copies of one file are two entries
class _Entry:
    path: Path
    log: RunLog
    named: bool  # named on the command line, not found in a folder
    run: tuple | None  # which run it records (None: cannot tell, never merged)
    shared: bool  # a copy written by `macprof share`
    raw: dict | None = None  # its JSON as read (a journal: none), for its digest


def load_logs(paths: list[Path], unverified: list[str] | None = None) -> tuple[list[tuple[str, RunLog]], list[str]]:
    """(name, log) per run, in the order given, and what was passed over, each as 'FILE (why)'.
    Each file is read and its JSON parsed once: what says whether it claims to be a run log and
    which run it records is what the log is made from (runlog.parse). ``unverified``, where
    given, gets a warning line for each log kept that does not verify (store/verify.py)."""
    entries: list[_Entry] = []
    skipped: list[str] = []
    for f, named in log_files(paths):
        found = read_log(f, named)
        if isinstance(found, str):
            skipped.append(f"{f} ({found})")
        else:
            entries.append(_Entry(f, found[0], named, run_key(found[1]), is_shared(found[1]), found[1]))
    kept = _once_per_run(entries, skipped)
    if not kept:
        where = ", ".join(map(str, paths))
        raise MacprofError(f"no run logs found in {where}" + (f" (passed over: {'; '.join(skipped)})" if skipped else ""))
    if unverified is not None:
        from macprof.store.verify import warning

        unverified += [w for e in kept if e.raw is not None and (w := warning(str(e.path), e.log, e.raw))]
    return [(e.path.name.removesuffix(".json"), e.log) for e in kept], skipped


def log_files(paths: list[Path]) -> Iterator[tuple[Path, bool]]:
    """(file, named on the command line) for each path given and each run log's candidate in a
    folder given (its *.json files, sorted, hidden ones left out), in that order."""
    for p in map(Path, paths):
        if not p.is_dir():
            yield p, True
            continue
        for f in sorted(f for f in p.glob("*.json") if not f.name.startswith(".")):
            yield f, False


def read_log(path: Path, named: bool) -> tuple[RunLog, dict | None] | str:
    """The log in ``path`` and its JSON (None for a journal, which has no JSON of its own to say
    which run it is), read and parsed once; or, for a file found in a folder that does not claim
    to be a run log, why it is passed over. A file that claims to be one but is broken, or a
    file named on the command line that is none, is runlog's one-line error."""
    if named and path.name.endswith(".jsonl"):
        return runlog.load(path), None
    text, raw, why = _claimed_log(path)
    if why:
        if named:  # not a run log: runlog.load says why (it cannot read it, not JSON, no schema_version)
            return runlog.load(path), None
        return why
    return runlog.parse(str(path), text, raw), raw


def is_shared(raw: dict | None) -> bool:
    """Whether this is a copy written by `macprof share`."""
    return bool(raw and raw.get("redacted"))


NOT_JSON = "not JSON"  # why a file is passed over: it does not parse (a log cut short, or no log at all)


def _claimed_log(path: Path) -> tuple[str, dict | None, str | None]:
    """The file's text, and its JSON when it claims to be a run log (an object with a
    schema_version), else why it is not one."""
    from macprof.files.filekind import read_regular

    try:
        text = read_regular(path, runlog.MAX_LOG_BYTES, "a run log").decode("utf-8")
    except (OSError, UnicodeDecodeError, MacprofError) as exc:
        return "", None, f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    if not text.strip():
        return text, None, "empty file"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text, None, NOT_JSON
    if not isinstance(data, dict) or "schema_version" not in data:
        return text, None, "not a macprof run log"
    return text, data, None


def run_key(raw: dict | None) -> tuple | None:
    """What one run's log and its shared copy have in common: when it ran, on what machine
    (the facts `share` keeps) and which model files (engine, bytes and sha256 survive `share`;
    a model's name may not)."""
    if not isinstance(raw, dict) or not raw.get("started_utc"):
        return None
    machine = raw.get("machine")
    mach = machine if isinstance(machine, dict) else {}
    models = []
    for m in raw.get("models") or []:
        ident = (m or {}).get("identity") or {}
        files = tuple(sorted(str(f.get("sha256")) for f in ident.get("files") or [] if isinstance(f, dict)))
        models.append((ident.get("engine"), ident.get("total_bytes"), files))
    return (raw.get("started_utc"), raw.get("ended_utc"), mach.get("cpu_model"), mach.get("chip"),
            mach.get("memory_bytes"), tuple(models))


def _once_per_run(entries: list[_Entry], skipped: list[str]) -> list[_Entry]:
    """One entry per run, where the run's first file was: every file named on the command line
    (the user asked for each), else the original over a shared copy, else the first found."""
    groups: dict[object, list[_Entry]] = {}
    for i, e in enumerate(entries):
        groups.setdefault(e.run if e.run is not None else ("file", i), []).append(e)
    kept = []
    for group in groups.values():
        keep = [e for e in group if e.named] or [min(group, key=lambda e: e.shared)]
        for e in group:
            if e not in keep:
                skipped.append(f"{e.path} (the same run as {keep[0].path}"
                               + (", a copy written by macprof share)" if e.shared else ")"))
        kept += keep
    return kept
