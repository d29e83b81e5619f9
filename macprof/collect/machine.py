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

from macprof.collect import chips, macos
from macprof.collect.system import host_id, run_command


def parse_pmset_batt(text: str) -> str | None:
    m = re.search(r"Now drawing from '([^']+)'", text or "")
    if not m:
        return None
    return {"AC Power": "ac", "Battery Power": "battery", "UPS Power": "ups"}.get(m.group(1), m.group(1))


def parse_pmset_low_power(text: str) -> bool | None:
    """Low Power Mode on or off, from the power mode `pmset -g` prints (macos.parse_power_mode)."""
    mode = macos.parse_power_mode(text)
    return None if mode is None else mode == "low"


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
        "os_version": platform.release(),
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
        "power_mode": None,
        "gpu_working_set_bytes": None,
        "unknown": {},
        "sources": {},
    }
    if sys.platform == "darwin":
        _darwin_facts(info)
    else:
        info["power_source"] = _linux_power_source()
        info["unknown"]["chip"] = "not Apple Silicon"
        info["unknown"]["gpu_cores"] = "no GPU used by the engines on this OS"
        info["unknown"]["low_power_mode"] = "not read on this OS"
        info["unknown"]["thermal_state"] = "not read on this OS"
        info["unknown"]["power_mode"] = "not read on this OS"
        info["unknown"]["gpu_working_set_bytes"] = "no GPU used by the engines on this OS"
        info["unknown"]["cores_performance"] = "not a heterogeneous Apple core layout"
        if info["power_source"] is None:
            info["unknown"]["power_source"] = "no mains supply reported in /sys/class/power_supply"
    return info


def _darwin_facts(info: dict) -> None:
    """The Mac's own facts, each with its source in ``sources`` or its reason in ``unknown``."""
    hw = chips.detect()
    info["unknown"].update(hw.pop("unknown"))
    info.update(hw)
    if hw.get("cores_by_kind"):
        named = all(level["name"] for level in hw["core_levels"])
        source = "sysctl hw.perflevelN.name and .physicalcpu" + ("" if named else " (no names: performance, then efficiency)")
        for key in ("cores_by_kind", "cores_performance", "cores_efficiency"):
            info["sources"][key] = source
    else:  # macOS 11 has no hw.perflevel keys
        for key in ("cores_by_kind", "cores_performance", "cores_efficiency"):
            info["unknown"][key] = "sysctl printed no hw.perflevelN keys"
    info["os_version"], info["sources"]["os_version"] = macos.os_version()
    info["power_source"] = parse_pmset_batt(run_command(["pmset", "-g", "batt"]) or "")
    pmset = run_command(["pmset", "-g"]) or ""
    info["power_mode"] = macos.parse_power_mode(pmset)
    info["low_power_mode"] = parse_pmset_low_power(pmset)
    if info["power_mode"] is None:
        info["unknown"]["power_mode"] = info["unknown"]["low_power_mode"] = "pmset -g printed no powermode line"
    else:
        info["sources"]["power_mode"] = "pmset -g"
    state, why = macos.thermal_state()
    info["thermal_state"] = state
    (info["sources"] if state else info["unknown"])["thermal_state"] = why
    size, why = macos.gpu_working_set()
    info["gpu_working_set_bytes"] = size
    (info["sources"] if size else info["unknown"])["gpu_working_set_bytes"] = why


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
