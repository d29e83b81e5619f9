"""Telemetry sources: Linux sysfs on a fake tree (RAPL, thermal zones, power_supply) and the
macOS paths through fakes of macmon-lib and notify(3) built from their documented APIs, and
the recorded `pmset -g batt`. Nothing here needs a Mac or root."""

import ctypes
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from macprof.collect import power_linux, power_macos, telemetry
from tests.conftest import FIXTURES


# -- Linux: a fake sysfs ---------------------------------------------------------------------
def _zone(root: Path, name: str, label: str, uj: int, max_uj: int | None = 262143328850) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    if max_uj is not None:
        (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_reads_each_zone_and_turns_counters_into_watts(tmp_path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    _zone(tmp_path, "intel-rapl:0:0", "core", 500_000)
    _zone(tmp_path, "intel-rapl:0:1", "dram", 100_000)
    rapl, why = power_linux.open_rapl(tmp_path)
    assert why is None and [d.name for d in rapl.domains] == ["package-0", "core", "dram"]
    before = rapl.read()
    (pkg / "energy_uj").write_text("21000000\n")  # 20 J later
    after = rapl.read()
    assert rapl.watts(before, after, 2.0)["package-0"] == pytest.approx(10.0)
    assert rapl.watts(before, after, 2.0)["dram"] == 0.0


def test_rapl_counter_wraps_at_its_range():
    assert power_linux.counter_delta(900, 100, 1000) == 200  # 900 -> 1000 (wrap) -> 100
    assert power_linux.counter_delta(100, 900, 1000) == 800
    assert power_linux.counter_delta(900, 100, None) is None  # went back, range unknown: not zero


def test_rapl_absent_or_root_only_says_why(tmp_path, monkeypatch):
    assert power_linux.open_rapl(tmp_path / "none") == (None, f"no RAPL: {tmp_path / 'none'} absent")
    _zone(tmp_path, "intel-rapl:0", "package-0", 1)
    real = Path.read_text

    def denied(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", denied)  # root reads anything: deny as a user's kernel would
    rapl, why = power_linux.open_rapl(tmp_path)
    assert rapl is None and why == f"no RAPL: {power_linux.ROOT_ONLY}" and "CVE-2020-8694" in why


def test_thermal_zones_and_power_supply(tmp_path):
    for k, (kind, milli) in enumerate((("x86_pkg_temp", 51000), ("acpitz", 27800))):
        z = tmp_path / "thermal" / f"thermal_zone{k}"
        z.mkdir(parents=True)
        (z / "type").write_text(kind + "\n")
        (z / "temp").write_text(f"{milli}\n")
    zones, why = power_linux.thermal_zones(tmp_path / "thermal")
    assert why is None and power_linux.read_temps(zones) == {"x86_pkg_temp": 51.0, "acpitz": 27.8}
    assert power_linux.thermal_zones(tmp_path / "nothing")[1].endswith("absent")
    supply = tmp_path / "supply"
    for name, kind, online in (("AC", "Mains", "0"), ("BAT0", "Battery", None)):
        (supply / name).mkdir(parents=True)
        (supply / name / "type").write_text(kind + "\n")
        if online is not None:
            (supply / name / "online").write_text(online + "\n")
    assert power_linux.power_source(supply) == ("battery", None)
    (supply / "AC" / "online").write_text("1\n")
    assert power_linux.power_source(supply) == ("ac", None)
    (supply / "AC" / "type").write_text("USB\n")
    assert "no mains supply" in power_linux.power_source(supply)[1]


def test_linux_source_samples_total_power_and_temperatures(tmp_path):
    pkg = _zone(tmp_path / "powercap", "intel-rapl:0", "package-0", 0)
    dram = _zone(tmp_path / "powercap", "intel-rapl:0:1", "dram", 0)
    z = tmp_path / "thermal" / "thermal_zone0"
    z.mkdir(parents=True)
    (z / "type").write_text("x86_pkg_temp\n")
    (z / "temp").write_text("60000\n")
    src = telemetry.LinuxSource(tmp_path / "powercap", tmp_path / "thermal", tmp_path / "supply")
    assert src.has_power and src.total == "total" and src.name.endswith("(total = package-0 + dram)")
    (pkg / "energy_uj").write_text("3000000\n")
    (dram / "energy_uj").write_text("1000000\n")
    s = src.sample()
    seconds = (s["t1"] - s["t0"]) / 1e9
    assert s["watts"]["total"] == pytest.approx(4.0 / seconds) and s["temps_c"] == {"x86_pkg_temp": 60.0}
    assert "thermal_pressure" in src.unavailable and src.boundary()["power_source"] is None
    assert src.unavailable["power_source"].endswith("absent")


def test_this_machine_gives_reasons_not_figures():
    """Whatever this OS offers, every figure it lacks is named with a reason."""
    src = telemetry.open_source()
    s = src.sample()
    assert s["t1"] >= s["t0"]
    if not src.has_power:
        assert src.unavailable["power"]


def test_an_os_without_a_source_records_why():
    src = telemetry.open_source("freebsd14")
    assert not src.has_power and src.unavailable["power"] == "no telemetry source on freebsd14"


# -- macOS: fakes of the libraries' documented APIs ---------------------------------------------
@dataclass
class _Power:  # macmon.PowerMetrics, watts; the values of macmon's own FFI round-trip test
    package: float = 0.3
    cpu: float = 0.1
    gpu: float = 0.2
    ram: float = 0.01
    gpu_ram: float = 0.02
    ane: float = 0.03
    board: float = 4.0
    battery: float = 1.0
    dc_in: float = 5.0


@dataclass
class _Gpu:
    name: str = "GPUPH"
    units: int = 20
    frequency_mhz: int = 461
    usage: float = 0.02


@dataclass
class _Temp:
    cpu_average: float = 43.0
    gpu_average: float = 0.0  # macmon's zero_div when a chip exposes no GPU sensor


@dataclass
class _Metrics:
    power: _Power = field(default_factory=_Power)
    gpu_usage: list = field(default_factory=lambda: [_Gpu()])
    temperature: _Temp = field(default_factory=_Temp)
    cpu_usage: list = field(default_factory=list)


class FakeMacmon:
    """The module macmon: Sampler().metrics() -> Metrics; close()."""

    class Sampler:
        def metrics(self):
            return _Metrics()

        def close(self):
            pass


class BrokenMacmon:
    class InitializationFailedError(RuntimeError):
        pass

    class Sampler:
        def __init__(self):
            raise BrokenMacmon.InitializationFailedError("Failed to create IOReport subscription")


class FakeNotify:
    """libSystem's notify_register_check / notify_get_state, holding one pressure level."""

    def __init__(self, level: int = 0, status: int = 0):
        self.level, self.status, self.names = level, status, []

    def notify_register_check(self, name, token):
        self.names.append(name)
        return self.status

    def notify_get_state(self, token, state):
        ctypes.cast(state, ctypes.POINTER(ctypes.c_uint64)).contents.value = self.level
        return 0


def test_macmon_sample_maps_to_power_temperature_and_gpu():
    src = telemetry.MacSource(FakeMacmon, FakeNotify(level=2))
    assert src.has_power and src.total == "package" and src.name.startswith("macmon-lib")
    s = src.sample()
    assert s["watts"] == pytest.approx({"package": 0.3, "cpu": 0.1, "gpu": 0.2, "ane": 0.03, "dram": 0.01,
                                        "gpu_sram": 0.02})
    assert s["temps_c"] == {"cpu_average": 43.0}  # 0 is macmon's "no sensor": unknown, not 0 °C
    assert (s["gpu_usage"], s["gpu_mhz"], s["thermal_pressure"]) == (pytest.approx(0.02), 461, "heavy")


def test_macmon_that_cannot_start_is_recorded_with_its_message():
    src = telemetry.MacSource(BrokenMacmon, FakeNotify())
    assert not src.has_power
    assert src.unavailable["power"] == ("macmon-lib could not start: InitializationFailedError: "
                                        "Failed to create IOReport subscription")
    assert src.sample()["thermal_pressure"] == "nominal"


def test_thermal_pressure_levels_are_the_headers():
    fake = FakeNotify(level=4)
    pressure = power_macos.ThermalPressure(fake)
    assert fake.names == [b"com.apple.system.thermalpressurelevel"] and pressure.read() == "sleeping"
    assert [power_macos.PRESSURE_LEVELS[k] for k in range(5)] == ["nominal", "moderate", "heavy", "trapping", "sleeping"]
    refused = power_macos.ThermalPressure(FakeNotify(status=1))
    assert refused.read() is None and "returned 1" in refused.reason


def test_power_source_from_recorded_pmset(monkeypatch):
    text = (FIXTURES / "macos" / "m1.pmset_batt.txt").read_text()
    monkeypatch.setattr(power_macos, "run_command", lambda cmd: text if cmd == ["pmset", "-g", "batt"] else None)
    assert power_macos.power_source() == ("ac", None)
    monkeypatch.setattr(power_macos, "run_command", lambda cmd: text.replace("AC Power", "Battery Power"))
    assert power_macos.power_source() == ("battery", None)
    monkeypatch.setattr(power_macos, "run_command", lambda cmd: None)
    assert power_macos.power_source() == (None, "pmset -g batt gave nothing")


def test_on_darwin_the_mac_source_is_opened(monkeypatch):
    monkeypatch.setitem(sys.modules, "macmon", FakeMacmon)
    real = power_macos.ThermalPressure
    monkeypatch.setattr(power_macos, "ThermalPressure", lambda lib=None: real(FakeNotify()))
    src = telemetry.open_source("darwin")
    assert isinstance(src, telemetry.MacSource) and src.has_power
    monkeypatch.setitem(sys.modules, "macmon", None)  # not installed (a Mac that is not arm64)
    assert "macmon-lib is not installed" in telemetry.open_source("darwin").unavailable["power"]
