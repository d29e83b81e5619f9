"""The typed run log (macprof/model) and the JSON Schema (macprof/store/schema) describe the same
layout, and real logs and journals read into the types and write back to the same JSON."""

import json
import typing

import pytest

from macprof.model.events import EVENTS, parse_event
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.log import RunLog
from macprof.model.records import ABSENT, Record, record_fields
from macprof.store import runlog
from tests.conftest import FIXTURES

LOGS = FIXTURES / "runlogs"


def _resolve(node: dict, schema: dict) -> dict:
    """Follow $ref, and of ``anyOf: [X, null]`` take X."""
    while "$ref" in node or "anyOf" in node:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
        else:
            (node,) = [arm for arm in node["anyOf"] if arm != {"type": "null"}]
    return node


def _kinds(node: dict) -> set:
    kind = node.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


def _without_none(hint):
    if typing.get_origin(hint) in (typing.Union, type(int | None)):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def _is_record(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, Record)


def _disagreements(cls: type, node: dict, schema: dict, at: str) -> list[str]:
    """Where the record ``cls`` and the schema ``node`` differ: a field that is not a property,
    a property that is not a field, or a field of records against a schema that is no object."""
    node = _resolve(node, schema)
    props = node.get("properties", {})
    names = {f.name for f in record_fields(cls)}
    out = [f"{at}.{n}: a field of {cls.__name__}, not in the schema" for n in sorted(names - props.keys())]
    out += [f"{at}.{n}: in the schema, not a field of {cls.__name__}" for n in sorted(props.keys() - names)]
    out += [f"{at}: required {n!r} is not a field of {cls.__name__}" for n in node.get("required", []) if n not in names]
    hints = typing.get_type_hints(cls)
    for name in sorted(names & props.keys()):
        hint, sub = _without_none(hints[name]), _resolve(props[name], schema)
        args = typing.get_args(hint)
        if (_is_record(hint) or typing.get_origin(hint) is dict) and "object" not in _kinds(sub):
            out.append(f"{at}.{name}: an object in the types, {sub.get('type')} in the schema")
        if typing.get_origin(hint) is tuple and "array" not in _kinds(sub):
            out.append(f"{at}.{name}: an array in the types, {sub.get('type')} in the schema")
        if _is_record(hint):
            out += _disagreements(hint, sub, schema, f"{at}.{name}")
        elif typing.get_origin(hint) is tuple and _is_record(args[0]):
            out += _disagreements(args[0], sub.get("items", {}), schema, f"{at}.{name}[]")
        elif typing.get_origin(hint) is dict and _is_record(args[1]):
            out += _disagreements(args[1], sub.get("additionalProperties", {}), schema, f"{at}.{name}{{}}")
        elif "properties" in sub:  # a free-form value in the types is free-form in the schema too
            out.append(f"{at}.{name}: the schema lists properties, the type {hint} does not")
    return out


def test_types_and_schema_agree():
    schema = runlog.schema()
    assert _disagreements(RunLog, schema, schema, "log") == []


def test_the_walk_finds_a_difference():
    """The check above is not vacuous: a schema missing a field, or with one more, is caught."""
    schema = runlog.schema()
    del schema["$defs"]["request"]["properties"]["ttft_s"]
    schema["$defs"]["summary"]["properties"]["p90"] = {"$ref": "#/$defs/num"}
    found = _disagreements(RunLog, schema, schema, "log")
    assert "log.models[].phases.warm.requests[].ttft_s: a field of Request, not in the schema" in found
    assert "log.models[].phases.warm.summary.ttft_s.p90: in the schema, not a field of Summary" in found


@pytest.mark.parametrize("name", ["tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json"])
def test_real_logs_round_trip(name):
    data = runlog.migrate(json.loads((LOGS / name).read_text()))
    runlog.validate(data)
    log = RunLog.from_json(data)
    assert log.to_json() == data
    assert runlog.load(LOGS / name) == log


def test_the_journal_round_trips():
    lines = [json.loads(line) for line in (LOGS / "incomplete.journal.jsonl").read_text().splitlines()]
    events = [parse_event(d) for d in lines]
    assert [e.to_json() for e in events] == lines
    assert {e.KIND for e in events} <= set(EVENTS)


def test_absent_keys_stay_absent_and_read_as_none():
    log = RunLog.from_json(runlog.migrate(json.loads((LOGS / "schema1.json").read_text())))
    request = log.models[0].phases.warm.requests[0]
    assert request.engine_memory is None and "engine_memory" not in request.to_json()  # schema 1 had none
    assert request.replace(engine_memory={"x": 1}).to_json()["engine_memory"] == {"x": 1}
    assert request.replace(error="boom").has("engine_memory") is False


def test_a_misshapen_log_is_one_clear_error(tmp_path):
    from macprof.errors import MacprofError

    data = json.loads((LOGS / "tiny-a.json").read_text())
    data["models"][0]["phases"]["warm"]["requests"][1] = ["not", "a", "request"]
    with pytest.raises(MacprofError, match="models/0/phases/warm/requests/1: expected an object, found an array"):
        RunLog.from_json(runlog.migrate(data), "x.json")
    with pytest.raises(MacprofError, match=r"line 3: .*no 't_spawn'"):
        p = tmp_path / "bad.journal.jsonl"
        p.write_text('{"event":"run_start"}\n{"event":"unknown_kind"}\n{"event":"worker_spawn","phases":["warm"]}\n')
        runlog.read_journal(p)


def test_every_event_kind_is_registered_once():
    assert all(cls.KIND == kind for kind, cls in EVENTS.items())
    assert ABSENT is not None and repr(ABSENT) == "ABSENT"


def test_the_schema_is_a_valid_json_schema():
    """macprof compiles the shipped schema without checking it on every load: checked here."""
    import jsonschema

    schema = runlog.schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)


# -- the settings: one declaration each (macprof/config/settings.py), the log and schema from it --
def _settings_drift(checked_in: dict, derived: dict) -> list[str]:
    """Where the schema's settings object differs from the one the declarations give: a setting
    missing or extra, a property whose type, enum or minimum differs, the required list."""
    have, want = checked_in.get("properties", {}), derived["properties"]
    out = [f"settings.{n}: declared, not in the schema" for n in want if n not in have]
    out += [f"settings.{n}: in the schema, not declared" for n in have if n not in want]
    out += [f"settings.{n}: schema {have[n]} != declared {want[n]}" for n in want if n in have and have[n] != want[n]]
    if checked_in.get("required") != derived["required"]:
        out.append(f"settings: required {checked_in.get('required')} != declared {derived['required']}")
    out += [f"settings.{k}: {checked_in.get(k)!r} != {derived[k]!r}" for k in derived if k not in ("properties", "required")
            and checked_in.get(k) != derived[k]]
    return out


def test_the_settings_schema_is_the_declarations():
    """The checked-in schema's settings object is the one config.settings.settings_schema derives
    (types, enums such as phases and kv_type, minimums, nullability): a phase or a setting added
    to the declarations and not to the schema fails here. To update the file, paste
    json.dumps(settings_schema()) in."""
    from macprof.config.settings import settings_schema

    checked_in = runlog.schema()["$defs"]["model"]["properties"]["settings"]
    assert _settings_drift(checked_in, settings_schema()) == []


def test_the_settings_check_finds_drift():
    """Not vacuous: a phase missing from the enum, a minimum changed, a setting dropped are caught."""
    import copy

    from macprof.config.settings import settings_schema

    schema = copy.deepcopy(runlog.schema()["$defs"]["model"]["properties"]["settings"])
    schema["properties"]["phases"]["items"]["enum"].remove("concurrency")
    schema["properties"]["depths"]["items"]["minimum"] = 1
    del schema["properties"]["slo_itl"]
    found = _settings_drift(schema, settings_schema())
    assert "settings.slo_itl: declared, not in the schema" in found
    assert any(f.startswith("settings.phases: schema") and "concurrency" in f for f in found)
    assert any(f.startswith("settings.depths: schema") for f in found) and len(found) == 3


def test_the_log_s_settings_record_follows_the_declarations():
    """ModelSettings (the log's settings) has the declared settings as its fields, in their
    order (the log's key order), with the declared types and defaults: a setting every log has
    keeps its type and default; one added later is nullable and ABSENT from older logs."""
    import dataclasses

    from macprof.config.dist import Distributed
    from macprof.model.distributed import DistributedSettings
    from macprof.model.log import ModelSettings
    from macprof.config.settings import SPECS, Settings

    declared = dataclasses.fields(Settings)
    assert [f.name for f in record_fields(ModelSettings)] == [f.name for f in declared]
    logged, hints = typing.get_type_hints(ModelSettings), typing.get_type_hints(Settings)
    for f, g in zip(declared, record_fields(ModelSettings)):
        hint = hints[f.name]
        if _without_none(hint) is Distributed:  # a record in the log: the same keys
            hint = DistributedSettings | None
            assert [x.name for x in dataclasses.fields(Distributed)] == [x.name for x in record_fields(DistributedSettings)]
        if SPECS[f.name].logged == "added":
            assert g.default is ABSENT, f.name
            assert logged[f.name] == (hint if _without_none(hint) is not hint else hint | None), f.name
        else:
            assert g.default == f.default and logged[f.name] == hint, f.name


@pytest.mark.parametrize("name", ["tiny-sweeps.json", "tiny-telemetry.json"])
def test_a_log_of_this_version_saves_to_the_same_bytes(name, tmp_path):
    """A log of the current schema version, read and written back, is the same file, byte for
    byte: key order (the settings' included) and values."""
    text = (LOGS / name).read_text()
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION
    runlog.save(RunLog.from_json(json.loads(text)), tmp_path / name)
    assert (tmp_path / name).read_text() == text


@pytest.mark.parametrize("name", ["tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json",
                                  "other-machine-demo-small.json"])
def test_every_log_s_settings_re_encode_in_their_order(name):
    data = runlog.migrate(json.loads((LOGS / name).read_text()))
    for model, again in zip(data["models"], RunLog.from_json(data).to_json()["models"]):
        assert json.dumps(again["settings"]) == json.dumps(model["settings"])
