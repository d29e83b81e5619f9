"""The figures a model is known by, shared by the summary table and `compare`."""

from __future__ import annotations

from macprof.model.log import ModelResult
from macprof.model.phases import Ceiling, PhaseMemory, SweepCase
from macprof.model.telemetry import PhaseTelemetry


def _memories(model: ModelResult) -> list[PhaseMemory]:
    """Every phase's memory whose worker holds the loaded model (design.md "Memory"): each phase
    of the log but cold, whose trials are each a fresh process. The speculative phase's peak holds
    the draft's weights and K/V beside the target's; quality's its logits of every position."""
    ph = model.phases
    records = (getattr(ph, name) for name in type(ph).__struct_fields__ if name != "cold")
    return [mem for p in records if p for mem in [getattr(p, "memory", None)] if mem]


# The headline memory figure: what the process holds. On macOS RSS misses GPU allocations (MLX
# arrays, llama.cpp's Metal buffers for the K/V cache), and the physical footprint (what Activity
# Monitor shows) counts them, but xnu's footprint ledger is (internal - alternate accounting) +
# compressed + IOKit-mapped + purgeable non-volatile + page tables (osfmk/kern/task.c): no clean
# file-backed page. llama.cpp maps the model file and Metal wraps that mapping in place
# (buffer_from_host_ptr), so its weights are clean file pages the footprint never counts. The
# headline is therefore the footprint plus the resident bytes of the files the engine maps
# ("footprint+mapped"): the two are disjoint, the footprint holding no file page and mincore
# counting nothing else. MLX copies its weights into its own buffers: nothing to add (0).
# Elsewhere RSS is the figure: Linux's RSS is RssAnon + RssFile + RssShmem, so the mapped pages
# the process touched are in it already. A log that recorded a footprint keeps to it even where a
# phase lost its peak: falling back to RSS there would mix the figures.
FOOTPRINT, FOOTPRINT_MAPPED, RSS = "footprint", "footprint+mapped", "RSS"
# whether the headline counts the weights however the engine held them
COUNTED, NOT_COUNTED = "counted", "not counted (mapped weights outside the footprint)"


def memory_kind(memories: list[PhaseMemory]) -> str | None:
    """Which figure these phases' memory is judged by: the footprint (plus the mapped weights
    where the log says how the engine held them), else RSS; None where no phase recorded memory."""
    if not memories:
        return None
    if not any(m.has("peak_footprint_bytes") for m in memories):
        return RSS
    return FOOTPRINT_MAPPED if any(m.has("weights_held") for m in memories) else FOOTPRINT


def memory_family(kind: str | None) -> str | None:
    """Figures that measure the same thing: a footprint with or without mapped weights is still
    a footprint (whether it counts the weights is weights_counted's to say), RSS is another."""
    return FOOTPRINT if kind in (FOOTPRINT, FOOTPRINT_MAPPED) else kind


def _mapped(m: PhaseMemory) -> int | None:
    """The mapped weights' resident bytes this phase adds to its footprint: 0 where nothing is
    mapped, None where the weights were mapped but their residency is unknown."""
    if not m.has("weights_held") or m.weights_held != "mapped":
        return 0
    return m.mapped_resident_bytes if m.has("mapped_resident_bytes") else None


def _peak_of(m: PhaseMemory, kind: str) -> int | None:
    if kind == RSS:
        return m.peak_rss_bytes or None
    foot = m.peak_footprint_bytes if m.has("peak_footprint_bytes") else None
    if not foot:
        return None
    extra = _mapped(m) if kind == FOOTPRINT_MAPPED else 0
    return foot + (extra or 0)


def peak_memory(memories: list[PhaseMemory]) -> tuple[int | None, str | None]:
    """The largest peak of the headline figure over these phases, and which figure it is."""
    kind = memory_kind(memories)
    if kind is None:
        return None, None
    peaks = [p for p in (_peak_of(m, kind) for m in memories) if p]
    return (max(peaks) if peaks else None), kind


def weights_counted(memories: list[PhaseMemory], engine: str | None) -> str | None:
    """Whether the headline includes the weights: RSS includes mapped pages, a footprint includes
    copied weights, and mapped ones only where their residency was measured. Logs from before
    weights_held was recorded: macprof's llama.cpp adapter always loaded with llama.cpp's
    default mode, which maps the file on a Mac, so its footprint there missed the weights."""
    kind = memory_kind(memories)
    if kind is None:
        return None
    if kind == FOOTPRINT:
        return NOT_COUNTED if engine == "llama.cpp" else COUNTED
    if kind == FOOTPRINT_MAPPED and any(_mapped(m) is None for m in memories if m.has("peak_footprint_bytes")):
        return NOT_COUNTED
    return COUNTED


def memory_figures(memories: list[PhaseMemory], engine: str | None = None) -> dict:
    """The headline memory fields: ``peak_memory_bytes`` in the figure ``memory_figure`` names,
    both raw figures (the footprint null where the log has none), the mapped weights' resident
    bytes added to a footprint, and whether the headline counts the weights at all."""
    value, kind = peak_memory(memories)
    rss = [m.peak_rss_bytes for m in memories if m.peak_rss_bytes]
    foot = [m.peak_footprint_bytes for m in memories if m.has("peak_footprint_bytes") and m.peak_footprint_bytes]
    mapped = [m.mapped_resident_bytes for m in memories if m.has("mapped_resident_bytes") and m.mapped_resident_bytes]
    held = {m.weights_held for m in memories if m.has("weights_held")}
    return {"peak_memory_bytes": value, "memory_figure": kind, "peak_rss_bytes": max(rss) if rss else None,
            "peak_footprint_bytes": max(foot) if foot else None, "mapped_weights_bytes": max(mapped) if mapped else None,
            "weights_held": held.pop() if len(held) == 1 else None,
            "memory_weights": weights_counted(memories, engine)}


def measured_efficiency(roof: Ceiling | None) -> float | None:
    """Decode over the ceiling with the measured bandwidth, where both are known."""
    return roof.measured.efficiency if roof and roof.measured else None


def headline(m: ModelResult) -> dict:
    """The figures a model is known by, shared by the summary table and `compare`."""
    cold, warm, prefix = m.phases.cold, m.phases.warm, m.phases.prefix
    return {
        "model": m.identity.name,
        "engine": m.identity.engine,
        "quant": m.identity.quant,
        "file_bytes": m.identity.total_bytes,
        "cold_ttft_s": cold.summary.time_to_first_token_s.median if cold else None,
        "warm_ttft_s": warm.summary.ttft_s.median if warm else None,
        "prefix_ttft_s": prefix.summary.reuse.ttft_s.median if prefix else None,
        "decode_tok_s": warm.summary.decode_tok_s.median if warm else None,
        "efficiency": measured_efficiency(warm.roofline) if warm else None,
        **memory_figures(_memories(m), m.identity.engine),
        **energy_figures(warm.telemetry if warm else None),
    }


def energy_figures(tel: PhaseTelemetry | None) -> dict:
    """The warm phase's energy and the conditions it ran under (thermal pressure, power
    source): unknown, with the reason, where the telemetry gave none."""
    e = tel.energy if tel else None
    return {
        "decode_j_per_token": e.decode_j_per_token if e else None,
        "prefill_j_per_token": e.prefill_j_per_token if e else None,
        "avg_w": e.avg_w if e else None,
        "energy_reason": (e.reason if e else "no telemetry in this log") if e is None or e.decode_j_per_token is None
        else None,
        "thermal_pressure": tel.thermal_pressure_max if tel else None,
        "phase_power_source": (tel.power_source_end or tel.power_source_start) if tel else None,
        "has_telemetry": tel is not None,
    }


def case_energy(case: SweepCase) -> dict:
    """A sweep case's energy, from its own requests against its phase's telemetry."""
    e = case.energy
    return {"decode_j_per_token": e.decode_j_per_token if e else None,
            "prefill_j_per_token": e.prefill_j_per_token if e else None, "avg_w": e.avg_w if e else None,
            "energy_reason": (e.reason if e else "no telemetry for this case") if e is None or e.decode_j_per_token is None
            else None}


def engine_version(model: ModelResult, software: dict | None) -> str | None:
    """The version of the package that ran the model (llama-cpp-python, mlx-lm), as the run
    recorded it; None for an engine without one (a server's, the fake engine)."""
    package = ENGINE_PACKAGES.get(model.identity.engine)
    return (software or {}).get(package) if package else None


# the package whose version is an engine's, as collect/machine.py names it in the log's software
ENGINE_PACKAGES = {"llama.cpp": "llama_cpp_python", "mlx": "mlx_lm"}
