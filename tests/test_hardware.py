"""Chip detection and the bandwidth table, on outputs recorded on real Macs (tests/fixtures/macos,
sources in its SOURCES.md): no Mac runs here."""

import pytest

from macprof.collect import chips, machine, macos
from macprof.model.chips import spec_bandwidth
from tests.conftest import FIXTURES

MAC = FIXTURES / "macos"


def read(name):
    return (MAC / name).read_text()


@pytest.mark.parametrize("fixture,chip,memory,perf,eff", [
    ("m5.sysctl.txt", "M5", 24 * 2**30, 0, 6),  # its 4 fast cores are Super ones, not Performance
    ("m5-max-18cpu.sysctl.assembled.txt", "M5 Max", None, 12, 0),  # 6 Super + 12 Performance
    ("m3-max-30c.sysctl.txt", "M3 Max", 36 * 2**30, 10, 4),
    ("m4-max-40c.sysctl.txt", "M4 Max", 64 * 2**30, 12, 4),
    ("m2.sysctl.txt", "M2", 16 * 2**30, 4, 4),
    ("m1-pro-8cpu.sysctl.txt", "M1 Pro", 16 * 2**30, 6, 2),
])
def test_sysctl(fixture, chip, memory, perf, eff):
    info = chips.parse_sysctl(read(fixture))
    assert (info["chip"], info["memory_bytes"], info["cores_performance"], info["cores_efficiency"]) == (chip, memory, perf, eff)


def test_m5_super_cores_are_named():
    levels = chips.parse_sysctl(read("m5.sysctl.txt"))["core_levels"]
    assert levels == [{"name": "Super", "cores": 4}, {"name": "Efficiency", "cores": 6}]


@pytest.mark.parametrize("fixture,kinds", [
    ("m5-max-18cpu.sysctl.assembled.txt", {"Super": 6, "Performance": 12}),
    ("m5.sysctl.txt", {"Super": 4, "Efficiency": 6}),
    ("m4-max-40c.sysctl.txt", {"Performance": 12, "Efficiency": 4}),
    ("m1-pro-8cpu.sysctl.txt", {"Performance": 6, "Efficiency": 2}),  # Monterey names no level
])
def test_cores_by_kind_in_macos_own_names(fixture, kinds):
    from macprof.collect.system import parse_sysctl

    info = chips.parse_sysctl(read(fixture))
    assert list(info["cores_by_kind"].items()) == list(kinds.items())  # the fastest level first
    assert sum(info["cores_by_kind"].values()) == int(parse_sysctl(read(fixture))["hw.physicalcpu"])
    assert chips.parse_sysctl(read("m1-bigsur.sysctl.txt"))["cores_by_kind"] is None  # no perflevel keys


def test_the_assembled_m5_max_layout_agrees_with_the_recorded_ioreg():
    """The M5 Max sysctl fixture is assembled (SOURCES.md); ioreg recorded on an M5 Max gives its
    two core counts as little-endian blobs: p-core-count 6, m-core-count 12."""
    import re

    blobs = dict(re.findall(r'"([pm])-core-count" = <([0-9a-f]+)>', read("m5-max-40c.ioreg_core_count.txt")))
    p, m = (int.from_bytes(bytes.fromhex(blobs[k]), "little") for k in "pm")
    assert chips.parse_sysctl(read("m5-max-18cpu.sysctl.assembled.txt"))["cores_by_kind"] == {"Super": p, "Performance": m}


def test_cores_by_kind_is_written_only_where_collected():
    from macprof.model.log import Machine

    info = chips.parse_sysctl(read("m5-max-18cpu.sysctl.assembled.txt"))
    mac = Machine.from_json({k: info[k] for k in ("chip", "cores_performance", "cores_efficiency", "cores_by_kind", "core_levels")})
    assert mac.to_json()["cores_by_kind"] == {"Super": 6, "Performance": 12}
    assert "cores_by_kind" not in Machine.from_json({"os": "Linux"}).to_json()  # Linux, and logs before it


def test_big_sur_m1_has_no_chip_name():
    assert chips.parse_sysctl(read("m1-bigsur.sysctl.txt"))["chip"] is None  # "Apple processor"


@pytest.mark.parametrize("fixture,chip,cores", [
    ("m5-max-40c.system_profiler_displays.txt", "M5 Max", 40),
    ("m2-max-38c.system_profiler_displays.txt", "M2 Max", 38),
    ("m1-pro-16c.system_profiler_displays.txt", "M1 Pro", 16),
    ("m1-7c.system_profiler_displays.json", "M1", 7),
])
def test_displays(fixture, chip, cores):
    assert chips.parse_displays(read(fixture)) == {"chip": chip, "gpu_cores": cores}


def test_ioreg_gpu_cores():
    assert chips.parse_ioreg_gpu_cores(read("m5-max-40c.ioreg_core_count.txt")) == 40


@pytest.mark.parametrize("fixture,chip,memory", [
    ("m4.system_profiler_hardware.txt", "M4", 16 * 2**30),  # a stray log line first
    ("m1-pro-10cpu.system_profiler_hardware.txt", "M1 Pro", 16 * 2**30),
])
def test_hardware_overview(fixture, chip, memory):
    info = chips.parse_hardware(read(fixture))
    assert (info["chip"], info["memory_bytes"]) == (chip, memory)


@pytest.mark.parametrize("chip,cores,gbs", [
    ("M3 Max", 30, 300.0), ("M3 Max", 40, 400.0), ("M4 Max", 32, 410.0), ("M4 Max", 40, 546.0),
    ("M5 Pro", 20, 307.0), ("M5 Pro", None, 307.0), ("M5 Max", 40, 614.0), ("M1", 7, 68.25),
    ("M2 Max", 38, 400.0), ("M2 Ultra", 76, 800.0), ("M3 Ultra", 80, 819.0), ("M4 Pro", 20, 273.0),
    ("M5", 10, 153.0), ("Apple M4", None, 120.0),
])
def test_published_bandwidth(chip, cores, gbs):
    assert spec_bandwidth(chip, cores)["gbs"] == gbs


@pytest.mark.parametrize("chip,cores", [("M4 Max", None), ("M3 Max", 36), ("M5 Max", 32), ("M7", 10), (None, None),
                                         ("Apple processor", None)])
def test_unknown_is_unknown(chip, cores):
    r = spec_bandwidth(chip, cores)
    assert r["gbs"] is None and r["reason"]


def test_fixture_chips_resolve_end_to_end():
    """sysctl (chip) + system_profiler (GPU cores) recorded on the same kind of Mac -> bandwidth."""
    chip = chips.parse_displays(read("m5-max-40c.system_profiler_displays.txt"))
    assert spec_bandwidth(chip["chip"], chip["gpu_cores"])["gbs"] == 614.0
    m2max = chips.parse_displays(read("m2-max-38c.system_profiler_displays.txt"))
    assert spec_bandwidth(m2max["chip"], m2max["gpu_cores"])["gbs"] == 400.0


def test_pmset():
    assert machine.parse_pmset_batt(read("m1.pmset_batt.txt")) == "ac"
    assert machine.parse_pmset_low_power(read("apple-silicon-mbp-unknown.pmset_g.txt")) is False
    assert machine.parse_pmset_low_power(read("m1-max.pmset_custom.partial.txt")) is False
    assert macos.parse_pmset_therm(read("m1-pro.pmset_therm.txt")) is None  # Apple Silicon prints no level
    assert machine.parse_pmset_low_power("") is None and machine.parse_pmset_batt("") is None
