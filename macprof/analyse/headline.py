"""The figures a model is known by, shared by the summary table and `compare`."""

from __future__ import annotations

from macprof.model.log import ModelResult
from macprof.model.phases import Ceiling
from macprof.model.telemetry import PhaseTelemetry


def peak_rss(model: ModelResult) -> int | None:
    ph = model.phases
    peaks = [p.memory.peak_rss_bytes for p in (ph.warm, ph.prefix, ph.grid, ph.depth, ph.batch)
             if p and p.memory and p.memory.peak_rss_bytes]
    return max(peaks) if peaks else None


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
        "peak_rss_bytes": peak_rss(m),
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
