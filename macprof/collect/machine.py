"""Machine and software metadata for run logs (pyperf-style), read without privileges.

Parsing is pure (functions of command output, tested against outputs recorded on real Macs);
collection runs the commands. Nothing that identifies a person or a machine is recorded:
the host appears only as a short one-way hash.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata

import psutil

from macprof.collect import chips
from macprof.collect.system import host_id, run_command


def parse_pmset_batt(text: str) -> str | None:
    m = re.search(r"Now drawing from '([^']+)'", text or "")
    if not m:
        return None
    return {"AC Power": "ac", "Battery Power": "battery", "UPS Power": "ups"}.get(m.group(1), m.group(1))


def parse_pmset_low_power(text: str) -> bool | None:
    """`pmset -g`: `lowpowermode N` (older macOS) or `powermode N` (0 auto, 1 low, 2 high)."""
    for line in (text or "").splitlines():
        m = re.match(r"\W*(lowpowermode|powermode)\s+(\d+)", line.strip().strip("*"))
        if m:
            return int(m.group(2)) == 1
    return None


def parse_pmset_therm(text: str) -> str | None:
    """`pmset -g therm`: Apple Silicon normally prints only 'No ... recorded' notes = nominal."""
    if not text:
        return None
    m = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text)
    if m:
        return "nominal" if int(m.group(1)) >= 100 else f"throttled (CPU speed limit {m.group(1)}%)"
    if "No thermal warning level has been recorded" in text:
        return "nominal"
    return None


# -- collection --------------------------------------------------------------------------
def cpu_model() -> str | None:
    if sys.platform == "darwin":
        return (run_command(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip() or None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _linux_power_source() -> str | None:
    base = "/sys/class/power_supply"
    try:
        supplies = os.listdir(base)
    except OSError:
        return None
    for name in supplies:
        try:
            with open(f"{base}/{name}/type") as fh:
                kind = fh.read().strip()
            if kind == "Mains":
                with open(f"{base}/{name}/online") as fh:
                    return "ac" if fh.read().strip() == "1" else "battery"
        except OSError:
            continue
    return None


def collect_machine() -> dict:
    vm = psutil.virtual_memory()
    info: dict = {
        "os": platform.system(),
        "os_version": platform.mac_ver()[0] if sys.platform == "darwin" else platform.release(),
        "arch": platform.machine(),
        "cpu_model": cpu_model(),
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cores_performance": None,
        "cores_efficiency": None,
        "memory_bytes": vm.total,
        "host_id": host_id(),
        "chip": None,
        "gpu_cores": None,
        "power_source": None,
        "low_power_mode": None,
        "thermal_state": None,
        "unknown": {},
    }
    if sys.platform == "darwin":

        hw = chips.detect()
        info["unknown"].update(hw.pop("unknown"))
        info.update(hw)
        info["power_source"] = parse_pmset_batt(run_command(["pmset", "-g", "batt"]) or "")
        info["low_power_mode"] = parse_pmset_low_power(run_command(["pmset", "-g"]) or "")
        info["thermal_state"] = parse_pmset_therm(run_command(["pmset", "-g", "therm"]) or "")
    else:
        info["power_source"] = _linux_power_source()
        info["unknown"]["chip"] = "not Apple Silicon"
        info["unknown"]["gpu_cores"] = "no GPU used by the engines on this OS"
        info["unknown"]["low_power_mode"] = "not read on this OS"
        info["unknown"]["thermal_state"] = "not read on this OS"
        info["unknown"]["cores_performance"] = "not a heterogeneous Apple core layout"
        if info["power_source"] is None:
            info["unknown"]["power_source"] = "no mains supply reported in /sys/class/power_supply"
    return info


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def collect_software() -> dict:
    from macprof import __version__

    return {
        "macprof": __version__,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy": _version("numpy"),
        "mlx": _version("mlx"),
        "mlx_lm": _version("mlx-lm"),
        "llama_cpp_python": _version("llama-cpp-python"),
        "gguf": _version("gguf"),
    }


def memory_snapshot() -> dict:
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    return {"available_bytes": vm.available, "swap_used_bytes": sw.used}
