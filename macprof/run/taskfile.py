"""The tasks phase's task file: JSON Lines, one task a line, checked against TASK_SCHEMA and
then checker by checker (a regex that compiles, a schema that is JSON Schema). The format is
documented in docs/tasks.md; the default set ships as macprof/data/tasks.jsonl.

A line that is wrong is refused alone, with its file, its line number and what is wrong (not
JSON, NaN or Infinity in it, nested more than MAX_DEPTH deep, a schema whose reference points
outside it: macprof fetches and opens nothing a task names), and every other task still runs; only a file that cannot be read at all (missing, not a regular
file, too large, not UTF-8, no task in it) stops the run, in one line, before any worker starts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from macprof.errors import MacprofError, reason
from macprof.model.records import MAX_DEPTH, json_refusal
from macprof.run import checkers

DEFAULT_SOURCE = "macprof/data/tasks.jsonl"
MAX_TASK_FILE_BYTES = 8 << 20
MAX_TOKENS = 4096  # a task's reply limit; the phase's context (macprof/phases.py) bounds it further

_TEXT = {"type": "string"}
_TOOL = {"type": "object", "required": ["type", "function"], "additionalProperties": False, "properties": {
    "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "parameters"], "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]*$"}, "description": _TEXT,
        "parameters": {"type": "object"}}}}}
# each checker's own keys (docs/tasks.md)
CHECKER_SCHEMAS: dict[str, dict] = {
    "exact": {"required": ["answer"], "properties": {"answer": _TEXT, "ignore_case": {"type": "boolean"}}},
    "regex": {"required": ["pattern"], "properties": {"pattern": _TEXT, "full": {"type": "boolean"},
                                                      "ignore_case": {"type": "boolean"}}},
    "number": {"required": ["answer"], "properties": {"answer": {"type": "number"},
                                                      "tolerance": {"type": "number", "minimum": 0}}},
    "choice": {"required": ["options", "answer"], "properties": {
        "options": {"type": "array", "items": _TEXT, "minItems": 2, "uniqueItems": True}, "answer": _TEXT}},
    "json-schema": {"required": ["schema"], "properties": {"schema": {"type": ["object", "boolean"]}}},
    "tool-call": {"required": ["name"], "properties": {"name": _TEXT, "arguments": {"type": "object"}}},
}
TASK_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object", "required": ["id", "checker", "max_tokens"], "additionalProperties": False,
    "oneOf": [{"required": ["prompt"], "not": {"required": ["messages"]}},
              {"required": ["messages"], "not": {"required": ["prompt"]}}],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "category": _TEXT,
        "prompt": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role", "content"], "additionalProperties": False,
            "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": _TEXT}}},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
        "tools": {"type": "array", "minItems": 1, "items": _TOOL},
        "checker": {"type": "object", "required": ["type"], "properties": {"type": {"enum": list(checkers.KINDS)}}},
    },
}


@dataclass(frozen=True)
class Task:
    id: str
    line: int
    messages: tuple[dict, ...]  # {"role", "content"}; a bare prompt is one user turn
    checker: dict
    max_tokens: int
    tools: tuple[dict, ...] = ()
    category: str | None = None


@dataclass(frozen=True)
class TaskFile:
    source: str  # the path given, or DEFAULT_SOURCE
    sha256: str  # of the file's bytes
    bytes: int
    tasks: tuple[Task, ...]
    refused: tuple[tuple[int, str | None, str], ...]  # (line, task id or None, "FILE:LINE: what is wrong")


def _error(validator, value) -> str | None:
    import jsonschema

    err = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if err is None:
        return None
    if err.validator == "oneOf" and not err.absolute_path:
        return "a task has either 'prompt' or 'messages', one of them"
    where = "/".join(str(p) for p in err.absolute_path)
    return f"{where + ': ' if where else ''}{err.message}"


def line_problem(value, validators) -> str | None:
    """What is wrong with one parsed task line, or None."""
    task_v, checker_v = validators
    err = _error(task_v, value)
    if err is not None:
        return err
    kind = value["checker"]["type"]
    extra = set(value["checker"]) - {"type"} - set(CHECKER_SCHEMAS[kind]["properties"])
    if extra:
        return f"checker {kind}: unknown key(s) {', '.join(sorted(extra))}"
    err = _error(checker_v[kind], value["checker"])
    if err is not None:
        return f"checker {kind}: {err}"
    if kind == "tool-call" and not value.get("tools"):
        return "checker tool-call: the task defines no tools"
    return checkers.spec_problem(value["checker"], value.get("tools"))


def _validators():
    import jsonschema

    return (jsonschema.Draft202012Validator(TASK_SCHEMA),
            {k: jsonschema.Draft202012Validator({"type": "object", **s}) for k, s in CHECKER_SCHEMAS.items()})


def parse(data: bytes, source: str) -> TaskFile:
    """The tasks of a task file's bytes, and the lines refused (each with why)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MacprofError(f"{source}: the task file is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    validators = _validators()
    tasks: list[Task] = []
    refused: list[tuple[int, str | None, str]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):  # blank lines and comments
            continue
        try:
            value = checkers.loads(raw)  # NaN and Infinity are no JSON: refused as not JSON
        except RecursionError:  # nested past what the parser takes (100,000 deep): that line alone
            refused.append((number, None, f"{source}:{number}: nested more than {MAX_DEPTH} deep"))
            continue
        except ValueError as exc:
            refused.append((number, None, f"{source}:{number}: not JSON ({exc})"))
            continue
        task_id = value.get("id") if isinstance(value, dict) and isinstance(value.get("id"), str) else None
        # nested past MAX_DEPTH (a schema 3,000 deep) or an integer past 64 bits: refused before any
        # recursive walk (jsonschema's, the checker's) meets it
        problem = json_refusal(value)
        if problem is None:
            try:
                problem = line_problem(value, validators)
            except Exception as exc:  # noqa: BLE001 - whatever a checker's spec makes the checks raise: that line
                problem = f"cannot be checked ({reason(exc)[:200]})"
        if problem is None and task_id in seen:
            problem = f"id {task_id!r} is already line {seen[task_id]}'s"
        if problem is not None:
            refused.append((number, task_id, f"{source}:{number}: {f'task {task_id!r}: ' if task_id else ''}{problem}"))
            continue
        assert task_id is not None
        seen[task_id] = number
        messages = value.get("messages") or [{"role": "user", "content": value["prompt"]}]
        tasks.append(Task(id=task_id, line=number, messages=tuple(messages), checker=value["checker"],
                          max_tokens=value["max_tokens"], tools=tuple(value.get("tools") or ()),
                          category=value.get("category")))
    if not tasks:
        why = f" ({len(refused)} line(s) refused; the first: {refused[0][2]})" if refused else ""
        raise MacprofError(f"{source}: no task to run in the task file{why}")
    return TaskFile(source=source, sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), tasks=tuple(tasks),
                    refused=tuple(refused))


def default_path() -> Path:
    """The packaged task set's file: what is read, and what a run's inputs name, without --tasks."""
    return Path(str(resources.files("macprof") / "data" / "tasks.jsonl"))


def read_bytes(path: str | None) -> tuple[bytes, str]:
    """The task file's bytes and its source name; one line for a file that cannot be read."""
    from macprof.files import filekind

    if path is None:
        return default_path().read_bytes(), DEFAULT_SOURCE
    try:
        return filekind.read_regular(Path(path), MAX_TASK_FILE_BYTES, "a task file"), str(path)
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read the task file: {exc.strerror or exc}") from None
    except MacprofError as exc:
        text = str(exc)
        raise MacprofError(text if text.startswith(str(path)) else f"--tasks {text}") from None


def load(path: str | None) -> TaskFile:
    data, source = read_bytes(path)
    return parse(data, source)
