"""`macprof doctor`: every figure source exercised, each row a value or its exact reason, and a
wrong figure shown as FAIL. The memory checks run for real here (RSS, mincore); the macOS rows
run through outputs recorded on Macs (tests/fixtures/macos) and fakes of macmon, notify(3),
NSProcessInfo and proc_pid_rusage. The fake footprint is this process's anonymous resident
memory (RssAnon): what xnu's footprint ledger counts of a process that holds no GPU buffer or
compressed page, so the checks meet it as they would a Mac's."""

import json
import sys

import pytest

from macprof.collect import doctor as dr
from macprof.collect.footprint import RusageInfoV4
from macprof.render.doctor import doctor_table
from tests.conftest import FIXTURES, cli
from tests.test_telemetry import FakeMacmon, FakeNotify

MAC = FIXTURES / "macos"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":")) * 1024


def anon_footprint(pid):
    """A footprint as xnu's ledger would count this process: its anonymous pages, no file page."""
    info = RusageInfoV4()
    info.ri_phys_footprint = _status_kb("RssAnon")
    return info


def rss_as_footprint(pid):
    """A wrong footprint source: the whole RSS, file pages included."""
    info = RusageInfoV4()
    info.ri_phys_footprint = _status_kb("VmRSS")
    return info


# what each command printed on a Mac: an 18-core, 40-GPU-core M5 Max (its sysctl assembled from the
# documented layout, tests/fixtures/macos/SOURCES.md), pmset from an Apple Silicon MacBook Pro
M5_MAX = {("sysctl", "hw", "machdep"): "m5-max-18cpu.sysctl.assembled.txt",
          ("system_profiler", "SPDisplaysDataType", "-json"): "m5-max-40c.system_profiler_displays.txt",
          ("ioreg", "-p", "IOService", "-n", "AppleARMPE", "-r", "-l"): "m5-max-40c.ioreg_core_count.txt",
          ("pmset", "-g"): "apple-silicon-mbp-unknown.pmset_g.txt", ("pmset", "-g", "batt"): "m1.pmset_batt.txt"}
# not a recorded output: `sysctl -n` of a numeric key prints the number alone
PRINTED = {("sysctl", "-n", "iogpu.wired_limit_mb"): "0\n"}


def mac_run(recorded):
    def run(cmd):
        key = tuple(cmd)
        if key in PRINTED:
            return PRINTED[key]
        return (MAC / recorded[key]).read_text() if key in recorded else None
    return run


def mac_python(code):
    """MLX's and llama.cpp's answers on an M5 Max, in the shape the queries print."""
    if "mlx.core" in code:
        return 0, json.dumps({"device": "Device(gpu, 0)", "metal": True,
                              "info": {"architecture": "applegpu_g17s", "device_name": "Apple M5 Max",
                                       "max_recommended_working_set_size": 96 << 30, "memory_size": 128 << 30}}), ""
    return 0, json.dumps({"devices": [{"name": "MTL0", "description": "Apple M5 Max", "type": 1},
                                      {"name": "CPU", "description": "Apple M5 Max", "type": 0}],
                          "gpu_offload": True, "n_gpu_layers": -1, "n_layer": 4, "offloaded_layers": 5,
                          "load_mode": "auto", "weights_held": "mapped"}), ""


def mac_env(**kw):
    base = dict(platform="darwin", run=mac_run(M5_MAX), python=mac_python, rusage=anon_footprint, thermal=lambda: 0,
                notify_lib=FakeNotify(level=0), macmon=FakeMacmon, memory_total=128 << 30, sleep=lambda s: None,
                measure=lambda **k: {"median_gbs": 540.0, "method": "MLX sum reductions (mx.eval)"},
                demo_gguf=lambda: MAC / "demo.gguf")
    return dr.Env(**{**base, **kw})


def rows(checks):
    return {c.figure: c for c in checks}


def test_every_row_is_a_value_or_a_reason_and_every_status_is_known():
    for checks in (dr.run_checks(mac_env()),):
        for c in checks:
            assert c.status in dr.STATUSES
            assert c.value is not None or c.detail, c  # no blank: a figure, or why there is none


@linux_only
def test_the_memory_checks_meet_this_machine():
    got = rows(dr.allocation_checks(dr.Env()) + dr.mapped_file_checks(dr.Env()))
    assert got["RSS of a 64 MiB allocation"].status == "pass"
    assert got["mincore residency of a mapped 32 MiB file"].status == "pass"
    assert got["mincore residency of a mapped 32 MiB file"].value == dr.MAPPED_BYTES
    assert got["RSS of the mapped file, read through"].status == "pass"  # Linux RSS counts mapped pages
    assert got["phys_footprint of a 64 MiB allocation"].status == "unavailable"
    assert "macOS" in got["phys_footprint of a 64 MiB allocation"].detail


@linux_only
def test_a_footprint_that_leaves_file_pages_out_passes_and_one_that_counts_them_fails():
    """The check the macOS headline rests on: a mapped, read model file is outside the footprint.
    A source that counts file pages (the whole RSS) must read FAIL, not as a number."""
    right = rows(dr.allocation_checks(mac_env()) + dr.mapped_file_checks(mac_env()))
    assert right["phys_footprint of a 64 MiB allocation"].status == "pass"
    assert right["phys_footprint of the mapped file"].status == "pass"
    wrong = rows(dr.mapped_file_checks(mac_env(rusage=rss_as_footprint)))
    assert wrong["phys_footprint of the mapped file"].status == "fail"
    assert wrong["phys_footprint of the mapped file"].value >= 0.9 * dr.MAPPED_BYTES
    gone = rows(dr.allocation_checks(mac_env(rusage=lambda pid: None)))  # the process not ours
    assert gone["phys_footprint of a 64 MiB allocation"].status == "error"


def test_the_macos_rows_read_the_recorded_outputs():
    got = rows(dr.run_checks(mac_env()))
    assert got["chip"].value == "M5 Max" and got["GPU cores"].value == 40
    assert got["CPU cores by kind"].value == {"Super": 6, "Performance": 12}
    assert got["CPU cores by kind"].status == "pass"  # 6 + 12 = hw.physicalcpu 18
    assert got["memory"].status == "error" and "hw.memsize" in got["memory"].detail  # the assembled dump has none
    assert got["published bandwidth"].value == 614.0
    assert got["measured bandwidth"].status == "pass" and "88% of the published 614" in got["measured bandwidth"].detail
    assert got["GPU wired limit"].value == 0
    assert (got["thermal state"].value, got["thermal pressure"].value) == ("nominal", "nominal")
    assert (got["power mode"].value, got["power source"].value) == ("automatic", "ac")
    assert got["package power"].status == "pass" and got["temperatures"].value == {"cpu_average": 43.0}
    assert got["macmon first sample"].unit == "s"
    assert got["MLX working set"].status == "pass" and got["MLX working set"].value == 96 << 30
    assert got["llama.cpp offload"].status == "pass" and got["llama.cpp weights"].value == "mapped"


def test_wrong_figures_read_fail():
    slow = mac_env(measure=lambda **k: {"median_gbs": 61.0, "method": "MLX sum reductions (mx.eval)"})
    assert rows(dr.run_checks(slow))["measured bandwidth"].status == "fail"  # 10 % of the published figure

    def cpu_only(code):
        if "mlx.core" in code:
            return mac_python(code)
        return 0, json.dumps({"devices": [{"name": "CPU", "type": 0}], "gpu_offload": False, "n_layer": 4,
                              "offloaded_layers": 0, "load_mode": "none", "weights_held": "copied"}), ""
    got = rows(dr.run_checks(mac_env(python=cpu_only)))
    assert got["llama.cpp offload"].status == "fail" and got["llama.cpp weights"].status == "fail"
    m4 = {("sysctl", "hw", "machdep"): "m4-max-40c.sysctl.txt"}  # no system_profiler, no ioreg answer
    got = rows(dr.run_checks(mac_env(run=mac_run(m4), memory_total=64 << 30)))
    assert got["memory"].status == "pass" and got["CPU cores by kind"].value == {"Performance": 12, "Efficiency": 4}
    assert got["GPU cores"].status == "error" and "no GPU core count" in got["GPU cores"].detail
    assert "variants of different bandwidth" in got["published bandwidth"].detail  # binned M4 Max: unknown GPU


def test_a_failing_source_is_one_row_with_its_exact_reason():
    def crashed(code):
        return 1, "", "Traceback (most recent call last):\nImportError: libmlx.dylib not found\n"
    got = rows(dr.run_checks(mac_env(python=crashed)))
    assert got["MLX device"].status == "error" and got["MLX device"].detail == "ImportError: libmlx.dylib not found"
    assert got["llama.cpp offload"].status == "error"

    class NoMacmon:
        class Sampler:
            def __init__(self):
                raise RuntimeError("Failed to create IOReport subscription")
    got = rows(dr.power_checks(mac_env(macmon=NoMacmon)))
    assert got["power (macmon)"].detail == "macmon-lib could not start: RuntimeError: Failed to create IOReport subscription"

    def raises(env):
        raise OSError(5, "Input/output error")
    assert dr._guarded(lambda: raises(None), "chip")[0].detail == "OSError: [Errno 5] Input/output error"


def test_the_table_and_json_say_each_verdict():
    checks = dr.run_checks(mac_env(measure=lambda **k: {"median_gbs": 61.0, "method": "m"}))
    text = doctor_table(checks, width=150)
    assert "FAIL" in text and "PASS" in text and "measured bandwidth" in text
    assert text.splitlines()[-1].startswith(tuple(str(n) for n in range(10)))  # "N PASS, N FAIL, ..."
    doc = dr.to_json(checks, {"os": "Darwin"})
    assert doc["counts"]["fail"] == 1 and len(doc["checks"]) == len(checks)
    assert json.loads(json.dumps(doc)) == doc


@pytest.mark.slow
def test_doctor_on_this_machine(cache_root):
    """The command itself, every source real: no FAIL and no ERROR on this Linux machine, every
    macOS row said to be macOS's."""
    r = cli("doctor", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["counts"]["fail"] == doc["counts"]["error"] == 0
    got = {c["figure"]: c for c in doc["checks"]}
    assert got["llama.cpp weights"]["value"] == "mapped" and got["mincore residency of a mapped 32 MiB file"]["status"] == "pass"
    assert all(c["detail"] for c in doc["checks"] if c["status"] == "unavailable")
    assert "host_id" not in doc["machine"]
