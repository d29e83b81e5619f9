"""Fuzzing the two loaders that read what users and strangers hand us: every input either
loads or raises the project's own error (one line), never anything else."""

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from macprof import config
from macprof.store import runlog
from macprof.errors import MacprofError
from tests.conftest import FIXTURES

GOOD_TOML = '''[settings]
reps = 2
[[models]]
name = "a"
engine = "llama.cpp"
path = "m.gguf"
gen_tokens = 8
[models.linux]
reps = 1
'''

# examples per test: the profile tests/conftest.py loads (150; 20 in the fast tier)
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _load_toml(tmp_path, text):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    p = tmp_path / "models.toml"
    p.write_bytes(text.encode("utf-8", "replace"))
    try:
        cfg = config.load(p, check_engines=False)
    except MacprofError as exc:
        assert "\n" not in str(exc)
        return None
    assert cfg.models
    return cfg


@SETTINGS
@given(st.text(max_size=300))
def test_config_random_text(tmp_path, text):
    _load_toml(tmp_path, text)


@SETTINGS
@given(st.integers(0, len(GOOD_TOML)), st.integers(0, 20), st.text(max_size=12))
def test_config_mutated(tmp_path, at, cut, insert):
    _load_toml(tmp_path, GOOD_TOML[:at] + insert + GOOD_TOML[at + cut:])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30)


def _load_log(tmp_path, data: bytes):
    p = tmp_path / "log.json"
    p.write_bytes(data)
    try:
        runlog.load(p)
    except MacprofError as exc:
        assert "\n" not in str(exc)


@SETTINGS
@given(JSON)
def test_runlog_random_json(tmp_path, value):
    _load_log(tmp_path, json.dumps(value).encode())


@SETTINGS
@given(st.sampled_from(["schema_version", "models", "machine", "complete", "definitions"]), JSON)
def test_runlog_fields_replaced(tmp_path, key, value):
    data = json.loads((FIXTURES / "runlogs" / "tiny-a.json").read_text())
    data[key] = value
    _load_log(tmp_path, json.dumps(data).encode())


@SETTINGS
@given(st.integers(0, 200_000), st.binary(max_size=8))
def test_runlog_corrupted_bytes(tmp_path, at, junk):
    raw = (FIXTURES / "runlogs" / "tiny-b.json").read_bytes()
    _load_log(tmp_path, raw[:at] + junk + raw[at + len(junk):])


def test_runlog_deeply_nested(tmp_path):
    _load_log(tmp_path, b"[" * 100_000 + b"]" * 100_000)
    _load_log(tmp_path, b'{"schema_version": 2, "models": ' + b"[" * 5000 + b"]" * 5000 + b"}")


def test_runlog_huge_numbers(tmp_path):
    data = json.loads((FIXTURES / "runlogs" / "tiny-a.json").read_text())
    data["models"][0]["phases"]["warm"]["summary"]["decode_tok_s"]["median"] = 1e308
    data["models"][0]["identity"]["total_bytes"] = 10**40
    p = tmp_path / "huge.json"
    p.write_text(json.dumps(data))
    from click.testing import CliRunner

    from macprof.cli import main

    r = CliRunner().invoke(main, ["show", str(p)])
    assert r.exit_code in (0, 2) and "Traceback" not in r.output


@SETTINGS
@given(st.sampled_from(["tiny-telemetry.json", "tiny-a.json"]),
       st.lists(st.tuples(st.integers(0, 10_000), JSON), min_size=1, max_size=3))
def test_the_fast_validator_accepts_nothing_jsonschema_rejects(name, changes):
    """runlog.validate takes jsonschema-rs's "valid" without asking jsonschema: on logs with
    values replaced anywhere, its "valid" must always be jsonschema's too."""
    data = json.loads((FIXTURES / "runlogs" / name).read_text())
    for at, value in changes:
        _replace_somewhere(data, at, value)
    if runlog._fast_validator().is_valid(data):
        assert runlog._validator().is_valid(data)


def _replace_somewhere(data, at: int, value) -> None:
    """Replaces the value at place ``at`` (modulo their number) of a walk over every container."""
    places = []

    def walk(node):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            places.append((node, key))
            walk(child)

    walk(data)
    node, key = places[at % len(places)]
    node[key] = value
