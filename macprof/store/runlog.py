"""Run logs on disk: atomic save, load (a log or a journal), schema validation, migration."""

from __future__ import annotations

import errno
import functools
import json
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from macprof.analyse.build import build
from macprof.errors import MacprofError
from macprof.files.filekind import not_a_folder, read_regular
from macprof.model.definitions import MAX_LOG_BYTES, SCHEMA_VERSION
from macprof.model.events import Event, parse_event
from macprof.model.log import RunLog
from macprof.model.records import MAX_DEPTH, json_refusal
from macprof.sanitise import clean


# -- files ---------------------------------------------------------------------------------
def save(log: RunLog, path: Path, replace: bool = True) -> None:
    """With its content digest (store/digest.py: sha256 of its canonical form, under ``digest``,
    a digest it had replaced), validated against the schema first (what load checks), then
    atomic: a temp file in the same folder, fsynced, then renamed over the target. With
    ``replace=False`` a file already at ``path`` is never replaced: the temp file is hard-linked
    to the name, which fails if anything took it meanwhile (another run, the user)."""
    from macprof.store.digest import stamped

    data = stamped(log.to_json())
    try:  # a log that is written can always be read back: never one its own readers refuse
        validate(data, str(path))
    except MacprofError as exc:
        raise MacprofError(f"{exc}: the log was not written; {_kept(path)}") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        why = not_a_folder(path) or exc.strerror
        raise MacprofError(f"{path}: could not write the run log ({why}); {_kept(path)}") from None
    tmp = Path(name)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
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
        raw = read_regular(Path(path), MAX_LOG_BYTES, "a journal")
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read journal ({exc.strerror})") from None
    lines = raw.split(b"\n")
    events = []
    for number, line in enumerate(lines, 1):
        try:
            data = _json_line(line)
        except RecursionError:  # nested past what the parser takes: no cut line, a broken one
            raise MacprofError(f"{path}: line {number}: nested more than {MAX_DEPTH} deep") from None
        # the walk of json_refusal only where the line may be refused: it was half of the parse
        refusal = json_refusal(data) if data is not None and not _cannot_be_refused(line, data) else None
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
        loc = clean("/".join(str(p) for p in exc.absolute_path)) or "(top level)"  # a key may hold a line break
        raise MacprofError(f"{where}: does not match the run-log schema at {loc}: {exc.message[:200]}") from None


def load(path: Path) -> RunLog:
    """A run log (validated, migrated) or a journal (rebuilt into a run log)."""
    path = Path(path)
    if path.name.endswith(".jsonl"):
        return build(read_journal(path))
    return parse(str(path), read_text(path))


def read_text(path: Path) -> str:
    """A run log file's text, or MacprofError naming it (load, `macprof verify`)."""
    try:
        return read_regular(path, MAX_LOG_BYTES, "a run log").decode("utf-8")
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:  # not UTF-8
        raise MacprofError(f"{path}: not valid JSON (truncated or corrupt): {str(exc)[:120]}") from None


_UNREAD = object()
_CACHE: OrderedDict[tuple[str, str], RunLog] = OrderedDict()
_CACHE_SIZE = 32


def parse(where: str, text: str, data: Any = _UNREAD) -> RunLog:
    """The typed log of a file's text (validated, migrated); ``where`` names it in errors.
    ``data``: json.loads(text), where the caller has parsed it already (store/logset.py reads a
    folder's files to see which claim to be run logs), so that a log's JSON is parsed once.

    Validating a large log against the schema takes a good part of a second; a RunLog is
    immutable, so one process reading the same text again (compare and plot of one folder, the
    test suite) reuses it: the last 32 texts read are kept."""
    key = (where, text)
    log = _CACHE.get(key)
    if log is None:
        log = _typed(where, text, parse_json(where, text) if data is _UNREAD else data)
        _CACHE[key] = log
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return log


def parse_json(where: str, text: str) -> Any:
    """The JSON of a log file's text, or MacprofError naming ``where``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise MacprofError(f"{where}: nested more than {MAX_DEPTH} deep: not a macprof run log") from None
    except ValueError as exc:
        raise MacprofError(f"{where}: not valid JSON (truncated or corrupt): {str(exc)[:120]}") from None


def _typed(where: str, text: str, data: Any) -> RunLog:
    """The log of ``data`` (json.loads(text)): refused, migrated, validated, decoded."""
    refusal = None if _cannot_be_refused(text, data) else json_refusal(data)
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


# Only an integer of 19 digits or more can pass 63 bits (2^63 has 19). The text's digits are
# found with bytes.translate and bytes.find, both in C: a regular expression scans a 530 kB log
# in 10 to 20 ms, more than json_refusal's whole walk.
_DIGIT_MAP = bytes(ord("0") if ord("0") <= c <= ord("9") else ord(" ") for c in range(256))  # digits to "0", the rest " "
_LONG_RUN = b"0" * 19


def _long_int(text: str | bytes) -> bool:
    """Whether the text may hold an integer of 19 digits or more: a run of 19 digits or more
    that is neither a fraction's digits (a "." before it) nor a float's integer part (".", "e"
    or "E" after it). A run inside a string counts too, which only costs the full check."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")  # digits: the same bytes in UTF-8
    digits = raw.translate(_DIGIT_MAP)
    pos = 0
    while (start := digits.find(_LONG_RUN, pos)) >= 0:  # the leftmost: where a run starts
        end = digits.find(b" ", start)
        end = len(raw) if end < 0 else end
        if raw[start - 1:start] != b"." and raw[end:end + 1] not in (b".", b"e", b"E"):
            return True
        pos = end
    return False


def _cannot_be_refused(text: str | bytes, data: Any) -> bool:
    """True only where json_refusal(data) is None, for data = json.loads(text); False where it
    may not be (then json_refusal decides, and says why). json_refusal walks every value of the
    log with its place in hand, 8 ms for a default run's log, 0.4 s of compare's 50; here the
    integers are ruled out on the text (_long_int) and the depth is taken a level
    at a time, each container's values looked at by type in C (set(map(type, ...)))."""
    if _long_int(text):
        return False
    level, depth = [data] if type(data) in (dict, list) else [], 1
    while level:
        if depth > MAX_DEPTH:
            return False
        inner = []
        for value in level:
            items = value.values() if type(value) is dict else value
            kinds = set(map(type, items))
            if dict in kinds or list in kinds:
                inner += [v for v in items if type(v) in (dict, list)]
        level, depth = inner, depth + 1
    return True


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
