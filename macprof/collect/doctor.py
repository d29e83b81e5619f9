"""`macprof doctor`: every source a figure comes from, exercised on this machine, each row its
value or the exact reason it failed, and checked against an expectation where one exists.

A Mac user runs it once (seconds, no model needed) and pastes its `--json` into an issue: it is
how the macOS paths that were written against documented APIs and recorded outputs, never run
on a Mac before a user's, show whether they read right. A row is one ``Check``:

- ``pass`` / ``fail``: the value met, or missed, a stated expectation (e.g. touching a 64 MiB
  allocation raises the footprint by 64 MiB ± 10 %), so a wrong figure reads FAIL, not as a number;
- ``ok``: a value with nothing to hold it against;
- ``unavailable``: this OS or machine has no such source (the reason says which);
- ``error``: the source exists and failed; the reason is its exception, type and message.

The memory checks run first, in this process, before any engine is imported (an engine's
buffers would move the figures); the engines' rows run in fresh interpreters, as `macprof run`'s
workers do.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from macprof.model.doctor import STATUSES, Check

MIB = 1 << 20
ALLOC_BYTES = 64 * MIB  # the test allocation
MAPPED_BYTES = 32 * MIB  # the test file, mapped and read
TOLERANCE = 0.10  # the allocation and mapped-file checks: the expected delta ± 10 %
BANDWIDTH_RANGE = (0.3, 1.1)  # measured over published: below, the probe or the table is wrong; above, the table is


@dataclass
class Env:
    """What the checks read the machine through; tests replace the parts only a Mac has with
    recorded outputs and fakes of the same shape."""

    platform: str = sys.platform
    run: Callable[[list[str]], str | None] = field(default=lambda cmd: _run_command(cmd))
    python: Callable[[str], tuple[int, str, str]] = field(default=lambda code: _python(code))
    rusage: Callable[[int], Any] | None = None  # collect/footprint.py's reader; None: libproc's
    thermal: Callable[[], int] | None = None  # NSProcessInfo.thermalState; None: Foundation's
    notify_lib: Any = None  # notify(3)'s two functions; None: libSystem's
    macmon: Any = None  # the macmon module; None: import it
    memory_total: int | None = None  # None: psutil's
    measure: Callable[..., dict] | None = None  # the bandwidth probe; None: collect/probes.measure
    demo_gguf: Callable[[], Path] | None = None  # the tiny GGUF the offload check loads
    sleep: Callable[[float], None] = time.sleep


def _run_command(cmd: list[str]) -> str | None:
    from macprof.collect.system import run_command

    return run_command(cmd, timeout=20)


def _python(code: str, timeout: float = 120) -> tuple[int, str, str]:
    """A query in a fresh interpreter: (exit code, stdout, stderr)."""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"no answer within {timeout:g} s"
    except OSError as exc:
        return 127, "", f"{type(exc).__name__}: {exc}"
    return out.returncode, out.stdout, out.stderr


def within(value: float, expected: float, tolerance: float = TOLERANCE) -> bool:
    return abs(value - expected) <= tolerance * expected


def _diff(before: int | None, after: int | None) -> int | None:
    return None if before is None or after is None else after - before


def _delta_check(figure: str, source: str, delta: int | None, expected: int, what: str) -> Check:
    if delta is None:
        return Check(figure, source, "error", None, f"{source} gave no reading")
    status = "pass" if within(delta, expected) else "fail"
    return Check(figure, source, status, delta, f"expected +{expected / MIB:.0f} MiB ± {TOLERANCE:.0%} ({what})", "bytes")


# -- memory: the headline's sources -------------------------------------------------------------
def _rss() -> int | None:
    import psutil

    try:
        return int(psutil.Process().memory_info().rss)
    except psutil.Error:
        return None


def _footprint(env: Env) -> int | None:
    from macprof.collect import footprint

    return footprint.read(os.getpid(), rusage=env.rusage, platform=env.platform)[0]


def _touch(buf, length: int) -> None:
    """Fault every page in: one byte read (a mapping) or written (an allocation) per page."""
    step = mmap.PAGESIZE
    if isinstance(buf, bytearray):
        buf[::step] = b"\1" * len(range(0, length, step))
    else:
        buf[::step]  # noqa: B018 - the read is the point: it faults each page in


def allocation_checks(env: Env) -> list[Check]:
    """A 64 MiB allocation, every page written: RSS and (macOS) the footprint rise by as much."""
    foot_before, rss_before = _footprint(env), _rss()
    buf = bytearray(ALLOC_BYTES)
    _touch(buf, ALLOC_BYTES)
    foot_after, rss_after = _footprint(env), _rss()
    out = [_delta_check("RSS of a 64 MiB allocation", "psutil memory_info().rss",
                        _diff(rss_before, rss_after),
                        ALLOC_BYTES, "anonymous pages, written")]
    if env.platform != "darwin":
        out.append(Check("phys_footprint of a 64 MiB allocation", "proc_pid_rusage ri_phys_footprint", "unavailable",
                         None, "the physical footprint is macOS's (xnu's ledger); the headline here is RSS"))
    else:
        out.append(_delta_check("phys_footprint of a 64 MiB allocation", "proc_pid_rusage ri_phys_footprint",
                                _diff(foot_before, foot_after),
                                ALLOC_BYTES, "anonymous pages are in the footprint"))
    del buf
    return out


def mapped_file_checks(env: Env) -> list[Check]:
    """A 32 MiB file written, synced, mapped read-only and read through: mincore finds it all
    resident; RSS counts the mapped pages; the footprint does not (the reason the macOS headline
    adds the mapped weights' resident bytes, analyse/headline.py)."""
    from macprof.collect import residency

    with tempfile.TemporaryDirectory(prefix="macprof-doctor-") as tmp:
        path = Path(tmp) / "mapped.bin"
        with open(path, "wb") as sink:
            sink.write(os.urandom(MAPPED_BYTES))
            sink.flush()
            os.fsync(sink.fileno())  # clean pages, as a model file's are
        foot_before, rss_before = _footprint(env), _rss()
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
            _touch(view, MAPPED_BYTES)
            foot_after, rss_after = _footprint(env), _rss()
            resident, size = residency.file_residency(path)
    out = [Check("mincore residency of a mapped 32 MiB file", "mincore(2) over a read-only mmap",
                 "pass" if resident == size else "fail", resident,
                 f"expected all {size} bytes resident (the file was just written and read)", "bytes")]
    out.append(_delta_check("RSS of the mapped file, read through", "psutil memory_info().rss",
                            _diff(rss_before, rss_after),
                            MAPPED_BYTES, "resident mapped pages count in RSS"))
    if env.platform == "darwin":
        delta = _diff(foot_before, foot_after)
        if delta is None:
            out.append(Check("phys_footprint of the mapped file", "proc_pid_rusage ri_phys_footprint", "error", None,
                             "proc_pid_rusage gave no reading"))
        else:
            out.append(Check("phys_footprint of the mapped file", "proc_pid_rusage ri_phys_footprint",
                             "pass" if delta < TOLERANCE * MAPPED_BYTES else "fail", delta,
                             f"expected under {TOLERANCE * MAPPED_BYTES / MIB:.1f} MiB: clean file pages are outside the "
                             f"footprint, so the headline adds a mapped model's resident bytes", "bytes"))
    return out


# -- the chip, its cores and bandwidth ----------------------------------------------------------
def chip_checks(env: Env) -> tuple[list[Check], dict]:
    """The chip, its GPU and CPU cores by kind, the memory size; returns the facts the
    bandwidth rows need."""
    import psutil

    from macprof.collect import chips, machine, system

    total = env.memory_total or psutil.virtual_memory().total
    if env.platform != "darwin":
        return [Check("CPU", "/proc/cpuinfo model name", "ok" if machine.cpu_model() else "error", machine.cpu_model(),
                      "" if machine.cpu_model() else "no model name in /proc/cpuinfo"),
                Check("GPU cores", "-", "unavailable", None, "no GPU used by the engines on this OS"),
                Check("CPU cores", "psutil cpu_count", "ok",
                      {"physical": psutil.cpu_count(logical=False), "logical": psutil.cpu_count(logical=True)}),
                Check("memory", "psutil virtual_memory().total", "ok", total, unit="bytes")], {}
    text = env.run(["sysctl", "hw", "machdep"]) or ""
    facts = chips.parse_sysctl(text)
    raw = system.parse_sysctl(text)
    chip = facts["chip"] or chips.parse_hardware(env.run(["system_profiler", "SPHardwareDataType"]) or "")["chip"]
    disp = chips.parse_displays(env.run(["system_profiler", "SPDisplaysDataType", "-json"]) or "")
    gpu = disp["gpu_cores"] or chips.parse_ioreg_gpu_cores(
        env.run(["ioreg", "-p", "IOService", "-n", "AppleARMPE", "-r", "-l"]) or "")
    chip = chip or disp["chip"]
    out = [Check("chip", "sysctl machdep.cpu.brand_string (system_profiler where it says less)",
                 "ok" if chip else "error", chip, "" if chip else "neither sysctl nor system_profiler named an Apple chip"),
           Check("GPU cores", "system_profiler SPDisplaysDataType (ioreg AppleARMPE gpu-core-count)",
                 "ok" if gpu else "error", gpu, "" if gpu else "system_profiler and ioreg reported no GPU core count")]
    by_kind = facts.get("cores_by_kind") or {}
    physical = _int(raw.get("hw.physicalcpu"))
    if by_kind:
        counted = sum(by_kind.values())
        status = "pass" if physical is None or counted == physical else "fail"
        out.append(Check("CPU cores by kind", "sysctl hw.perflevelN.name / .physicalcpu", status, by_kind,
                         f"the levels add up to hw.physicalcpu ({physical})" if physical is not None else
                         "hw.physicalcpu not printed: nothing to add them up against"))
    else:
        out.append(Check("CPU cores by kind", "sysctl hw.perflevelN", "unavailable", None,
                         "sysctl printed no hw.perflevelN keys (macOS 11)"))
    memsize = _int(raw.get("hw.memsize"))
    if memsize is None:
        out.append(Check("memory", "sysctl hw.memsize", "error", None, "sysctl printed no hw.memsize"))
    else:
        out.append(Check("memory", "sysctl hw.memsize (psutil beside it)", "pass" if memsize == total else "fail",
                         memsize, f"the same as psutil's total ({total})", "bytes"))
    return out, {"chip": chip, "gpu_cores": gpu}


def _int(text) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def bandwidth_checks(env: Env, facts: dict) -> list[Check]:
    """The published bandwidth for this chip and a short measurement beside it: the measured one
    must land between 30 % and 110 % of the published one."""
    from macprof.collect import probes
    from macprof.model.chips import spec_bandwidth

    spec = spec_bandwidth(facts.get("chip"), facts.get("gpu_cores")) if facts.get("chip") else {}
    published = spec.get("gbs")
    out = [Check("published bandwidth", "macprof's chip table (model/chips.py)", "ok" if published else "unavailable",
                 published, spec.get("source") or spec.get("reason") or "not an Apple chip: no published figure", "GB/s")]
    device = "gpu" if env.platform == "darwin" else "cpu"
    try:
        r = (env.measure or probes.measure)(device=device, sizes_mib=[256], reps=3)
    except Exception as exc:  # noqa: BLE001 - the exact reason is the row
        return out + [Check("measured bandwidth", f"macprof bandwidth probe ({device})", "error", None,
                            f"{type(exc).__name__}: {exc}")]
    gbs = float(r["median_gbs"])
    if not published:
        return out + [Check("measured bandwidth", r["method"], "ok", round(gbs, 1), "median of 3 reads of 256 MiB", "GB/s")]
    lo, hi = BANDWIDTH_RANGE
    ratio = gbs / published
    return out + [Check("measured bandwidth", r["method"], "pass" if lo <= ratio <= hi else "fail", round(gbs, 1),
                        f"{ratio:.0%} of the published {published:g} GB/s; expected {lo:.0%}..{hi:.0%}", "GB/s")]


# -- macOS's own readings ---------------------------------------------------------------------
def macos_checks(env: Env) -> list[Check]:
    """The wired limit, thermal state and pressure, power source and mode."""
    from macprof.collect import machine, macos, power_macos

    if env.platform != "darwin":
        why = "macOS only"
        return [Check(f, s, "unavailable", None, why) for f, s in (
            ("GPU wired limit", "sysctl iogpu.wired_limit_mb"), ("thermal state", "NSProcessInfo.thermalState"),
            ("thermal pressure", "notify(3) com.apple.system.thermalpressurelevel"), ("power mode", "pmset -g"))]
    out = []
    # the system's cap on wired GPU memory (sudo sysctl iogpu.wired_limit_mb=N raises it): what a
    # model larger than the default working set needs, and what MLX's set_wired_limit cannot pass
    wired = _int((env.run(["sysctl", "-n", "iogpu.wired_limit_mb"]) or "").strip())
    out.append(Check("GPU wired limit", "sysctl iogpu.wired_limit_mb", "ok" if wired is not None else "unavailable",
                     wired, "0 is macOS's default limit" if wired is not None else
                     "sysctl has no iogpu.wired_limit_mb (macOS before 14 named it debug.iogpu.wired_limit)", "MB"))
    state, why = macos.thermal_state(run=env.run) if env.thermal is None else \
        macos.thermal_state(read=env.thermal, run=env.run)
    out.append(Check("thermal state", why if state else "NSProcessInfo.thermalState", "ok" if state else "error", state,
                     "" if state else why))
    pressure = power_macos.ThermalPressure(env.notify_lib)
    level = pressure.read()
    out.append(Check("thermal pressure", "notify(3) com.apple.system.thermalpressurelevel", "ok" if level else "error",
                     level, pressure.reason or ("" if level else "notify_get_state failed")))
    pmset = env.run(["pmset", "-g"]) or ""
    mode = macos.parse_power_mode(pmset)
    out.append(Check("power mode", "pmset -g", "ok" if mode else "error", mode,
                     "" if mode else "pmset -g printed no powermode line"))
    batt = machine.parse_pmset_batt(env.run(["pmset", "-g", "batt"]) or "")
    out.append(Check("power source", "pmset -g batt", "ok" if batt else "error", batt,
                     "" if batt else "pmset -g batt did not name the power source"))
    return out


def power_checks(env: Env) -> list[Check]:
    """Power, temperatures and GPU use: macmon-lib on a Mac (its first sample's cost too, which
    a phase pays once), RAPL, thermal zones and the mains supply on Linux."""
    from macprof.collect import power_linux, power_macos

    if env.platform == "darwin":
        t0 = time.perf_counter()
        sampler, version, why = power_macos.open_macmon(env.macmon)
        if sampler is None:
            return [Check("power (macmon)", "macmon-lib IOReport + SMC", "error", None, why or "")]
        power_macos.read_macmon(sampler)  # the first sample: what a phase sampler pays once
        cost = time.perf_counter() - t0
        env.sleep(0.25)
        m = power_macos.read_macmon(sampler)
        package = m["watts"]["package"]
        return [Check("macmon first sample", f"macmon-lib {version}", "ok", round(cost, 3),
                      "from open to the first sample (paid once per phase's sampler)", "s"),
                Check("package power", "macmon-lib IOReport Energy Model", "pass" if package > 0 else "fail",
                      round(package, 2), "over 250 ms; expected > 0 on a running Mac", "W"),
                Check("temperatures", "macmon-lib SMC", "ok" if m["temps_c"] else "unavailable", m["temps_c"],
                      "" if m["temps_c"] else "the chip exposes no CPU/GPU sensor average"),
                Check("GPU use", "macmon-lib IOReport GPU residency", "ok" if m["gpu_usage"] is not None else "error",
                      {"usage": m["gpu_usage"], "mhz": m["gpu_mhz"]} if m["gpu_usage"] is not None else None,
                      "" if m["gpu_usage"] is not None else "no GPU residency channel")]
    rapl, why = power_linux.open_rapl()
    out = []
    if rapl is None:
        out.append(Check("power (RAPL)", str(power_linux.POWERCAP), "unavailable", None, why or ""))
    else:
        before = rapl.read()
        env.sleep(0.25)
        watts = rapl.watts(before, rapl.read(), 0.25)
        ok = bool(watts) and all(w >= 0 for w in watts.values())
        out.append(Check("power (RAPL)", str(power_linux.POWERCAP), "pass" if ok else "fail",
                         {k: round(v, 2) for k, v in watts.items()}, "W over 250 ms; expected >= 0 in every domain"))
    zones, why = power_linux.thermal_zones()
    temps = power_linux.read_temps(zones) if zones else {}
    out.append(Check("thermal zones", str(power_linux.THERMAL), "ok" if temps else "unavailable", temps or None,
                     "" if temps else (why or "no zone gave a temperature")))
    source, why = power_linux.power_source()
    out.append(Check("power source", str(power_linux.POWER_SUPPLY), "ok" if source else "unavailable", source, why or ""))
    return out


# -- the engines, each in a fresh interpreter -------------------------------------------------------
_MLX = ("import json, mlx.core as mx; f = getattr(mx, 'device_info', None) or mx.metal.device_info; "
        "info = {k: v for k, v in f().items() if isinstance(v, (int, str))}; "
        "print(json.dumps({'device': str(mx.default_device()), 'metal': bool(mx.metal.is_available()), 'info': info}))")

_GGUF = """
import json, sys
import llama_cpp as lc
from macprof.engines.llama_cpp_facts import ggml_devices, load_facts, weights_held
lc.llama_backend_init()
p = lc.llama_model_default_params()
m = lc.llama_model_load_from_file(sys.argv[1].encode(), p)
if not m:
    sys.exit("llama.cpp could not load " + sys.argv[1])
facts = load_facts(m, p, lc.llama_context_default_params())
facts["weights_held"] = weights_held(facts["load_mode"], bool(lc.llama_supports_mmap()))
print(json.dumps(facts))
"""


def _query(env: Env, code: str, *args: str) -> tuple[dict | None, str]:
    """(the JSON a fresh interpreter printed, or None with its exact reason)."""
    rc, out, err = env.python(code if not args else f"import sys; sys.argv[1:] = {list(args)!r}\n{code}")
    if rc != 0:
        tail = (err or "").strip().splitlines()[-1:] or [f"exit code {rc}"]
        return None, tail[0]
    try:
        return json.loads(out.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, f"printed no JSON: {out.strip()[-200:]!r}"


def mlx_checks(env: Env, total_memory: int) -> list[Check]:
    doc, why = _query(env, _MLX)
    if doc is None:
        return [Check("MLX device", "mlx.core device_info", "error", None, why)]
    info = doc.get("info") or {}
    out = [Check("MLX device", "mlx.core default_device / device_info", "ok",
                 {"device": doc.get("device"), "metal": doc.get("metal"), **{k: v for k, v in info.items()
                                                                            if isinstance(v, str)}})]
    ws = info.get("max_recommended_working_set_size")
    if env.platform != "darwin":
        out.append(Check("MLX working set", "mlx device_info max_recommended_working_set_size", "unavailable", None,
                         "MLX runs on the CPU here: no Metal working set"))
    elif not isinstance(ws, int) or ws <= 0:
        out.append(Check("MLX working set", "mlx device_info max_recommended_working_set_size", "error", ws,
                         "MLX reported no recommended working set"))
    else:
        out.append(Check("MLX working set", "mlx device_info max_recommended_working_set_size",
                         "pass" if ws <= total_memory else "fail", ws,
                         f"expected at most the physical memory ({total_memory} bytes)", "bytes"))
    return out


def gguf_checks(env: Env, path: Path | None) -> list[Check]:
    """A tiny GGUF loaded as `macprof run` loads one: its devices, its offload (on a Mac every
    layer on Metal), and whether its weights are mapped (they should be: llama.cpp's default)."""
    if path is None:
        return [Check("llama.cpp offload", "llama_model_load_from_file", "error", None, "no GGUF to load")]
    doc, why = _query(env, _GGUF, str(path))
    if doc is None:
        return [Check("llama.cpp offload", "llama_model_load_from_file", "error", None, why)]
    gpus = [d.get("description") or d.get("name") for d in doc.get("devices", []) if d.get("type") == 1]
    want = doc["n_layer"] + 1
    if env.platform == "darwin":
        ok = doc.get("gpu_offload") and doc.get("offloaded_layers") == want
        offload = Check("llama.cpp offload", f"ggml devices, load of {path.name}", "pass" if ok else "fail",
                        {"gpu": gpus, "offloaded_layers": doc.get("offloaded_layers")},
                        f"expected every layer ({want}, the output layer included) on the GPU (Metal)")
    else:
        offload = Check("llama.cpp offload", f"ggml devices, load of {path.name}", "ok",
                        {"gpu": gpus, "offloaded_layers": doc.get("offloaded_layers")},
                        "no GPU device: the CPU build" if not gpus else "")
    held = doc.get("weights_held")
    return [offload, Check("llama.cpp weights", f"load mode {doc.get('load_mode')!r}",
                           "pass" if held == "mapped" else "fail", held,
                           "expected mapped (llama.cpp's default load mode maps the file)")]


def residency_checks(files: list[Path], label: str) -> list[Check]:
    from macprof.collect import residency

    r = residency.residency(files)
    return [Check(f"page-cache residency of {label}", r["method"], "ok", r["resident_bytes"],
                  f"{r['label']}, of {r['file_bytes']} bytes", "bytes")]


# -- all of it --------------------------------------------------------------------------------------
def _guarded(fn: Callable[[], list[Check]], figure: str) -> list[Check]:
    """A probe that raised is one error row with its exact reason, never a traceback."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the reason is the row
        return [Check(figure, "-", "error", None, f"{type(exc).__name__}: {exc}")]


def run_checks(env: Env | None = None, model_files: list[Path] | None = None, model_label: str = "",
               gguf: Path | None = None, progress: Callable[[str], None] = lambda s: None) -> list[Check]:
    """Every row, memory first (before anything large is imported or loaded here)."""
    import psutil

    env = env or Env()
    checks: list[Check] = []
    progress("memory: a test allocation and a mapped file")
    checks += _guarded(lambda: allocation_checks(env), "test allocation")
    checks += _guarded(lambda: mapped_file_checks(env), "mapped file")
    facts: dict = {}

    def chip() -> list[Check]:
        rows, found = chip_checks(env)
        facts.update(found)
        return rows
    checks += _guarded(chip, "chip")
    progress("bandwidth: a short measurement")
    checks += _guarded(lambda: bandwidth_checks(env, facts), "bandwidth")
    checks += _guarded(lambda: macos_checks(env), "macOS readings")
    checks += _guarded(lambda: power_checks(env), "power")
    progress("engines: MLX's device, a tiny GGUF on llama.cpp")
    checks += _guarded(lambda: mlx_checks(env, env.memory_total or psutil.virtual_memory().total), "MLX device")
    if gguf is None and env.demo_gguf is not None:
        gguf = _guarded_path(env.demo_gguf)
    checks += _guarded(lambda: gguf_checks(env, gguf), "llama.cpp offload")
    if model_files:
        checks += _guarded(lambda: residency_checks(model_files, model_label), "model residency")
    return checks


def _guarded_path(make: Callable[[], Path]) -> Path | None:
    try:
        return make()
    except Exception:  # noqa: BLE001 - gguf_checks says "no GGUF to load"
        return None


def to_json(checks: list[Check], machine: dict) -> dict:
    return {"macprof_doctor": 1, "machine": machine, "checks": [asdict(c) for c in checks],
            "counts": {s: sum(1 for c in checks if c.status == s) for s in STATUSES}}
