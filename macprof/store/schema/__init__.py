"""The run log's JSON Schema, generated from the record types (macprof/model) by msgspec: every
record a ``$defs`` entry named after its class, titled and described by it, its enums the words
of model/vocab.py (the phases from the registry) and its minimums the types' own. What the types
do not carry is added here: the log's title and version, the keys every log has though code may
leave them to a default (a record's REQUIRED_KEYS), and the settings record, whose enums,
minimums and required keys come from the settings' declarations (config/settings.py).

runlog.schema.json beside this file is the generated schema, checked in so that a reader needs
no macprof to read a log; tests/test_model_schema.py fails when it differs from what
``generate()`` gives. Regenerate it with ``python -m macprof.store.schema``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE = Path(__file__).parent / "runlog.schema.json"


def generate() -> dict:
    import msgspec

    from macprof.config.settings import settings_schema
    from macprof.model.definitions import SCHEMA_VERSION
    from macprof.model.kinds import reachable
    from macprof.model.log import ModelSettings, RunLog

    _, defs = msgspec.json.schema_components([RunLog], ref_template="#/$defs/{name}")
    for cls in reachable(RunLog):  # the keys every log has, though code may leave them out
        required = getattr(cls, "REQUIRED_KEYS", ())  # every class reachable is a Record
        if required and cls.__name__ in defs:
            node = defs[cls.__name__]
            keys = set(node.get("required", ())) | set(required)
            node["required"] = [name for name in node["properties"] if name in keys]
    top = defs.pop(RunLog.__name__)
    defs[ModelSettings.__name__] = {"title": ModelSettings.__name__, **settings_schema()}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "macprof/runlog.schema.json",
        "title": "macprof run log",
        "description": f"One run of `macprof run`, schema_version {SCHEMA_VERSION} (older logs are migrated on load: "
                       "macprof/store/runlog.py). Generated from macprof/model by `python -m macprof.store.schema`: "
                       "do not edit. Field-by-field documentation: docs/runlog.md. Unknown values are null, with a "
                       "reason where one is known; a key of another phase or a later version is absent.",
        **{k: v for k, v in top.items() if k not in ("title", "description")},
    }
    schema["$defs"] = {name: defs[name] for name in sorted(_reachable(schema, defs))}
    return json.loads(json.dumps(schema))  # as the file reads back: a default () is the array []


def _reachable(node: Any, defs: dict) -> set[str]:
    """The $defs that the schema refers to (the settings' declarations replace a record's)."""
    found: set[str] = set()
    todo = [node]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and (name := ref.removeprefix("#/$defs/")) not in found:
                found.add(name)
                todo.append(defs[name])
            todo += value.values()
        elif isinstance(value, list):
            todo += value
    return found


def text(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def write(path: Path = FILE) -> Path:
    path.write_text(text(generate()), encoding="utf-8")
    return path


def differences(have: Any, want: Any, at: str = "") -> list[str]:
    """Where the schema ``have`` (the checked-in file) differs from ``want`` (the generated one),
    one line per place: a key only in one, or a value that differs (an enum's words included)."""
    if isinstance(have, dict) and isinstance(want, dict):
        out = [f"{at}/{k}: only in the checked-in schema" for k in have if k not in want]
        out += [f"{at}/{k}: only in the generated schema" for k in want if k not in have]
        for k in have.keys() & want.keys():
            out += differences(have[k], want[k], f"{at}/{k}")
        return sorted(out)
    if isinstance(have, list) and isinstance(want, list) and len(have) == len(want) and have != want:
        return [line for i, (h, w) in enumerate(zip(have, want)) for line in differences(h, w, f"{at}/{i}")]
    if have != want or type(have) is not type(want):
        return [f"{at or '/'}: checked in {json.dumps(have)[:200]}, generated {json.dumps(want)[:200]}"]
    return []
