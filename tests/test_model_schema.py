"""The typed run log (macprof/model) and the JSON Schema (macprof/store/schema) describe the same
layout, and real logs and journals read into the types and write back to the same JSON."""

import json
import typing

import pytest

from macprof.model.events import EVENTS, parse_event
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.log import RunLog
from macprof.errors import MacprofError
from macprof.model.records import ABSENT, record_fields
from macprof.store import runlog
from tests.conftest import FIXTURES

LOGS = FIXTURES / "runlogs"


def _without_none(hint):
    if typing.get_origin(hint) in (typing.Union, type(int | None)):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return arms[0] if len(arms) == 1 else typing.Union[tuple(arms)]
    return hint


def _as_logged(hint):
    """A declared setting's type as the log's record types it: a float is a Number (int | float)."""
    import functools
    import operator

    if hint is float:
        return int | float
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, type(int | None)):
        return functools.reduce(operator.or_, [_as_logged(a) for a in args])
    if typing.get_origin(hint) is tuple:
        return tuple[tuple(a if a is Ellipsis else _as_logged(a) for a in args)]
    return hint


def test_the_checked_in_schema_is_the_generated_one():
    """macprof/store/schema/runlog.schema.json is what the record types give (enums included):
    a field, a word or a minimum changed in macprof/model and not regenerated fails here,
    naming each place. Regenerate with `python -m macprof.store.schema`."""
    from macprof.store.schema import FILE, differences, generate

    found = differences(json.loads(FILE.read_text()), generate())
    assert found == [], "the checked-in schema is not the generated one (python -m macprof.store.schema):\n" + \
        "\n".join(found)


def test_the_schema_check_names_a_hand_edited_enum():
    """Not vacuous: a phase removed from failure.phase's words by hand is named."""
    from macprof.store.schema import differences, generate

    edited = generate()
    words = next(arm for arm in edited["$defs"]["Failure"]["properties"]["phase"]["anyOf"] if "enum" in arm)["enum"]
    words.remove("concurrency")
    (found,) = differences(edited, generate())
    assert found.startswith("/$defs/Failure/properties/phase/anyOf/0/enum: checked in [") and "concurrency" in found


def test_the_schema_s_words_are_the_registries():
    """The enums are taken from where macprof declares them: the phases from the registry, the
    engines from theirs; a phase or an engine added there is a word of the log, nothing edited."""
    from macprof.engines import ENGINES
    from macprof.phases import NAMES
    from macprof.store.schema import generate

    defs = generate()["$defs"]
    phase = next(arm for arm in defs["Failure"]["properties"]["phase"]["anyOf"] if "enum" in arm)["enum"]
    assert sorted(phase) == sorted(NAMES)
    assert sorted(defs["Identity"]["properties"]["engine"]["enum"]) == sorted(ENGINES)
    assert list(defs["Phases"]["properties"]) == list(NAMES)


def test_every_fixture_log_matches_the_generated_schema():
    """The schema documents what decoding accepts: every fixture log (the other machine's too)
    is valid against it, and the malformed one is not."""
    import jsonschema

    schema = runlog.schema()
    for name in ("tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json",
                 "other-machine-demo-small.json"):
        jsonschema.validate(runlog.migrate(json.loads((LOGS / name).read_text())), schema)
    assert not jsonschema.validators.validator_for(schema)(schema).is_valid(json.loads((LOGS / "malformed.json").read_text()))


def test_an_event_holds_the_fields_of_the_record_it_journals():
    """An event cannot also be a record (msgspec: one base with fields), so PrefixCheck,
    SpeculativeCheck, DepthFill and Telemetry are made with the fields of OutputCheck, DepthFill
    and TelemetryRaw (Journals, model/records.py): the same names, types and defaults."""
    from macprof.model import events as ev
    from macprof.model.phases import DepthFill, OutputCheck
    from macprof.model.speculative import SpeculativeCheck
    from macprof.model.telemetry import TelemetryRaw

    for event, rec in ((ev.PrefixCheck, OutputCheck), (SpeculativeCheck, OutputCheck), (ev.DepthFill, DepthFill),
                       (ev.Telemetry, TelemetryRaw)):
        have = {f.name: (f.type, f.default) for f in record_fields(event)}
        for f in record_fields(rec):
            assert have.get(f.name) == (f.type, f.default), f"{event.__name__}.{f.name}"


@pytest.mark.parametrize("name", ["tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json",
                                  "other-machine-demo-small.json"])
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
    assert not request.has("engine_memory")
    assert request.replace(engine_memory=None).to_json()["engine_memory"] is None  # a null stays a null
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
    assert ABSENT is not None and not ABSENT  # false, as None is


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
    to the declarations and not to the schema fails here. To update the file, run
    `python -m macprof.store.schema`."""
    from macprof.config.settings import settings_schema

    checked_in = runlog.schema()["$defs"]["ModelSettings"]
    assert _settings_drift(checked_in, settings_schema()) == []


def test_the_settings_check_finds_drift():
    """Not vacuous: a phase missing from the enum, a minimum changed, a setting dropped are caught."""
    import copy

    from macprof.config.settings import settings_schema

    schema = copy.deepcopy(runlog.schema()["$defs"]["ModelSettings"])
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
        hint = _as_logged(hints[f.name])
        if _without_none(hint) is Distributed:  # a record in the log: the same keys
            hint = DistributedSettings | None
            assert [x.name for x in dataclasses.fields(Distributed)] == [x.name for x in record_fields(DistributedSettings)]
        if SPECS[f.name].logged == "added":
            assert g.default is ABSENT, f.name
            assert logged[f.name] == hint | None, f.name  # nullable, and absent from older logs
        else:
            assert g.default == f.default and logged[f.name] == hint, f.name


def test_the_settings_stub_is_the_generated_one():
    """model/logged_settings.pyi, what mypy reads of ModelSettings (made at import, which it cannot
    follow), is what the record as made gives: a setting declared, renamed or retyped and not
    regenerated fails here. Regenerate with `python -m macprof.model.settings_stub`."""
    from macprof.model.settings_stub import FILE, text

    assert FILE.read_text(encoding="utf-8") == text(), \
        f"{FILE.name} is not the generated stub: python -m macprof.model.settings_stub"


def test_the_settings_stub_writes_only_the_types_it_knows():
    """A type the stub cannot write as source (a Literal, an Annotated) stops the generator, naming
    it, rather than writing a wrong stub."""
    from macprof.model.settings_stub import _written

    imports: set = set()
    assert _written(tuple[int, ...] | None, imports) == "tuple[int, ...] | None" and imports == set()
    with pytest.raises(TypeError, match="Literal"):
        _written(typing.Literal["a"], imports)


PROBE = '''
from macprof.model.log import ModelResult


def reads(m: ModelResult) -> None:
    m.settings.prompt_tokens.upper()  # an int
    m.settings.kv_type + 1  # a str, or None in a log older than the setting
    m.settings.no_such_setting
'''


def test_mypy_checks_every_read_of_a_log_s_settings(tmp_path):
    """Finding 25: the log's settings are typed for mypy as the log holds them (was Any: none of
    these three reads was an error)."""
    from pathlib import Path

    from mypy import api

    root = Path(__file__).resolve().parent.parent
    probe = tmp_path / "probe_settings.py"
    probe.write_text(PROBE)
    out, err, status = api.run(["--config-file", str(root / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                                "--follow-imports", "silent", str(probe)])
    errors = [line.split(": error: ", 1)[1] for line in out.splitlines() if ": error: " in line]
    assert status == 1, out + err
    assert errors[0].startswith('"int" has no attribute "upper"'), out
    assert any('"str"' in e and '"int"' in e for e in errors[1:3]) and any("None" in e for e in errors[1:3]), out
    assert errors[-1].startswith('"ModelSettings" has no attribute "no_such_setting"') and len(errors) == 4, out


@pytest.mark.parametrize("name", ["tiny-sweeps.json", "tiny-telemetry.json"])
def test_a_log_of_this_version_saves_to_the_same_bytes(name, tmp_path):
    """A log of the current schema version, read and written back, is the same file, byte for
    byte: key order (the settings' included) and values, and its content digest last (these
    logs were written before save wrote one: store/digest.py)."""
    from macprof.store.digest import FORM, sha256_of

    text = (LOGS / name).read_text()
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION
    runlog.save(RunLog.from_json(json.loads(text)), tmp_path / name)
    written = json.loads((tmp_path / name).read_text())
    assert written.pop("digest") == {"sha256": sha256_of(json.loads(text)), "form": FORM}
    assert json.dumps(written, indent=1) + "\n" == text


@pytest.mark.parametrize("name", ["tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json",
                                  "other-machine-demo-small.json"])
def test_every_log_s_settings_re_encode_in_their_order(name):
    data = runlog.migrate(json.loads((LOGS / name).read_text()))
    for model, again in zip(data["models"], RunLog.from_json(data).to_json()["models"]):
        assert json.dumps(again["settings"]) == json.dumps(model["settings"])


def test_the_keys_every_log_has_are_fields_and_required():
    """A record's REQUIRED_KEYS are its fields, and the schema requires them: a log lacking
    one is refused on load (a model without its identity), though code may leave them out."""
    from macprof.model import kinds
    from macprof.store.schema import generate

    defs = generate()["$defs"]
    for cls in kinds.reachable():
        names = [f.name for f in record_fields(cls)]
        assert set(cls.REQUIRED_KEYS) <= set(names), cls.__name__
        if cls.REQUIRED_KEYS and cls.__name__ in defs:
            assert set(cls.REQUIRED_KEYS) <= set(defs[cls.__name__]["required"]), cls.__name__
    data = runlog.migrate(json.loads((LOGS / "tiny-a.json").read_text()))
    del data["models"][0]["identity"]
    with pytest.raises(MacprofError, match="does not match the run-log schema at models/0: 'identity' is a required property"):
        runlog.validate(data, "x.json")


def test_every_field_that_may_be_absent_reads_none_when_it_is():
    """Each field defaulting to ABSENT, in every record and event, reads None from Python while
    its key stays out of the JSON (records.py's descriptor, set as each class is made)."""
    from macprof.model import records
    from macprof.model.log import Machine

    def every(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from every(sub)

    absent = [(cls, f.name) for cls in every(records.Record) for f in record_fields(cls) if f.default is ABSENT]
    assert len(absent) > 100
    assert all(isinstance(getattr(cls, name), records._Absentable) for cls, name in absent)
    mac = Machine(os="Linux")
    assert mac.power_mode is None and not mac.has("power_mode") and "power_mode" not in mac.to_json()
    assert mac.replace(power_mode=None).to_json()["power_mode"] is None and mac.replace(power_mode=None).has("power_mode")


def test_no_record_field_is_a_bare_float():
    """A figure is Number (int | float): a float field reads 512 as 512.0 and writes it back so,
    and the log would not re-encode to the same JSON. A field added as float fails here."""
    from macprof.model import records

    def every(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from every(sub)

    def floats(hint) -> bool:
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, type(int | None)) and float in args:
            return int not in args or any(floats(a) for a in args if a not in (int, float))
        return hint is float or any(floats(a) for a in args)

    bare = [f"{cls.__name__}.{name}" for cls in every(records.Record)
            for name, hint in typing.get_type_hints(cls).items() if name in cls.__struct_fields__ and floats(hint)]
    assert bare == [], f"typed float, not Number: {bare}"
