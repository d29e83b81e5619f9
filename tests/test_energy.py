"""Energy per token, the idle baseline and the throttling check (analyse/energy.py) on
synthetic samples; then the whole run path with a fake telemetry source (recorded-shape
samples, as macmon gives them) and the summary, compare and plot on its log."""

import json

import pytest
from click.testing import CliRunner

from macprof.analyse import energy as power
from macprof.analyse.compare import compare, rows_from
from macprof.cli import main
from macprof.collect import telemetry
from macprof.model.phases import Request
from macprof.model.telemetry import TelemetryRaw, TelemetrySample
from macprof.render.energy import energy_lines
from macprof.render.summary import render_summary, warnings
from macprof.store import runlog
from tests.conftest import FIXTURES

S = 1_000_000_000  # ns


def _samples(watts: list[float], start: int = 0, step: int = S // 4, temps: list[float] | None = None,
             pressure: list[str] | None = None) -> tuple[TelemetrySample, ...]:
    return tuple(TelemetrySample(t0=start + k * step, t1=start + (k + 1) * step, watts={"package": w},
                                 temps_c={"cpu_average": temps[k]} if temps else None,
                                 thermal_pressure=pressure[k] if pressure else None) for k, w in enumerate(watts))


def _raw(samples, t_idle=0, t_start=S, t_end=None, **kw) -> TelemetryRaw:
    return TelemetryRaw(phase="warm", source="fake", total_domain="package", domains=("package",), period_s=0.25,
                        t_idle_start=t_idle, t_start=t_start, t_end=t_end or samples[-1].t1, samples=samples, **kw)


def _req(t0: int, t1: int, tn: int, n: int = 5, prompt: int = 100, decode: float | None = None) -> Request:
    times = tuple(t1 + (tn - t1) * k // (n - 1) for k in range(n))
    return Request(index=0, kind="measured", status="ok", t0=t0, t_tokenized=t0, token_times=times,
                   prompt_tokens=prompt, computed_prompt_tokens=prompt, n_tokens=n, decode_tok_s=decode)


def test_energy_is_power_times_overlap_less_the_idle_baseline():
    # 1 s idle at 2 W, then 20 W for 2 s: a request prefills 0.5 s and decodes 1 s
    raw = _raw(_samples([2.0] * 4 + [20.0] * 8))
    base = power.baseline(raw)
    assert (base.watts, base.samples, base.window_s) == (2.0, 4, 1.0)
    e = power.energy([_req(S, S + S // 2, 2 * S + S // 2)], raw, base)
    assert e.prefill_gross_j == pytest.approx(10.0) and e.decode_gross_j == pytest.approx(20.0)
    assert e.prefill_j == pytest.approx(9.0) and e.decode_j == pytest.approx(18.0)  # less 2 W x the window
    assert e.prefill_j_per_token == pytest.approx(9.0 / 100) and e.decode_j_per_token == pytest.approx(18.0 / 4)
    assert e.avg_w == pytest.approx(20.0) and e.reason is None and e.note is None


def test_windows_shorter_than_the_period_are_said_so_and_still_summed():
    raw = _raw(_samples([2.0] * 4 + [10.0] * 4))
    e = power.energy([_req(S, S + S // 100, S + S // 10)], raw, power.baseline(raw))
    assert e.short_windows == 2 and "not resolved" in e.note
    assert e.decode_gross_j == pytest.approx(10.0 * 0.09)


def test_unknown_power_or_baseline_gives_reasons_not_zeros():
    raw = TelemetryRaw(phase="warm", unavailable={"power": "no RAPL: /sys/class/powercap absent"})
    assert power.energy([_req(0, 1, 2)], raw, power.baseline(raw)).reason == "no RAPL: /sys/class/powercap absent"
    no_idle = _raw(_samples([5.0] * 8), t_idle=None)
    base = power.baseline(no_idle)
    e = power.energy([_req(S, S + S // 2, 2 * S)], no_idle, base)
    assert base.watts is None and e.decode_j is None and e.decode_gross_j == pytest.approx(2.5)  # 5 W x 0.5 s
    assert e.reason.startswith("idle baseline unknown")
    gap = _raw(_samples([5.0] * 4))  # samples end at 1 s: a request after it is not covered
    assert "do not cover" in power.energy([_req(2 * S, 3 * S, 4 * S)], gap, power.baseline(gap)).reason


def test_throttling_needs_a_falling_decode_and_a_rising_temperature_or_pressure():
    reqs = [_req(k * S, k * S + 1, k * S + 2, decode=d) for k, d in enumerate([50, 50, 49, 45, 42, 40])]
    hot = _raw(_samples([10.0] * 8, temps=[60, 61, 63, 66, 70, 74, 77, 80]), t_idle=None, t_start=0)
    t = power.throttle(reqs, hot)
    assert t.throttled is True and t.decode_drop == pytest.approx(1 - 41 / 50)  # thirds: median 50, then 41 and "temperature rose" in t.reason
    cool = _raw(_samples([10.0] * 8, temps=[60] * 8), t_idle=None, t_start=0)
    assert power.throttle(reqs, cool).throttled is False
    pressed = _raw(_samples([10.0] * 8), t_idle=None, t_start=0, thermal_pressure_start="nominal",
                   thermal_pressure_end="heavy")
    assert "from nominal to heavy" in power.throttle(reqs, pressed).reason
    blind = _raw(_samples([10.0] * 8), t_idle=None, t_start=0)
    assert power.throttle(reqs, blind).throttled is None
    assert power.throttle(reqs[:3], hot).reason.startswith("fewer than 4")


# -- the run path with a fake source ------------------------------------------------------------
class ConstantSource(telemetry.Source):
    """A source that reads 12 W on the package, 50 °C and nominal pressure, as a Mac would."""

    name, total, domains = "fake source", "package", ("package", "cpu")

    def read(self, seconds: float) -> dict:
        return {"watts": {"package": 12.0, "cpu": 4.0}, "temps_c": {"cpu_average": 50.0},
                "thermal_pressure": "nominal", "gpu_usage": 0.5, "gpu_mhz": 1000}

    def boundary(self) -> dict:
        return {"power_source": "ac", "thermal_pressure": "nominal"}


@pytest.fixture(scope="module")
def energy_log(fake_dir, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(telemetry, "open_source", lambda platform=None: ConstantSource())
    mp.setattr(telemetry, "IDLE_BASELINE_S", 0.6)  # enough for two whole samples at 0.25 s
    log = tmp_path_factory.mktemp("energy") / "run.json"
    try:
        r = CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b",
                                      "--phases", "warm", "--prompt-tokens", "32", "--gen-tokens", "64", "--reps", "4",
                                      "--log", str(log)])
    finally:
        mp.undo()
    assert r.exit_code == 0, r.output
    return log


def test_a_run_journals_telemetry_and_the_log_recomputes_energy_from_it(energy_log):
    log = runlog.load(energy_log)
    tel = log.models[0].phases.warm.telemetry
    assert tel.source == "fake source" and tel.power_source_start == tel.power_source_end == "ac"
    assert tel.t_idle_start < tel.t_start < tel.t_end and tel.baseline.watts == pytest.approx(12.0)
    e = tel.energy
    assert e.requests == 4 and e.decode_tokens == 4 * 63 and e.prefill_tokens == 4 * 32
    assert e.decode_gross_j == pytest.approx(12.0 * e.decode_s) and e.avg_w == pytest.approx(12.0)
    assert e.decode_j == pytest.approx(0.0, abs=1e-9)  # constant power: nothing above the idle baseline
    events = [json.loads(line) for line in energy_log.with_name(energy_log.stem + ".journal.jsonl").open()]
    journaled = [ev for ev in events if ev["event"] == "telemetry"]
    assert len(journaled) == 1 and len(journaled[0]["samples"]) == len(tel.samples) >= 2
    assert tel.throttle.throttled is False and tel.thermal_pressure_max == "nominal"


def test_summary_shows_energy_and_compare_flags_other_conditions(energy_log, tmp_path):
    log = runlog.load(energy_log)
    text = render_summary(log)
    assert "decode J/tok" in text and "Energy (telemetry):" in text and "idle baseline 12.0 W subtracted" in text
    data = json.loads(energy_log.read_text())
    tel = data["models"][0]["phases"]["warm"]["telemetry"]
    tel["thermal_pressure_max"], tel["power_source_end"] = "heavy", "battery"
    tel["throttle"] = {"throttled": True, "reason": "decode fell 20% while temperature rose 9.0 °C"}
    other = tmp_path / "hot.json"
    other.write_text(json.dumps(data))
    hot = runlog.load(other)
    assert "fake-b: warm looks throttled: decode fell 20% while temperature rose 9.0 °C" in warnings(hot)
    result = compare(rows_from(log, "a") + rows_from(hot, "b"))
    assert {"thermal pressure during the phase", "power source during the phase"} <= set(result["rows"][1]["not_comparable"])
    old = runlog.load(FIXTURES / "runlogs" / "tiny-a.json")  # no telemetry: nothing to flag on it
    mixed = compare(rows_from(log, "a") + rows_from(old, "old"))
    assert all("thermal pressure" not in " ".join(r["not_comparable"]) for r in mixed["rows"])
    out = CliRunner().invoke(main, ["compare", str(energy_log), str(other), "--format", "json"])
    assert out.exit_code == 0 and "decode_j_per_token" in out.output


def test_plot_draws_the_energy_panel(energy_log, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from macprof.render import plot

    drawn, real = [], plot._energy_bars
    monkeypatch.setattr(plot, "_energy_bars", lambda ax, rows, many: drawn.append(rows) or real(ax, rows, many))
    out = CliRunner().invoke(main, ["plot", str(energy_log), "--output", str(tmp_path / "p.png")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "p.png").stat().st_size > 0 and len(drawn) == 1


def test_a_worker_that_dies_mid_phase_keeps_its_samples(fake_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry, "open_source", lambda platform=None: ConstantSource())
    monkeypatch.setattr(telemetry, "IDLE_BASELINE_S", 0.6)
    monkeypatch.setenv("MACPROF_TEST_FAULT", json.dumps({"model": "fake-b", "kind": "segfault", "after_requests": 3}))
    log = tmp_path / "crash.json"
    CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--phases", "warm",
                              "--prompt-tokens", "32", "--gen-tokens", "64", "--reps", "4", "--log", str(log)])
    warm = runlog.load(log).models[0].phases.warm
    assert warm.failures and warm.telemetry is not None and warm.telemetry.t_end is None
    assert warm.telemetry.energy.requests == 2 and warm.telemetry.energy.decode_gross_j > 0


def test_the_energy_lines_name_every_phase_whose_record_holds_telemetry(fake_dir, tmp_path, monkeypatch):
    """The summary's energy lines (and its throttling warnings, from the same list) cover each
    phase whose record holds telemetry, read from the log's JSON: a sweep's and bench's too."""
    monkeypatch.setattr(telemetry, "open_source", lambda platform=None: ConstantSource())
    monkeypatch.setattr(telemetry, "IDLE_BASELINE_S", 0.6)  # two whole samples at 0.25 s
    log = tmp_path / "run.json"
    r = CliRunner().invoke(main, ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--phases",
                                  "warm,depth,bench", "--prompt-tokens", "16", "--gen-tokens", "8", "--reps", "2",
                                  "--depth", "0", "--log", str(log)])
    assert r.exit_code == 0, r.output
    phases = json.loads(log.read_text())["models"][0]["phases"]
    held = [name for name, record in phases.items() if isinstance(record, dict) and record.get("telemetry")]
    assert held == ["warm", "depth", "bench"]
    lines = energy_lines(runlog.load(log))
    assert lines[0] == "Energy (telemetry):"
    assert [line.split(":")[0] for line in lines[1:]] == [f"fake-b {name}" for name in held]
