"""What keeps compare and plot of many logs fast (issue #22, benchmarks/many_logs.py) without
changing what they read: a log's JSON parsed once, and json_refusal's full walk skipped only
where it could not refuse. Speed itself is measured by the benchmark, never here."""

import importlib.util
import json
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from macprof.errors import MacprofError
from macprof.model.records import MAX_DEPTH, json_refusal
from macprof.store import runlog
from macprof.store.logset import load_logs
from tests.conftest import FIXTURES

LOGS = FIXTURES / "runlogs"
OTHER = LOGS / "other-machine-demo-small.json"
ROOT = FIXTURES.parent.parent


def _nested(depth: int, kind: str = "list"):
    value: object = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


# -- the refusal's shortcut ------------------------------------------------------------------
@pytest.mark.parametrize("data", [
    _nested(MAX_DEPTH), _nested(MAX_DEPTH + 1), _nested(MAX_DEPTH, "dict"), _nested(MAX_DEPTH + 1, "dict"),
    [_nested(MAX_DEPTH - 1), 2], {"a": [1, {"b": _nested(MAX_DEPTH - 2, "dict")}]},
    2**63 - 1, 2**63, -(2**63), -(2**63) - 1, [1, 2**64], {"t": [0.5, 10**19]}, {"s": "1234567890123456789012"},
    [0.00339029200000000725, 1.2345678901234567e-30, 1e300], 12345678901234567890.5, [True, None, "x", 3.0],
])
def test_shortcut_never_passes_what_json_refusal_refuses(data):
    text = json.dumps(data)
    fast = runlog._cannot_be_refused(text, json.loads(text))
    assert not fast or json_refusal(json.loads(text)) is None
    # and it takes the shortcut where nothing long or deep is there at all
    if json_refusal(json.loads(text)) is None and "0" * 19 not in "".join("0" if c.isdigit() else " " for c in text):
        assert fast


_json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=5)
    | st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
    max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.integers(0, 70))
def test_shortcut_agrees_with_json_refusal_on_any_json(value, depth):
    data = {"v": value, "deep": _nested(depth)}
    text = json.dumps(data)
    if runlog._cannot_be_refused(text, json.loads(text)):
        assert json_refusal(json.loads(text)) is None


def test_the_recorded_logs_take_the_shortcut_and_a_refused_log_keeps_its_message(tmp_path):
    for path in LOGS.glob("*.json"):
        text = path.read_text()
        try:
            data = json.loads(text)
        except ValueError:
            continue  # truncated.json
        assert runlog._cannot_be_refused(text, data) == (json_refusal(data) is None), path
    big = json.loads(OTHER.read_text())
    big["models"][0]["settings"]["reps"] = 2**64
    bad = tmp_path / "big.json"
    bad.write_text(json.dumps(big))
    with pytest.raises(MacprofError) as exc:
        runlog.load(bad)
    assert str(exc.value) == f"{bad}: {json_refusal(big)}: not a macprof run log"


# -- one parse per file ------------------------------------------------------------------------
def test_a_folder_and_named_files_are_each_parsed_once_into_the_same_logs(tmp_path, monkeypatch):
    for name in ("tiny-a", "tiny-b"):
        shutil.copy(LOGS / f"{name}.json", tmp_path / f"{name}.json")
    named = tmp_path / "named.json"
    shutil.copy(OTHER, named)
    runlog._CACHE.clear()
    texts = {p.read_text() for p in tmp_path.glob("*.json")}
    calls = []
    real = json.loads
    monkeypatch.setattr(json, "loads", lambda text, *a, **k: calls.append(text in texts) or real(text, *a, **k))
    logs, skipped = load_logs([tmp_path / "tiny-a.json", named, tmp_path])
    monkeypatch.undo()
    # tiny-a and named.json named and found in the folder: kept once each. Five files read (two named, three
    # in the folder), each parsed once: the JSON that says it is a log is the one it is made from
    assert [name for name, _ in logs] == ["tiny-a", "named", "tiny-b"] and calls.count(True) == 5
    assert len(skipped) == 2 and all("the same run as" in s for s in skipped)  # the folder's tiny-a and named
    for name, log in logs:
        assert log == runlog._typed("x", "", json.loads((tmp_path / f"{name}.json").read_text()))


def test_parse_of_text_with_its_json_is_load():
    text = OTHER.read_text()
    runlog._CACHE.clear()
    given_json = runlog.parse("a", text, json.loads(text))
    assert given_json == runlog.load(OTHER) and runlog.parse("a", text) is given_json  # the cache


# -- the benchmark's logs ----------------------------------------------------------------------
def test_the_benchmark_writes_distinct_runs_of_the_real_log(tmp_path):
    spec = importlib.util.spec_from_file_location("many_logs", ROOT / "benchmarks" / "many_logs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    paths = bench.write_logs(OTHER, tmp_path, 3)
    logs, skipped = load_logs([tmp_path])
    assert len(logs) == 3 and not skipped  # three runs to logset, none merged
    assert len({log.started_utc for _, log in logs}) == 3
    decode = [[r.decode_tok_s for m in log.models for r in m.phases.warm.requests] for _, log in logs]
    assert decode[0] != decode[1] and len(decode[0]) == len(decode[1])
    assert [len(log.models) for _, log in logs] == [6, 6, 6] and len(paths) == 3
