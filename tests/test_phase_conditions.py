"""The thermal state at each phase's boundaries (macOS: NSProcessInfo.thermalState, journaled
by the worker at phase_start / phase_end) in the phase records of the run log, and `compare`
flagging phases measured under different thermal states. Linux workers journal none, so a
fake-engine run's journal gets the macOS fields added through the typed events."""

import pytest
from click.testing import CliRunner

from macprof.analyse.build import build
from macprof.analyse.compare import compare, rows_from
from macprof.cli import main
from macprof.model import events as ev
from macprof.render.detail import render_detail
from macprof.store import runlog
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def journal(fake_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("thermal") / "run.json"
    r = CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b",
                                  "--phases", "warm,prefix,depth", "--depth", "0,16", "--prompt-tokens", "32",
                                  "--prefix-tokens", "24", "--gen-tokens", "4", "--reps", "2", "--log", str(log)])
    assert r.exit_code == 0, r.output
    return runlog.read_journal(log.with_name(log.stem + ".journal.jsonl"))


def as_mac(events, states: dict[tuple[str, str], str]) -> list:
    """The journal as a macOS worker writes it: ``thermal_state`` on each phase boundary,
    ``states[(phase, "start" | "end")]`` (nominal where not given)."""
    out = []
    for e in events:
        if isinstance(e, (ev.PhaseStart, ev.PhaseEnd)):
            where = "start" if isinstance(e, ev.PhaseStart) else "end"
            e = e.replace(thermal_state=states.get((e.phase, where), "nominal"))
        out.append(e)
    return out


def test_linux_logs_keep_their_layout(journal):
    m = build(journal).models[0]
    for phase in (m.phases.warm, m.phases.prefix, m.phases.depth):
        assert not phase.has("thermal_state_start") and not phase.has("thermal_state_end")
    assert "thermal state (NSProcessInfo)" not in render_detail(build(journal))


def test_each_phase_records_its_boundary_thermal_states(journal, tmp_path):
    log = build(as_mac(journal, {("warm", "end"): "fair", ("depth", "start"): "serious"}))
    ph = log.models[0].phases
    assert (ph.warm.thermal_state_start, ph.warm.thermal_state_end) == ("nominal", "fair")
    assert (ph.prefix.thermal_state_start, ph.prefix.thermal_state_end) == ("nominal", "nominal")
    assert (ph.depth.thermal_state_start, ph.depth.thermal_state_end) == ("serious", "nominal")
    runlog.save(log, tmp_path / "mac.json")
    again = runlog.load(tmp_path / "mac.json")  # the schema knows the fields
    assert again.models[0].phases.warm.thermal_state_end == "fair"
    assert "warm thermal state (NSProcessInfo): nominal at the start, fair at the end" in render_detail(again)


def test_compare_flags_phases_under_different_thermal_states(journal):
    cool = build(as_mac(journal, {}))
    hot = build(as_mac(journal, {("warm", "end"): "serious"}))
    flags = compare(rows_from(cool, "cool") + rows_from(hot, "hot"))["rows"][1]["not_comparable"]
    assert "thermal state during the phase" in flags
    assert compare(rows_from(cool, "a") + rows_from(cool, "b"))["rows"][1]["not_comparable"] == []
    # with --case, the sweep's own states: the warm phase's heat does not flag a depth case
    case = compare(rows_from(cool, "cool", ("depth", "d16")) + rows_from(hot, "hot", ("depth", "d16")))
    assert case["rows"][1]["not_comparable"] == []
    hot_depth = build(as_mac(journal, {("depth", "end"): "critical"}))
    case = compare(rows_from(cool, "cool", ("depth", "d16")) + rows_from(hot_depth, "hot", ("depth", "d16")))
    assert "thermal state during the phase" in case["rows"][1]["not_comparable"]
    # a log that read no state (Linux, older logs) says nothing either way
    linux = build(journal)
    mixed = compare(rows_from(linux, "linux") + rows_from(hot, "hot"))["rows"][1]["not_comparable"]
    assert "thermal state during the phase" not in mixed
    old = runlog.load(FIXTURES / "runlogs" / "tiny-a.json")
    assert all("thermal state during" not in " ".join(r["not_comparable"])
               for r in compare(rows_from(old, "old") + rows_from(hot, "hot"))["rows"])
