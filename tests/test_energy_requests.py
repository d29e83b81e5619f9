"""Energy per request (attributed by overlap; a window shorter than the sampling period is not
resolved) and a cold trial's energy from spawn to ready, on synthetic samples (pure functions);
then a fake-engine run with a constant-power source: cold trials, per-request figures and
`show`'s energy lines."""

import pytest
from click.testing import CliRunner

from macprof.analyse import energy as power
from macprof.cli import main
from macprof.collect import telemetry
from macprof.model.telemetry import Baseline, TelemetryRaw
from macprof.render.detail import render_detail
from macprof.store import runlog
from tests.test_energy import S, ConstantSource, _raw, _req, _samples

Q = S // 4  # the sampling period: 0.25 s


def test_per_request_energy_where_the_sampling_resolves_it():
    # 1 s idle at 4 W (the baseline), then 10 W from 1 s to 6 s
    raw = _raw(_samples([4.0] * 4 + [10.0] * 20))
    base = power.baseline(raw)
    long = _req(S, S + 2 * Q, 3 * S + 2 * Q)  # prefill 0.5 s, decode 2 s, 5 tokens
    short = _req(4 * S, 4 * S + Q // 5, 4 * S + 4 * Q // 5)  # 0.2 s in all: under one period
    quick_prefill = _req(5 * S, 5 * S + Q // 2, 6 * S)  # prefill 0.125 s, decode 0.875 s
    a, b, c = power.per_request([long, short, quick_prefill], raw, base)
    # 10 W x 2.5 s = 25 J; net of 4 W x 2.5 s = 15 J; prefill (10 - 4) x 0.5 = 3 J, decode 6 x 2 = 12 J
    assert (a.gross_j, a.net_j, a.prefill_j, a.decode_j) == pytest.approx((25.0, 15.0, 3.0, 12.0))
    assert a.decode_j_per_token == pytest.approx(12.0 / 4) and a.reason is None and a.seconds == pytest.approx(2.5)
    assert b.gross_j is None and b.decode_j_per_token is None and "shorter than the sampling period" in b.reason
    assert c.prefill_j is None and c.decode_j == pytest.approx(6.0 * 0.875) and "prefill window" in c.reason
    # without a baseline: gross only, and why; without power: nothing
    blind = power.per_request([long], raw, Baseline(reason="no idle wait"))[0]
    assert blind.gross_j == pytest.approx(25.0) and blind.net_j is None and "no idle wait" in blind.reason
    assert power.per_request([long], TelemetryRaw(phase="warm"), base) == ()


def test_cold_trial_energy_from_spawn_to_ready():
    raw = _raw(_samples([10.0] * 12), t_idle=None, t_start=None)
    windows = [(0, 2 * Q), (3 * Q, 2 * S)]  # spawn -> first line 0.5 s; import -> ready 1.25 s (harness left out)
    e = power.cold_energy(raw, windows, Baseline(watts=4.0), "warm")
    assert (e.gross_j, e.seconds, e.avg_w) == pytest.approx((17.5, 1.75, 10.0))
    assert e.net_j == pytest.approx(17.5 - 4.0 * 1.75) and e.baseline_from == "warm" and e.reason is None
    no_base = power.cold_energy(raw, windows, None, None)
    assert no_base.gross_j == pytest.approx(17.5) and no_base.net_j is None and "no idle baseline" in no_base.reason
    assert power.cold_energy(raw, [(0, 2 * Q), (3 * Q, None)], None, None).reason.startswith("the trial's start-up")
    assert "do not cover" in power.cold_energy(raw, [(0, 5 * S)], None, None).reason
    linux = TelemetryRaw(phase="cold", unavailable={"power": "no RAPL: /sys/class/powercap absent"})
    assert power.cold_energy(linux, windows, None, None).reason == "no RAPL: /sys/class/powercap absent"
    assert power.cold_energy(None, windows, None, None).reason.startswith("no telemetry")


@pytest.fixture(scope="module")
def cold_log(fake_dir, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(telemetry, "open_source", lambda platform=None: ConstantSource())
    mp.setattr(telemetry, "IDLE_BASELINE_S", 0.6)  # two whole samples at 0.25 s
    log = tmp_path_factory.mktemp("cold-energy") / "run.json"
    try:
        r = CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b",
                                      "--phases", "cold,warm", "--cold-trials", "2", "--prompt-tokens", "32",
                                      "--gen-tokens", "64", "--reps", "4", "--log", str(log)])
    finally:
        mp.undo()
    assert r.exit_code == 0, r.output
    return runlog.load(log)


def test_a_fake_run_gives_cold_trials_and_requests_their_energy(cold_log):
    m = cold_log.models[0]
    warm = m.phases.warm.telemetry
    for t in m.phases.cold.trials:
        e = t.energy
        # the sampler ran from before the spawn: 12 W over exactly the seconds ready_s counts
        assert e.seconds == pytest.approx(t.ready_s) and e.gross_j == pytest.approx(12.0 * t.ready_s)
        assert e.baseline_from == "warm" and e.baseline_w == pytest.approx(warm.baseline.watts)
        assert e.net_j == pytest.approx(0.0, abs=1e-9)  # constant power: nothing above idle
    per = warm.per_request
    assert [r.index for r in per] == [r.index for r in m.phases.warm.requests if r.kind == "measured"]
    for r in per:  # resolved (constant power: nothing above idle), or why not
        assert (r.decode_j_per_token == pytest.approx(0.0, abs=1e-9)) if r.reason is None else \
            "shorter than the sampling period" in r.reason
    text = render_detail(cold_log)
    assert "energy spawn to ready" in text and "above the warm phase's idle baseline" in text
    assert "warm energy: prefill" in text


def test_show_says_why_where_energy_is_unknown(fake_dir, tmp_path):
    log = tmp_path / "linux.json"  # this VM's own source: no RAPL readable, so every figure has its reason
    r = CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b",
                                  "--phases", "cold,warm", "--cold-trials", "1", "--prompt-tokens", "16",
                                  "--gen-tokens", "8", "--reps", "2", "--log", str(log)])
    assert r.exit_code == 0, r.output
    built = runlog.load(log)
    src = telemetry.open_source()
    readable = src.has_power
    src.close()
    if readable:  # a machine that reads power: nothing to say here
        pytest.skip("this machine reads power")
    (trial,) = built.models[0].phases.cold.trials
    assert trial.energy.gross_j is None and trial.energy.reason
    assert "energy spawn to ready unknown:" in render_detail(built) and "warm energy: unknown:" in render_detail(built)


# -- a recorded log with telemetry: a real llama.cpp run on a Linux VM (tests/fixtures/runlogs/make.sh) --
def test_the_recorded_telemetry_fixture_loads_with_its_reasons():
    """On the VM that recorded it nothing is readable: every telemetry figure is null with the
    reason, never a zero, and the summary, show and compare read the log as it is."""
    from macprof.analyse.compare import compare, rows_from
    from macprof.model.log import SCHEMA_VERSION
    from macprof.render.summary import render_summary
    from tests.conftest import FIXTURES

    log = runlog.load(FIXTURES / "runlogs" / "tiny-telemetry.json")
    assert log.schema_version == SCHEMA_VERSION and log.machine.os == "Linux"
    (m,) = log.models
    for phase in (m.phases.warm, m.phases.prefix, m.phases.depth):
        tel = phase.telemetry
        assert tel.source is None and tel.period_s == 0.25 and tel.samples  # sampled, but nothing readable
        assert {"power", "temperature", "thermal_pressure", "power_source"} <= set(tel.unavailable)
        assert tel.energy.decode_j_per_token is None and tel.energy.reason == tel.unavailable["power"]
        assert tel.baseline.watts is None and tel.per_request == ()
        assert not phase.has("thermal_state_start")  # a Linux worker reads no NSProcessInfo state
    assert all(c.energy.reason for c in m.phases.depth.cases)
    (trial,) = m.phases.cold.trials
    assert trial.energy.gross_j is None and trial.energy.reason == m.phases.warm.telemetry.unavailable["power"]
    assert "energy per token unknown for demo-tiny-q8_0 warm" in render_summary(log)
    assert "warm energy: unknown: no RAPL" in render_detail(log)
    old = runlog.load(FIXTURES / "runlogs" / "tiny-a.json")
    rows = compare(rows_from(old, "tiny-a") + rows_from(log, "tiny-telemetry"))["rows"]
    assert rows[-1]["energy_reason"] and rows[-1]["memory_figure"] == "RSS"
