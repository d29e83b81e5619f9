"""Apple Silicon: which chip this is, and its published memory bandwidth and GPU compute.

Detection reads sysctl, system_profiler and ioreg without sudo; the parsers are pure and are
tested on outputs recorded on real Macs. The bandwidth table is keyed by chip *and* GPU core
count, since binned M3 Max / M4 Max / M5 Max parts have narrower memory buses. A chip or
configuration not in the table is "unknown": never a guess.
"""

from __future__ import annotations

import json
import re

from macprof.errors import MacprofError

# (chip, GPU cores or None for every configuration) -> published bandwidth, GB/s (1e9 bytes/s)
BANDWIDTH_GBS: dict[tuple[str, int | None], float] = {
    # M1 (Nov 2020): Apple published no figure; LPDDR4X-4266 on a 128-bit bus = 68.25 GB/s.
    ("M1", None): 68.25,
    ("M1 Pro", None): 200.0,  # Apple newsroom, 2021-10-18: "200GB/s"
    ("M1 Max", None): 400.0,  # Apple newsroom, 2021-10-18: "400GB/s" (24- and 32-core GPU)
    ("M1 Ultra", None): 800.0,  # Apple newsroom, 2022-03-08: "800GB/s"
    ("M2", None): 100.0,  # Apple newsroom, 2022-06-06: "100GB/s"
    ("M2 Pro", None): 200.0,  # Apple newsroom, 2023-01-17: "200GB/s"
    ("M2 Max", None): 400.0,  # Apple newsroom, 2023-01-17: "400GB/s" (30- and 38-core GPU)
    ("M2 Ultra", None): 800.0,  # Apple newsroom, 2023-06-05: "800GB/s"
    ("M3", None): 100.0,  # Apple MacBook Pro (Nov 2023) tech specs: 100GB/s
    ("M3 Pro", None): 150.0,  # Apple MacBook Pro (Nov 2023) tech specs: 150GB/s
    ("M3 Max", 30): 300.0,  # Apple MacBook Pro (Nov 2023) tech specs: 14-core CPU / 30-core GPU, 300GB/s
    ("M3 Max", 40): 400.0,  # same: 16-core CPU / 40-core GPU, 400GB/s
    ("M3 Ultra", None): 819.0,  # Apple newsroom, 2025-03-05 (Mac Studio): "819GB/s"
    ("M4", None): 120.0,  # Apple newsroom, 2024-05-07: "120GB/s"
    ("M4 Pro", None): 273.0,  # Apple newsroom, 2024-10-30: "273GB/s"
    ("M4 Max", 32): 410.0,  # Apple MacBook Pro (Oct 2024) tech specs: 14-core CPU / 32-core GPU, 410GB/s
    ("M4 Max", 40): 546.0,  # same: 16-core CPU / 40-core GPU, 546GB/s
    ("M5", None): 153.0,  # Apple newsroom, 2025-10-15: "153GB/s"
    ("M5 Pro", None): 307.0,  # Apple newsroom, 2026-03-03: "307GB/s"
    ("M5 Max", 40): 614.0,  # Apple newsroom, 2026-03-03: "614GB/s" (40-core GPU)
}

# Chips sold with more than one bandwidth: the GPU core count decides, so it must be known.
BINNED = {"M3 Max", "M4 Max", "M5 Max"}

# Published FP32 GPU throughput, TFLOP/s (Apple's own figures only).
GPU_TFLOPS: dict[tuple[str, int | None], float] = {
    ("M1", 8): 2.6,  # Apple newsroom, 2020-11-10: "2.6 teraflops"
    ("M1 Pro", 16): 5.2,  # Apple newsroom, 2021-10-18: "5.2 teraflops"
    ("M1 Max", 32): 10.4,  # Apple newsroom, 2021-10-18: "10.4 teraflops"
    ("M1 Ultra", 64): 21.0,  # Apple newsroom, 2022-03-08: "21 teraflops"
    ("M2", 10): 3.6,  # Apple newsroom, 2022-06-06: "3.6 teraflops"
}

_CHIP_RE = re.compile(r"\bM(\d)(?:\s+(Pro|Max|Ultra))?\b")


def normalize_chip(text: str | None) -> str | None:
    """'Apple M3 Max' -> 'M3 Max'; anything else (e.g. 'Apple processor') -> None."""
    if not text:
        return None
    m = _CHIP_RE.search(text)
    if not m:
        return None
    return f"M{m.group(1)}" + (f" {m.group(2)}" if m.group(2) else "")


def spec_bandwidth(chip: str | None, gpu_cores: int | None) -> dict:
    """Published bandwidth with where it came from, or null with the reason."""
    chip = normalize_chip(chip) or chip
    if not chip:
        return {"gbs": None, "source": None, "reason": "unknown chip"}
    if gpu_cores is not None and (chip, gpu_cores) in BANDWIDTH_GBS:
        return {"gbs": BANDWIDTH_GBS[(chip, gpu_cores)], "source": f"published ({chip}, {gpu_cores}-core GPU)", "reason": None}
    if chip in BINNED:
        what = "unknown GPU core count" if gpu_cores is None else f"{gpu_cores}-core GPU not in the table"
        return {"gbs": None, "source": None,
                "reason": f"{chip} comes in variants of different bandwidth: {what}"}
    if (chip, None) in BANDWIDTH_GBS:
        return {"gbs": BANDWIDTH_GBS[(chip, None)], "source": f"published ({chip})", "reason": None}
    return {"gbs": None, "source": None, "reason": f"no published bandwidth for {chip!r}"}


def spec_tflops(chip: str | None, gpu_cores: int | None) -> float | None:
    return GPU_TFLOPS.get((normalize_chip(chip) or "", gpu_cores))


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


KNOWN_CHIPS = tuple(dict.fromkeys(chip for chip, _ in BANDWIDTH_GBS))


def parse_chip_name(text: str | None) -> str | None:
    """A chip named by a person: 'M4 Max', 'm4  max', 'Apple M4 Max' -> 'M4 Max'. Only a whole
    known name counts: normalize_chip would read 'M4 Mx' as the base M4, a different chip."""
    words = (text or "").split()
    if words and words[0].lower() == "apple":
        words = words[1:]
    return {c.lower(): c for c in KNOWN_CHIPS}.get(" ".join(words).lower())


def chip_from_cli(chip: str | None, gpu_cores: int | None) -> dict:
    """For `macprof estimate --chip`: a name the table knows, or a clear error."""
    name = parse_chip_name(chip)
    if name is None:
        raise MacprofError(f"--chip {chip!r}: unknown chip (known: {', '.join(KNOWN_CHIPS)})")
    bw = spec_bandwidth(name, gpu_cores)
    if bw["gbs"] is None:
        cores = " or ".join(str(c) for n, c in BANDWIDTH_GBS if n == name and c)
        raise MacprofError(f"--chip {chip!r}: {bw['reason']}" + (f" (give --gpu-cores {cores})" if name in BINNED else ""))
    return {"chip": name, "gpu_cores": gpu_cores, "bandwidth_gbs": bw["gbs"], "source": bw["source"],
            "tflops": spec_tflops(name, gpu_cores)}
