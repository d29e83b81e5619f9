"""Apple Silicon: which chip this is, its GPU cores, core layout and memory.

Detection reads sysctl, system_profiler and ioreg without sudo; the parsers are pure and are
tested on outputs recorded on real Macs. The chip's published figures (bandwidth, TFLOP/s) are
looked up in model/chips.py.
"""

from __future__ import annotations

import json
import re

from macprof.model.chips import normalize_chip


# -- parsers (pure) ----------------------------------------------------------------------
def parse_sysctl(text: str) -> dict:
    from macprof.collect.system import parse_sysctl as kv

    values = kv(text)
    out: dict = {"chip": normalize_chip(values.get("machdep.cpu.brand_string")),
                 "memory_bytes": int(values["hw.memsize"]) if "hw.memsize" in values else None,
                 "core_levels": []}
    for level in range(4):
        count = values.get(f"hw.perflevel{level}.physicalcpu")
        if count is None:
            break
        out["core_levels"].append({"name": values.get(f"hw.perflevel{level}.name"), "cores": int(count)})
    levels = out["core_levels"]
    kinds = cores_by_kind(levels)
    out["cores_by_kind"] = kinds or None
    # macOS's own names: an M5 has no "Performance" level (Super + Efficiency), an M5 Pro/Max no
    # "Efficiency" one (Super + Performance): 0 there, not unknown, and never the Super cores
    out["cores_performance"] = kinds.get("Performance", 0) if levels else None
    out["cores_efficiency"] = kinds.get("Efficiency", 0) if levels else None
    return out


# Before macOS had hw.perflevelN.name (Monterey dumps have none) every Apple chip had two levels,
# performance then efficiency; Super cores (M5 on) came with macOS 26, which names its levels.
_UNNAMED_LEVELS = ("Performance", "Efficiency")


def cores_by_kind(levels: list[dict]) -> dict[str, int]:
    """Cores per kind as macOS names its core levels (Super, Performance, Efficiency), fastest
    level first: {"Super": 6, "Performance": 12} on an 18-core M5 Max."""
    out: dict[str, int] = {}
    for i, level in enumerate(levels):
        kind = level["name"] or (_UNNAMED_LEVELS[i] if i < len(_UNNAMED_LEVELS) else f"perflevel{i}")
        out[kind] = out.get(kind, 0) + level["cores"]
    return out


def parse_displays(text: str) -> dict:
    """`system_profiler SPDisplaysDataType` as JSON (-json) or plain text."""
    chip = cores = None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for gpu in data.get("SPDisplaysDataType", []):
            cores = cores or _int(gpu.get("sppci_cores"))
            chip = chip or normalize_chip(gpu.get("sppci_model"))
    else:
        for line in text.splitlines():
            key, _, value = line.strip().partition(":")
            if key == "Total Number of Cores":
                cores = cores or _int(value.strip())
            elif key == "Chipset Model":
                chip = chip or normalize_chip(value)
    return {"chip": chip, "gpu_cores": cores}


def parse_ioreg_gpu_cores(text: str) -> int | None:
    m = re.search(r'"gpu-core-count"\s*=\s*(\d+)', text or "")
    return int(m.group(1)) if m else None


def parse_hardware(text: str) -> dict:
    """Plain `system_profiler SPHardwareDataType` (tolerates stray log lines)."""
    out: dict = {"chip": None, "memory_bytes": None, "model": None}
    for line in text.splitlines():
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "Chip":
            out["chip"] = normalize_chip(value)
        elif key == "Memory":
            m = re.match(r"(\d+)\s*GB", value)
            out["memory_bytes"] = int(m.group(1)) * 2**30 if m else None
        elif key == "Model Identifier":
            out["model"] = value
    return out


def _int(value) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


# -- detection (runs the commands; macOS only) -------------------------------------------
def _run(cmd: list[str]) -> str:
    from macprof.collect.system import run_command

    return run_command(cmd, timeout=20) or ""


def detect() -> dict:
    """Chip, GPU cores, core layout and memory of this Mac, with reasons for what is unknown."""
    info = parse_sysctl(_run(["sysctl", "hw", "machdep"]))
    unknown: dict = {}
    if info["chip"] is None:  # Big Sur M1 reports "Apple processor"
        info["chip"] = parse_hardware(_run(["system_profiler", "SPHardwareDataType"]))["chip"]
    disp = parse_displays(_run(["system_profiler", "SPDisplaysDataType", "-json"]))
    gpu_cores = disp["gpu_cores"] or parse_ioreg_gpu_cores(
        _run(["ioreg", "-p", "IOService", "-n", "AppleARMPE", "-r", "-l"]))
    info["chip"] = info["chip"] or disp["chip"]
    if info["chip"] is None:
        unknown["chip"] = "neither sysctl nor system_profiler named an Apple chip"
    if gpu_cores is None:
        unknown["gpu_cores"] = "system_profiler and ioreg reported no GPU core count"
    return {"chip": info["chip"], "gpu_cores": gpu_cores, "cores_performance": info["cores_performance"],
            "cores_efficiency": info["cores_efficiency"], "cores_by_kind": info["cores_by_kind"],
            "core_levels": info["core_levels"], "unknown": unknown}
