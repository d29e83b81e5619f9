"""macOS paths that cannot run here (Linux x86): their parsers on outputs recorded on real Macs
(tests/fixtures/macos, SOURCES.md says where each comes from), their choices with fakes in place
of the commands, the Foundation call and libproc."""

import ctypes
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from macprof.collect import footprint, machine, macos
from macprof.collect.system import parse_sysctl
from macprof.engines import ggml
from macprof.model.log import Machine
from tests.conftest import FIXTURES


def read(name: str) -> str:
    return (FIXTURES / "macos" / name).read_text()


# -- OS version, power mode, thermal state -------------------------------------------------
def test_os_version_from_sw_vers_else_mac_ver_with_its_source():
    assert macos.os_version(lambda cmd: "26.0.1\n") == ("26.0.1", "sw_vers -productVersion")
    version, source = macos.os_version(lambda cmd: None)
    assert source.startswith("platform.mac_ver()") and version is None  # off macOS mac_ver() gives ""
    assert macos.os_major("15.3.1") == 15 and macos.os_major(None) is None


def test_power_mode_keeps_all_three_values():
    assert macos.parse_power_mode(read("apple-silicon-mbp-unknown.pmset_g.txt")) == "automatic"  # lowpowermode 0
    assert macos.parse_power_mode(read("m1-max.pmset_custom.partial.txt")) == "automatic"  # powermode 0
    # no recorded output has a 1 or a 2: the fixture's own line with the value changed
    high = read("m1-max.pmset_custom.partial.txt").replace("powermode            0", "powermode            2")
    low = high.replace("powermode            2", "powermode            1")
    assert macos.parse_power_mode(high) == "high" and machine.parse_pmset_low_power(high) is False
    assert macos.parse_power_mode(low) == "low" and machine.parse_pmset_low_power(low) is True
    assert macos.parse_power_mode("") is None and machine.parse_pmset_low_power("") is None


def test_apple_silicon_pmset_therm_is_not_nominal():
    text = read("m1-pro.pmset_therm.txt")
    assert macos.parse_pmset_therm(text) is None
    assert macos.parse_pmset_therm("CPU_Speed_Limit \t= 70") == "throttled (CPU speed limit 70%)"


def test_thermal_state_from_foundation_else_unknown_with_the_reason():
    assert macos.thermal_state(read=lambda: 0) == ("nominal", "NSProcessInfo.thermalState")
    assert macos.thermal_state(read=lambda: 2)[0] == "serious"

    def broken() -> int:
        raise OSError("no Foundation")

    state, why = macos.thermal_state(read=broken, run=lambda cmd: read("m1-pro.pmset_therm.txt"))
    assert state is None and "no Foundation" in why and "No thermal warning level" in why
    state, why = macos.thermal_state(read=broken, run=lambda cmd: "CPU_Speed_Limit = 100")
    assert state == "nominal" and "pmset" in why
    assert macos.thermal_state(read=lambda: 7)[0] is None


# -- the GPU's working set and the memory refusal -------------------------------------------
def test_gpu_working_set_sources():
    mlx_out = '{"max_recommended_working_set_size": 51539607552, "memory_size": 68719476736}'
    assert macos.gpu_working_set(lambda code: mlx_out if "mlx" in code else None) == (
        51539607552, "mlx device_info max_recommended_working_set_size")
    ggml_out = ('[{"name": "CPU", "type": 0, "total_bytes": 68719476736}, '
                '{"name": "MTL0", "description": "Apple M4 Max", "type": 1, "total_bytes": 55662788608}]')
    size, source = macos.gpu_working_set(lambda code: ggml_out if "ggml" in code else "{}")
    assert size == 55662788608 and "llama.cpp" in source and "Apple M4 Max" in source
    assert macos.gpu_working_set(lambda code: None)[0] is None


def _ggml_backend_header() -> Path | None:
    import sysconfig

    import llama_cpp

    places = [Path(sysconfig.get_paths()["purelib"]) / "include", Path(llama_cpp.__file__).parent.parent / "include"]
    return next((d / "ggml-backend.h" for d in places if (d / "ggml-backend.h").is_file()), None)


def test_ggml_device_types_are_the_installed_headers():
    """macprof's names for ggml_backend_dev_type, against the enum in the ggml-backend.h that
    llama-cpp-python installs beside itself (its wheel built from source does)."""
    import re

    header = _ggml_backend_header()
    if header is None:
        pytest.skip("this llama-cpp-python installed no ggml-backend.h")
    body = re.search(r"enum ggml_backend_dev_type\s*\{(.*?)\}", header.read_text(), re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = re.findall(r"GGML_BACKEND_DEVICE_TYPE_(\w+)\s*(?:=\s*(\d+))?", body)
    assert all(not value or int(value) == i for i, (_, value) in enumerate(names))  # in order, from 0
    assert ggml.GGML_DEVICE_TYPES == tuple(name for name, _ in names)
    assert ggml.GGML_DEVICE_TYPES[ggml.GGML_DEVICE_GPU] == "GPU"


def test_gpu_working_set_query_runs_on_linux():
    """The llama.cpp query is real code: on this CPU-only build it finds no GPU."""
    out = macos._python(macos._GGML_QUERY)
    assert out is not None and macos.parse_ggml_working_set(out) == (None, None)


def test_memory_refusal_uses_the_working_set_on_macos(tmp_path):
    from macprof.run.orchestrator import memory_limit, memory_refusal

    mac = Machine(memory_bytes=64 * 10**9, gpu_working_set_bytes=48 * 10**9,
                  sources={"gpu_working_set_bytes": "mlx device_info max_recommended_working_set_size"})
    limit, what = memory_limit("mlx", mac, "darwin")
    assert limit == 48 * 10**9 and "recommended working set" in what and "mlx device_info" in what
    assert memory_limit("llama.cpp", Machine(memory_bytes=16 * 10**9), "darwin")[0] == 16 * 10**9
    assert "available" in memory_limit("mlx", mac, "linux")[1]
    big = tmp_path / "m.gguf"
    with open(big, "wb") as fh:
        fh.truncate(50 * 10**9)  # sparse: no disk used
    model = types.SimpleNamespace(engine="mlx", files=[big])
    reason = memory_refusal(model, mac, "darwin")
    assert reason and "48.0 GB" in reason and "working set" in reason
    assert memory_refusal(model, Machine(gpu_working_set_bytes=60 * 10**9), "darwin") is None


# -- the physical footprint ------------------------------------------------------------------
def test_rusage_info_v4_layout_matches_the_sdk_header():
    # <sys/resource.h>: a 16-byte uuid, then 35 uint64 fields; ri_phys_footprint is the 8th,
    # ri_lifetime_max_phys_footprint the 29th
    assert ctypes.sizeof(footprint.RusageInfoV4) == 16 + 35 * 8
    assert footprint.RusageInfoV4.ri_phys_footprint.offset == 16 + 7 * 8
    assert footprint.RusageInfoV4.ri_lifetime_max_phys_footprint.offset == 16 + 28 * 8
    assert footprint.RusageInfoV4.ri_runnable_time.offset == 16 + 34 * 8


def test_footprint_read_and_phase_peak():
    info = footprint.RusageInfoV4(ri_phys_footprint=5 * 2**30, ri_lifetime_max_phys_footprint=7 * 2**30,
                                  ri_resident_size=2**30)
    assert footprint.read(42, rusage=lambda pid: info, platform="darwin") == (5 * 2**30, 7 * 2**30)
    assert footprint.read(42, rusage=lambda pid: None, platform="darwin") == (None, None)
    assert footprint.read(os.getpid()) == (None, None)  # not macOS
    assert footprint.phase_peak(10, 20, 30) == 30  # the lifetime max rose: this phase holds it
    assert footprint.phase_peak(10, 30, 30) == 10  # it did not: the samples' maximum
    assert footprint.phase_peak(None, None, None) is None


def test_parent_adds_the_phase_footprint_peak_and_the_log_keeps_it():
    from macprof.analyse.build import _phase_memory
    from macprof.model import events as ev
    from macprof.run.watch import _State

    state = _State(timeout=10)
    state.on_event(ev.PhaseStart(phase="warm", rss_bytes=1, footprint_bytes=100, footprint_max_bytes=150))
    state.footprint_peak, state.footprint_samples = 180, 3
    end = state.on_event(ev.PhaseEnd(phase="warm", rss_bytes=1, footprint_bytes=120, footprint_max_bytes=400))
    assert end.peak_footprint_bytes == 400 and end.footprint_samples == 3
    memory = _phase_memory([ev.PhaseStart(phase="warm", footprint_bytes=100, footprint_max_bytes=150), end], "warm")
    assert (memory.footprint_start_bytes, memory.footprint_end_bytes, memory.peak_footprint_bytes) == (100, 120, 400)
    linux = _phase_memory([ev.PhaseStart(phase="warm", rss_bytes=1), ev.PhaseEnd(phase="warm", rss_bytes=1)], "warm")
    assert "peak_footprint_bytes" not in linux.to_json()  # other OSes' logs keep their layout
    # a server macprof started holds the model: the parent samples the server's footprint, and
    # the worker's own figures (the client's, its lifetime maximum 9 GB) must not become its peak
    served = _State(timeout=10, own_peak=False)
    served.on_event(ev.PhaseStart(phase="warm", rss_bytes=1, footprint_bytes=100, footprint_max_bytes=150))
    served.footprint_peak, served.footprint_samples = 3_000, 4
    end = served.on_event(ev.PhaseEnd(phase="warm", rss_bytes=1, footprint_bytes=120, footprint_max_bytes=9_000))
    assert (end.peak_footprint_bytes, end.footprint_samples) == (3_000, 4)


# -- llama.cpp: threads, synchronize, load facts ---------------------------------------------
@pytest.mark.parametrize("fixture, cores", [("m1-pro-8cpu.sysctl.txt", 6), ("m5.sysctl.txt", 4),
                                            ("m4-pro-12cpu.sysctl.partial.txt", 8),
                                            ("m5-max-18cpu.sysctl.assembled.txt", 6)])  # the Super cores, perflevel0
def test_llama_threads_are_the_performance_cores_on_macos(fixture, cores):
    from macprof.engines.llama_cpp_facts import default_threads

    value = parse_sysctl(read(fixture))["hw.perflevel0.physicalcpu"]  # what `sysctl -n` prints
    threads, source = default_threads("darwin", sysctl=lambda key: value + "\n")
    assert threads == cores and "hw.perflevel0.physicalcpu" in source
    assert default_threads("linux")[1] == "psutil physical cores"
    assert default_threads("darwin", sysctl=lambda key: "")[1] == "psutil physical cores"  # Big Sur: no perflevel keys


def test_overhead_tg_loop_synchronizes_after_every_decode(monkeypatch):
    from macprof.bench import loop

    calls = []
    fake = types.SimpleNamespace(llama_token=ctypes.c_int32, llama_batch_get_one=lambda arr, n: n,
                                 llama_decode=lambda ctx, b: calls.append("decode") or 0,
                                 llama_synchronize=lambda ctx: calls.append("sync"))
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    engine = types.SimpleNamespace(reset=lambda: None, _decode=lambda ids: calls.append("prefill"), ctx=1, vocab_size=50)
    assert loop._llama_tg(engine, [1, 2], 5) > 0
    decodes = [i for i, c in enumerate(calls) if c == "decode"]
    assert len(decodes) == 5 and all(calls[i + 1] == "sync" for i in decodes)


def test_llama_load_facts(monkeypatch):
    from macprof.engines import llama_cpp_facts as adapter

    monkeypatch.setattr(adapter.lc, "llama_model_n_layer", lambda model: 32)
    monkeypatch.setattr(adapter.lc, "llama_supports_gpu_offload", lambda: True)
    monkeypatch.setattr(adapter.lc, "llama_supports_mmap", lambda: True)
    mparams = types.SimpleNamespace(n_gpu_layers=-1, use_mmap=True, use_mlock=False)  # llama.cpp before load_mode
    cparams = types.SimpleNamespace(flash_attn_type=-1)
    metal = [{"name": "MTL0", "description": "Apple M4 Max", "type": 1, "total_bytes": 55662788608}]
    facts = adapter.load_facts(None, mparams, cparams, devices=metal)
    assert facts["offloaded_layers"] == 33 and facts["gpu_offload"] and facts["load_mode"] == "mmap"
    assert facts["flash_attn"] == "auto" and facts["devices"] == metal
    cpu = adapter.load_facts(None, mparams, cparams, devices=[{"name": "CPU", "type": 0, "total_bytes": 1}])
    assert cpu["offloaded_layers"] == 0 and not cpu["gpu_offload"]
    blas = [{"name": "CPU", "type": 0, "total_bytes": 1}, {"name": "BLAS", "type": ggml.GGML_DEVICE_TYPES.index("ACCEL"),
                                                          "total_bytes": 1}]
    assert not adapter.load_facts(None, mparams, cparams, devices=blas)["gpu_offload"]  # an accelerator is no GPU
    now = types.SimpleNamespace(n_gpu_layers=10, load_mode=adapter.lc.LLAMA_LOAD_MODE_MMAP)  # llama.cpp with load_mode
    facts = adapter.load_facts(None, now, cparams, devices=metal)
    assert facts["load_mode"] == adapter.lc.llama_load_mode_name(1).decode() and facts["offloaded_layers"] == 10


# -- MLX: the wired limit and the batch API --------------------------------------------------
def _fake_mx(available: bool, size: int | None):
    calls = []
    info = {"max_recommended_working_set_size": size} if size else {}
    core = types.SimpleNamespace(metal=types.SimpleNamespace(is_available=lambda: available),
                                 device_info=lambda: info, set_wired_limit=lambda n: calls.append(n) or 0)
    return core, calls


def test_mlx_wires_the_recommended_working_set():
    from macprof.engines.mlx import wire

    core, calls = _fake_mx(True, 48 * 2**30)
    old, facts = wire(core)
    assert old == 0 and calls == [48 * 2**30] and facts["wired_limit_bytes"] == 48 * 2**30
    core, calls = _fake_mx(False, None)
    old, facts = wire(core)
    assert old is None and calls == [] and facts["wired_limit_bytes"] is None and facts["wired_reason"]


def test_mlx_batch_api_is_detected():
    from macprof.engines.mlx import batch_api_missing

    class New:  # mlx-lm 0.31.3's BatchGenerator, as far as the batch sweep uses it
        def __init__(self, model, *, max_tokens=128, stop_tokens=None, sampler=None, logits_processors=None,
                     completion_batch_size=32, prefill_batch_size=8, prefill_step_size=2048, stream=None): ...

        def insert(self, prompts, max_tokens=None): ...

        def next_generated(self): ...

        def close(self): ...

    class Old(New):  # mlx-lm 0.31.2: next_generated() but no stream=
        def __init__(self, model, *, max_tokens=128, stop_tokens=None, sampler=None,
                     completion_batch_size=32, prefill_batch_size=8, prefill_step_size=2048): ...

    class NoStep(New):  # stream= and next_generated(), but a keyword the call passes is gone
        def __init__(self, model, *, max_tokens=128, stop_tokens=None, sampler=None, stream=None): ...

    class Anything(New):
        def __init__(self, model, **kwargs): ...

    assert batch_api_missing(New) is None and batch_api_missing(Anything) is None
    assert "batch unsupported" in batch_api_missing(Old) and "0.31.3" in batch_api_missing(Old)
    assert "stream=" in batch_api_missing(Old)
    why = batch_api_missing(NoStep)
    assert why and "completion_batch_size=" in why and "prefill_step_size=" in why and "stream=" not in why
    NoClose = type("NoClose", (), {"__init__": New.__init__, "insert": New.insert, "next_generated": New.next_generated})
    assert "close()" in batch_api_missing(NoClose)
    from mlx_lm.generate import BatchGenerator

    assert batch_api_missing(BatchGenerator) is None  # the installed mlx-lm


# -- the bandwidth probe and stream_check ----------------------------------------------------
def test_mlx_probes_run_in_a_separate_process():
    from macprof.collect import probes

    r = probes.measure(device="gpu", sizes_mib=[8], reps=2)
    f = probes.measure_flops(device="gpu", n=64, reps=2)
    assert r["pid"] != os.getpid() and f["pid"] != os.getpid() and r["best_gbs"] > 0
    assert probes.measure(device="cpu", threads=1, sizes_mib=[8], reps=2)["pid"] == os.getpid()


def test_stream_check_builds_without_openmp_on_macos():
    path = Path(__file__).parent.parent / "benchmarks" / "stream_check.py"
    spec = importlib.util.spec_from_file_location("stream_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mac = mod.compile_command("cc", "s.c", "s", platform="darwin")
    assert "-fopenmp" not in mac and not any(a.startswith("-mcmodel") for a in mac)
    assert "-fopenmp" in mod.compile_command("cc", "s.c", "s", platform="linux")
    assert mod.stream_threads(8, "darwin") == 1 and mod.stream_threads(8, "linux") == 8
    assert "#ifdef _OPENMP" in mod.STREAM_C

