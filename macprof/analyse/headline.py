"""The figures a model is known by, shared by the summary table and `compare`."""

from __future__ import annotations

from macprof.model.log import ModelResult
from macprof.model.phases import Ceiling, PhaseMemory
from macprof.model.telemetry import PhaseTelemetry


def _memories(model: ModelResult) -> list[PhaseMemory]:
    ph = model.phases
    return [p.memory for p in (ph.warm, ph.prefix, ph.grid, ph.depth, ph.batch) if p and p.memory]


# The headline memory figure. On macOS RSS misses GPU allocations (MLX arrays, llama.cpp's Metal
# buffers: the weights and the K/V cache), the physical footprint counts them and is what
# Activity Monitor shows; elsewhere RSS is the figure. A log that recorded a footprint keeps to
# it even where a phase lost its peak: falling back to RSS there would mix the two figures.
FOOTPRINT, RSS = "footprint", "RSS"


def memory_kind(memories: list[PhaseMemory]) -> str | None:
    """Which figure these phases' memory is judged by: footprint where recorded, else RSS;
    None where no phase recorded memory at all."""
    if not memories:
        return None
    return FOOTPRINT if any(m.has("peak_footprint_bytes") for m in memories) else RSS


def peak_memory(memories: list[PhaseMemory]) -> tuple[int | None, str | None]:
    """The largest peak of the headline figure over these phases, and which figure it is."""
    kind = memory_kind(memories)
    if kind == FOOTPRINT:
        peaks = [m.peak_footprint_bytes for m in memories if m.has("peak_footprint_bytes") and m.peak_footprint_bytes]
    else:
        peaks = [m.peak_rss_bytes for m in memories if m.peak_rss_bytes]
    return (max(peaks) if peaks else None), kind


def memory_figures(memories: list[PhaseMemory]) -> dict:
    """The headline memory fields: ``peak_memory_bytes`` in the figure ``memory_figure`` names,
    and both figures raw (the footprint null where the log has none)."""
    value, kind = peak_memory(memories)
    rss = [m.peak_rss_bytes for m in memories if m.peak_rss_bytes]
    foot = [m.peak_footprint_bytes for m in memories if m.has("peak_footprint_bytes") and m.peak_footprint_bytes]
    return {"peak_memory_bytes": value, "memory_figure": kind, "peak_rss_bytes": max(rss) if rss else None,
            "peak_footprint_bytes": max(foot) if foot else None}


def measured_efficiency(roof: Ceiling | None) -> float | None:
    """Decode over the ceiling with the measured bandwidth, where both are known."""
    return roof.measured.efficiency if roof and roof.measured else None


def headline(m: ModelResult) -> dict:
    """The figures a model is known by, shared by the summary table and `compare`."""
    cold, warm, prefix = m.phases.cold, m.phases.warm, m.phases.prefix
    return {
        "model": m.identity.name,
        "engine": m.identity.engine,
        "quant": m.identity.quant_declared or m.identity.quant_label,
        "file_bytes": m.identity.total_bytes,
        "cold_ttft_s": cold.summary.time_to_first_token_s.median if cold else None,
        "warm_ttft_s": warm.summary.ttft_s.median if warm else None,
        "prefix_ttft_s": prefix.summary.reuse.ttft_s.median if prefix else None,
        "decode_tok_s": warm.summary.decode_tok_s.median if warm else None,
        "efficiency": measured_efficiency(warm.roofline) if warm else None,
        **memory_figures(_memories(m)),
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
