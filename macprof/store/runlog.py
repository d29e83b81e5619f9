"""Run logs on disk: atomic save, load (a log or a journal), schema validation, migration."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from macprof.analyse.build import build
from macprof.errors import MacprofError
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.events import Event, parse_event
from macprof.model.log import RunLog


# -- files ---------------------------------------------------------------------------------
def save(log: RunLog, path: Path) -> None:
    """Atomic: a temp file in the same folder, fsynced, then renamed over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(log.to_json(), fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise MacprofError(f"{path}: could not write the run log ({exc.strerror}); "
                           f"the journal {path.with_suffix('.journal.jsonl')} keeps every measurement") from None


def read_journal(path: Path) -> list[Event]:
    """The journal's events; a line that is not an event, or of a kind this macprof does not
    know, is passed over; an event with a missing or malformed field is refused, naming it."""
    events = []
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash mid-write: everything before it stands
                event = parse_event(data, f"{path}: line {number}")
                if event is not None:
                    events.append(event)
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read journal ({exc.strerror})") from None
    return events


def schema() -> dict:
    return json.loads((Path(__file__).parent / "schema" / "runlog.schema.json").read_text())


@functools.cache
def _validator():
    """The schema checked and compiled once per process (jsonschema.validate redoes both per call)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema())
    cls.check_schema(schema())
    return cls(schema())


def validate(log: dict, where: str = "run log") -> None:
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
    except (ValueError, RecursionError) as exc:
        raise MacprofError(f"{where}: not valid JSON (truncated or corrupt): {str(exc)[:120]}") from None
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
