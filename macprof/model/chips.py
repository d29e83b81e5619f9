"""Apple Silicon chips by name, and the figures Apple published for each: memory bandwidth and
FP32 GPU compute, each with its source. The table is keyed by chip *and* GPU core count, since
binned M3 Max / M4 Max / M5 Max parts have narrower memory buses. A chip or configuration not in
the table is "unknown": never a guess. Pure: the chip of this Mac is detected in collect/chips.py;
a run log, `macprof estimate --chip` and the llama.cpp thread's row (render/thread.py) look
their chip up here."""

from __future__ import annotations

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
