"""Energy and throttling as text: the summary's energy lines and its throttling warnings.
Pure functions of the run log."""

from __future__ import annotations

from macprof.model.log import ModelResult, RunLog
from macprof.measure.stats import median
from macprof.model.telemetry import ColdEnergy, PhaseTelemetry
from macprof.phases import SWEEPS
from macprof.render.text import clean


# energy and the conditions it ran under, where the phase's telemetry knows them (else null, with the reason)
ENERGY_FIELDS = ("prefill_j_per_token", "decode_j_per_token", "avg_w", "energy_reason", "thermal_pressure",
                 "phase_power_source")


def fmt_j(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.2f} mJ" if abs(value) < 1 else f"{value:.2f} J"


def _phases(m: ModelResult) -> list[tuple[str, PhaseTelemetry]]:
    ph = m.phases
    found = [("warm", ph.warm.telemetry if ph.warm else None), ("prefix", ph.prefix.telemetry if ph.prefix else None)]
    found += [(name, sweep.telemetry) for name in SWEEPS if (sweep := ph.sweep(name))]
    return [(name, tel) for name, tel in found if tel is not None]


def energy_lines(log: RunLog) -> list[str]:
    """Per model and phase: J/token for prefill and decode, mean watts, the idle baseline
    subtracted; the phases whose energy is unknown, grouped by the reason."""
    out: list[str] = []
    unknown: dict[str, list[str]] = {}  # reason -> the phases it holds for
    for m in log.models:
        for phase, tel in _phases(m):
            e = tel.energy
            if e.decode_j_per_token is None and e.prefill_j_per_token is None:
                unknown.setdefault(e.reason or "no figure", []).append(f"{m.identity.name} {phase}")
                continue
            out.append(f"{m.identity.name} {phase}: prefill {fmt_j(e.prefill_j_per_token)}/token, decode "
                       f"{fmt_j(e.decode_j_per_token)}/token, {_w(e.avg_w)} mean ({e.domain}), idle baseline "
                       f"{_w(e.baseline_w)} subtracted; {e.samples} samples every {tel.period_s:g} s"
                       + (f"; {e.note}" if e.note else ""))
    out += [f"energy per token unknown for {', '.join(where)}: {reason}" for reason, where in unknown.items()]
    return [clean(line) for line in (["Energy (telemetry):", *out] if out else [])]


def phase_energy(tel: PhaseTelemetry | None) -> str:
    """`show`'s energy line for a phase: the phase's J/token, then its requests' own where the
    sampling resolved them (how many did, and why the others did not)."""
    if tel is None:
        return "no telemetry in this log"
    e = tel.energy
    if e.decode_j_per_token is None and e.prefill_j_per_token is None:
        return f"unknown: {e.reason or 'no figure'}"
    text = (f"prefill {fmt_j(e.prefill_j_per_token)}/token, decode {fmt_j(e.decode_j_per_token)}/token, "
            f"{_w(e.avg_w)} mean ({e.domain}), idle baseline {_w(e.baseline_w)}")
    reqs = tel.per_request or ()
    per = [r.decode_j_per_token for r in reqs if r.decode_j_per_token is not None]
    if per:
        text += f"; per request decode p50 {fmt_j(median(per))}/token, {len(per)} of {len(reqs)} resolved"
    unresolved = next((r.reason for r in reqs if r.decode_j_per_token is None and r.reason), None)
    if unresolved:
        text += f" ({len(reqs) - len(per)} not: {unresolved})" if per else f"; per request not resolved: {unresolved}"
    return text


def cold_energy(e: ColdEnergy | None) -> str:
    """A cold trial's energy from spawn to ready, for `show`."""
    if e is None:
        return ""
    if e.gross_j is None:
        return f"; energy spawn to ready unknown: {e.reason}"
    net = (f", {fmt_j(e.net_j)} above the {e.baseline_from} phase's idle baseline {_w(e.baseline_w)}"
           if e.net_j is not None else f" (net unknown: {e.reason})")
    return f"; energy spawn to ready {fmt_j(e.gross_j)} at {_w(e.avg_w)} mean{net}"


def _w(watts: float | None) -> str:
    return "-" if watts is None else f"{watts:.1f} W"


def throttle_warnings(m: ModelResult) -> list[str]:
    return [f"{m.identity.name}: {phase} looks throttled: {tel.throttle.reason}"
            for phase, tel in _phases(m) if tel.throttle.throttled]
