"""Run logs on disk: atomic save, load (a log or a journal), schema validation, migration."""

from __future__ import annotations

import errno
import functools
import json
import os
import tempfile
from pathlib import Path

from macprof.analyse.build import build
from macprof.collect.filekind import not_a_folder
from macprof.errors import MacprofError
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.events import Event, parse_event
from macprof.model.log import RunLog
from macprof.model.records import MAX_DEPTH, json_refusal


# -- files ---------------------------------------------------------------------------------
def save(log: RunLog, path: Path, replace: bool = True) -> None:
    """Atomic: a temp file in the same folder, fsynced, then renamed over the target. With
    ``replace=False`` a file already at ``path`` is never replaced: the temp file is hard-linked
    to the name, which fails if anything took it meanwhile (another run, the user)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        why = not_a_folder(path) or exc.strerror
        raise MacprofError(f"{path}: could not write the run log ({why}); {_kept(path)}") from None
    tmp = Path(name)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(log.to_json(), fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        _publish(tmp, path, replace)
    except OSError as exc:
        raise MacprofError(f"{path}: could not write the run log ({exc.strerror}); {_kept(path)}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _publish(tmp: Path, path: Path, replace: bool) -> None:
    if replace:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise MacprofError(f"{path}: a file appeared there during the run and is not overwritten; "
                           f"{_kept(path)}") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if path.exists():  # a file system without hard links: check, then rename
            raise MacprofError(f"{path}: a file appeared there during the run and is not overwritten; "
                               f"{_kept(path)}") from None
        os.replace(tmp, path)


def _kept(path: Path) -> str:
    journal = path.with_suffix(".journal.jsonl")
    return f"the journal {journal} keeps every measurement (`macprof show {journal}`)"


def read_journal(path: Path) -> list[Event]:
    """The journal's events in the order they were written. A line that is not an event, or of
    a kind this macprof does not know, is passed over, and so is a last line cut mid-write (a
    crash, a full disk); an event with a missing or malformed field is refused, naming it.
    Events carry their number in the journal (``seq``): a line written twice is read once,
    lines out of order are put back in order."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read journal ({exc.strerror})") from None
    lines = raw.split(b"\n")
    events = []
    for number, line in enumerate(lines, 1):
        try:
            data = _json_line(line)
        except RecursionError:  # nested past what the parser takes: no cut line, a broken one
            raise MacprofError(f"{path}: line {number}: nested more than {MAX_DEPTH} deep") from None
        refusal = json_refusal(data) if data is not None else None
        if refusal:
            raise MacprofError(f"{path}: line {number}: {refusal}")
        event = parse_event(data, f"{path}: line {number}") if data is not None else None
        if event is not None:
            events.append(event)
    return in_order(events, path)


def _json_line(line: bytes):
    """A line's JSON; None for a cut line. A line that an older macprof appended to a cut one
    (the two glued together) gives the event it ends with: each line starts with its kind."""
    try:
        return json.loads(line)
    except ValueError:
        glued = line.rfind(b'{"event":')
        if glued > 0:
            return _json_line(line[glued:])
        return None


def in_order(events: list[Event], where: Path | str) -> list[Event]:
    """Duplicates (same ``seq``) dropped, the rest sorted by ``seq``. An event without one (a
    journal of a macprof before numbering) counts by its place, as the resumed run numbers on."""
    seen: dict[int, Event] = {}
    keyed = []
    for place, e in enumerate(events):
        if e.seq is not None:
            if e.seq in seen:
                if seen[e.seq].to_json() != e.to_json():
                    raise MacprofError(f"{where}: two different events numbered {e.seq}: the journal was edited "
                                       f"or two runs wrote to it; it cannot be read as one run")
                continue
            seen[e.seq] = e
        keyed.append((e.seq if e.seq is not None else place, place, e))
    return [e for _, _, e in sorted(keyed, key=lambda k: k[:2])]


def schema() -> dict:
    return json.loads((Path(__file__).parent / "schema" / "runlog.schema.json").read_text())


@functools.cache
def _validator():
    """The schema compiled once per process (jsonschema.validate redoes it per call). It is not
    checked against its metaschema here: that took 0.25 s of every command that loads a log, for a
    file that ships with macprof and that the tests check (tests/test_model_schema.py)."""
    import jsonschema

    loaded = schema()
    return jsonschema.validators.validator_for(loaded)(loaded)


@functools.cache
def _fast_validator():
    """jsonschema-rs (Rust) on the same schema: it says whether a log is valid some 300 times
    faster than jsonschema (0.4 ms, not 140 ms, for a demo run's log), and every command, test
    and fuzz example loads logs. Only its "valid" is taken: where it finds fault, jsonschema
    decides, and names the error (its best_match), so verdicts and messages stay jsonschema's."""
    import jsonschema_rs

    return jsonschema_rs.validator_for(schema())


def validate(log: dict, where: str = "run log") -> None:
    try:
        if _fast_validator().is_valid(log):
            return
    except (ValueError, TypeError, OverflowError):  # a value it cannot take in: jsonschema judges it
        pass
    import jsonschema

    try:
        # as jsonschema.validate: the most relevant of all errors
        error = jsonschema.exceptions.best_match(_validator().iter_errors(log))
        if error is not None:
            raise error
    except jsonschema.ValidationError as exc:
        loc = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise MacprofError(f"{where}: does not match the run-log schema at {loc}: {exc.message[:200]}") from None


def load(path: Path) -> RunLog:
    """A run log (validated, migrated) or a journal (rebuilt into a run log)."""
    path = Path(path)
    if path.name.endswith(".jsonl"):
        return build(read_journal(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:  # not UTF-8
        raise MacprofError(f"{path}: not valid JSON (truncated or corrupt): {str(exc)[:120]}") from None
    return _parsed(str(path), text)


@functools.lru_cache(maxsize=32)
def _parsed(where: str, text: str) -> RunLog:
    """The typed log of a file's text. Validating a large log against the schema takes a good part
    of a second; a RunLog is immutable, so one process reading the same text again (compare and
    plot of one folder, the test suite) reuses it."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise MacprofError(f"{where}: nested more than {MAX_DEPTH} deep: not a macprof run log") from None
    except ValueError as exc:
        raise MacprofError(f"{where}: not valid JSON (truncated or corrupt): {str(exc)[:120]}") from None
    refusal = json_refusal(data)
    if refusal:
        raise MacprofError(f"{where}: {refusal}: not a macprof run log")
    if not isinstance(data, dict) or "schema_version" not in data:
        raise MacprofError(f"{where}: not a macprof run log (no schema_version)")
    if not isinstance(data["schema_version"], int) or data["schema_version"] > SCHEMA_VERSION:
        raise MacprofError(f"{where}: schema_version {data['schema_version']!r} is newer than this macprof "
                           f"understands ({SCHEMA_VERSION}): upgrade macprof")
    data = migrate(data)
    validate(data, where)
    return RunLog.from_json(data, where)


def migrate(data: dict) -> dict:
    """Bring an older log up to SCHEMA_VERSION; what the old version did not record is null,
    with the reason."""
    if data.get("schema_version") == 1:
        data = dict(data)
        data.setdefault("bandwidth", None)
        for m in data.get("models", []) if isinstance(data.get("models"), list) else []:
            for name in ("warm", "prefix"):
                phase = (m.get("phases") or {}).get(name)
                if isinstance(phase, dict):
                    phase.setdefault("roofline", {"reason": "not recorded: schema_version 1 predates the ceiling"})
        data["migrated_from"] = 1
        data["schema_version"] = 2
    if data.get("schema_version") == 2:  # 3 added optional sweep phases: a 2 log is a valid 3 log
        data = {**data, "schema_version": 3}
        data.setdefault("migrated_from", 2)
    return data
