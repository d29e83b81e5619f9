"""Energy per token, the idle baseline and the throttling check, from a phase's telemetry
samples and its requests' raw stamps (pure: no I/O, no clock).

A sample's power is the mean over its interval t0..t1, taken as constant within it: the
energy over a window [a, b] is the sum over samples of P_i x the overlap of [t0_i, t1_i] with
[a, b]. Prefill is each request's [t0, t_1], decode its [t_1, t_n]; the idle baseline (mean
power over the samples wholly inside the worker's idle wait before the phase) times each
window's length is subtracted. docs/runlog.md gives the definitions.
"""

from __future__ import annotations

from typing import Sequence

from macprof.measure.stats import median
from macprof.model.events import Event, Telemetry
from macprof.model.phases import Request
from macprof.model.records import record_fields
from macprof.model.telemetry import (Baseline, ColdEnergy, Energy, PhaseTelemetry, RequestEnergy, TelemetryRaw,
                                     TelemetrySample, Throttle)

GAP_NS = 1_000  # a window may lack this much sample coverage (stamp rounding) and still count
THROTTLE_DROP = 0.05  # decode falls by 5 % or more from the phase's early to its late requests
THROTTLE_TEMP_RISE_C = 2.0  # while the hottest sensor warms by 2 °C or more
PRESSURE_RANK = {"nominal": 0, "moderate": 1, "heavy": 2, "trapping": 3, "sleeping": 4}
ENERGY_DEFINITIONS = {
    "energy_j": "sum over telemetry samples of mean watts x overlap of the sample's interval with the window",
    "prefill_window": "[t0, t_1] of each measured request; decode_window: [t_1, t_n]",
    "baseline_w": "mean power of the samples wholly inside the idle wait before the phase (nothing running)",
    "prefill_j_per_token": "(prefill joules - baseline_w x prefill seconds) / computed prompt tokens",
    "decode_j_per_token": "(decode joules - baseline_w x decode seconds) / generated tokens after the first",
    "request_energy": "per measured request, E(t0, t_n), its prefill [t0, t_1] and decode [t_1, t_n] net of the "
                      "baseline; null with the reason where a window is shorter than the sampling period",
    "cold_energy": "E over the windows ready_s counts (spawn -> worker's first line, engine import -> ready), less a "
                   "baseline from the model's warm (else prefix) phase x those seconds",
    "throttle": f"decode median of the last third of requests {THROTTLE_DROP:.0%} or more below the first third's, "
                f"while the hottest sensor rose {THROTTLE_TEMP_RISE_C:g} degC or more or thermal pressure rose",
}


def integrate(samples: Sequence[TelemetrySample], domain: str, a: int, b: int) -> float | None:
    """Joules of ``domain`` over [a, b] (ns); None where the samples do not cover the window."""
    joules, covered = 0.0, 0
    for s in samples:
        lo, hi = max(s.t0, a), min(s.t1, b)
        watts = (s.watts or {}).get(domain)
        if hi <= lo or watts is None:
            continue
        joules += watts * (hi - lo) / 1e9
        covered += hi - lo
    return joules if b > a and covered >= (b - a) - GAP_NS else None


def telemetry_of(events: Sequence[Event], phase: str | None = None) -> list[TelemetryRaw]:
    """The telemetry the journal holds, of one phase where ``phase`` names it."""
    # filtered before a record is made of each: a build asks once per phase
    return [e.record() for e in events if isinstance(e, Telemetry) and (phase is None or getattr(e, "phase") == phase)]


def merged(raws: Sequence[TelemetryRaw]) -> TelemetryRaw | None:
    """One phase's telemetry from its records: a phase resumed in a second worker has two; the
    samples are pooled, the baseline window and the start readings are the first's."""
    if not raws:
        return None
    first, last = raws[0], raws[-1]
    return first.replace(t_end=last.t_end, power_source_end=last.power_source_end,
                         thermal_pressure_end=last.thermal_pressure_end, samples=tuple(s for r in raws for s in r.samples))


def power_reason(raw: TelemetryRaw) -> str:
    """Why the telemetry gives no power figure (the source's own word where it gave one)."""
    return raw.unavailable.get("power") or "no power figure from the telemetry source"


def baseline(raw: TelemetryRaw) -> Baseline:
    if raw.total_domain is None:
        return Baseline(reason=power_reason(raw))
    a, b = raw.t_idle_start, raw.t_start
    if a is None or b is None:
        return Baseline(reason="no idle wait was recorded before this phase")
    inside = [s for s in raw.samples if s.t0 >= a and s.t1 <= b and (s.watts or {}).get(raw.total_domain) is not None]
    span = sum(s.t1 - s.t0 for s in inside)
    if not inside or span <= 0:
        return Baseline(window_s=(b - a) / 1e9, reason="no sample fell wholly inside the idle wait")
    watts = sum((s.watts or {})[raw.total_domain] * (s.t1 - s.t0) for s in inside) / span
    return Baseline(watts=watts, window_s=(b - a) / 1e9, samples=len(inside))


def _windows(r: Request) -> tuple[tuple[int, int] | None, tuple[int, int] | None, int, int]:
    """(prefill window, decode window, prompt tokens computed, tokens decoded after the first)."""
    times, seqs = r.token_times, r.batch or 1
    if r.status != "ok" or not times:
        return None, None, 0, 0
    prompt = r.computed_prompt_tokens if r.computed_prompt_tokens is not None else r.prompt_tokens
    decode = (times[0], times[-1]) if len(times) > 1 else None
    return (r.t0, times[0]), decode, prompt or 0, (len(times) - 1) * seqs


def energy(requests: Sequence[Request], raw: TelemetryRaw | None, base: Baseline) -> Energy:
    if raw is None:
        return Energy(reason="no telemetry was recorded for this phase (a log from before telemetry, or none taken)")
    domain = raw.total_domain
    if domain is None:
        return Energy(reason=power_reason(raw))
    period_ns = int((raw.period_s or 0) * 1e9)
    sums = {"prefill": [0.0, 0, 0], "decode": [0.0, 0, 0]}  # joules, ns, tokens
    short = used = 0
    for r in requests:
        pre, dec, n_pre, n_dec = _windows(r)
        for part, win, tokens in (("prefill", pre, n_pre), ("decode", dec, n_dec)):
            if win is None:
                continue
            joules = integrate(raw.samples, domain, *win)
            if joules is None:
                return Energy(domain=domain, reason="the telemetry samples do not cover every request's window")
            acc = sums[part]
            acc[0], acc[1], acc[2] = acc[0] + joules, acc[1] + win[1] - win[0], acc[2] + tokens
            short += (win[1] - win[0]) < period_ns
        used += pre is not None
    return _energy_record(domain, sums, base, used, short, len(raw.samples), raw.period_s)


def _energy_record(domain: str, sums: dict, base: Baseline, used: int, short: int, samples: int,
                   period_s: float | None) -> Energy:
    if not used:
        return Energy(domain=domain, reason="no successful measured request")
    (pj, pns, ptok), (dj, dns, dtok) = sums["prefill"], sums["decode"]
    w = base.watts

    def net(joules: float, ns: int) -> float | None:
        return joules - w * ns / 1e9 if w is not None else None

    p_net, d_net = net(pj, pns), net(dj, dns)
    record = Energy(
        domain=domain, reason=None if w is not None else f"idle baseline unknown ({base.reason}): net joules unknown",
        baseline_w=w, prefill_j=p_net, decode_j=d_net, prefill_gross_j=pj, decode_gross_j=dj,
        prefill_s=pns / 1e9, decode_s=dns / 1e9, prefill_tokens=ptok, decode_tokens=dtok,
        prefill_j_per_token=p_net / ptok if p_net is not None and ptok else None,
        decode_j_per_token=d_net / dtok if d_net is not None and dtok else None,
        avg_w=(pj + dj) / ((pns + dns) / 1e9) if pns + dns else None, requests=used, samples=samples,
        short_windows=short)
    if short:
        record = record.replace(note=f"{short} prefill/decode windows are shorter than the sampling period "
                                     f"({period_s:g} s): per request the energy is not resolved; the phase's sums "
                                     f"over all its windows are")
    return record


def per_request(requests: Sequence[Request], raw: TelemetryRaw | None, base: Baseline) -> tuple[RequestEnergy, ...]:
    """Each measured request's energy where the samples resolve it: a window at least one
    sampling period long (shorter, the sample's mean power says nothing of that one request)."""
    if raw is None or raw.total_domain is None:
        return ()
    period_ns, out = int((raw.period_s or 0) * 1e9), []
    for r in requests:
        if r.status != "ok" or not r.token_times:
            continue
        tags = {k: getattr(r, k) for k in ("case", "mode") if r.has(k) and getattr(r, k) is not None}
        out.append(_request_energy(r, raw, base, period_ns).replace(index=r.index, kind=r.kind, **tags))
    return tuple(out)


def _request_energy(r: Request, raw: TelemetryRaw, base: Baseline, period_ns: int) -> RequestEnergy:
    domain, w = raw.total_domain or "", base.watts
    t0, t1, tn = r.t0, r.token_times[0], r.token_times[-1]
    found = RequestEnergy(seconds=(tn - t0) / 1e9)
    if tn - t0 < period_ns:
        return found.replace(reason=f"the request ({(tn - t0) / 1e9:.3g} s) is shorter than the sampling period "
                                    f"({raw.period_s:g} s): its energy is not resolved")
    gross = integrate(raw.samples, domain, t0, tn)
    if gross is None:
        return found.replace(reason="the telemetry samples do not cover the request")
    if w is None:
        return found.replace(gross_j=gross, reason=f"idle baseline unknown ({base.reason}): net joules unknown")

    def net(a: int, b: int) -> float | None:
        joules = integrate(raw.samples, domain, a, b) if b - a >= period_ns else None
        return None if joules is None else joules - w * (b - a) / 1e9

    pre, dec = net(t0, t1), net(t1, tn)
    tokens = (len(r.token_times) - 1) * (r.batch or 1)
    short = [name for name, part in (("prefill", pre), ("decode", dec)) if part is None]
    return found.replace(gross_j=gross, net_j=gross - w * (tn - t0) / 1e9, prefill_j=pre, decode_j=dec,
                         decode_j_per_token=dec / tokens if dec is not None and tokens else None,
                         reason=f"its {' and '.join(short)} window is shorter than the sampling period "
                                f"({raw.period_s:g} s): not resolved" if short else None)


def idle_baseline(raws: Sequence[TelemetryRaw]) -> tuple[Baseline | None, str | None]:
    """The idle power a cold trial's energy is set against: a cold worker waits for nothing
    before its requests, so the model's warm phase's baseline (else the prefix's), where measured."""
    for phase in ("warm", "prefix"):
        raw = merged([r for r in raws if r.phase == phase])
        base = baseline(raw) if raw else None
        if base and base.watts is not None:
            return base, phase
    return None, None


def cold_trial_energy(raws: Sequence[TelemetryRaw], windows: Sequence[tuple[int | None, int | None]],
                      base: tuple[Baseline | None, str | None]) -> dict:
    """``energy=`` for a cold trial whose worker's telemetry was journaled; nothing (the key
    stays absent) for a log from before telemetry."""
    return {"energy": cold_energy(merged(raws), windows, *base)} if raws else {}


def cold_energy(raw: TelemetryRaw | None, windows: Sequence[tuple[int | None, int | None]],
                base: Baseline | None, base_from: str | None) -> ColdEnergy:
    """A cold trial's energy over ``windows`` (those ready_s adds up), less ``base`` where known."""
    if raw is None:
        return ColdEnergy(reason="no telemetry was journaled for this trial")
    domain = raw.total_domain
    if domain is None:
        return ColdEnergy(reason=power_reason(raw))
    spans = [(a, b) for a, b in windows if a is not None and b is not None and b > a]
    if not spans or len(spans) < len(windows):
        return ColdEnergy(domain=domain, reason="the trial's start-up stamps are missing (it never became ready)")
    parts = [integrate(raw.samples, domain, a, b) for a, b in spans]
    if any(p is None for p in parts):
        return ColdEnergy(domain=domain, reason="the telemetry samples do not cover spawn to ready (a log recorded "
                                                "before the sampler kept a cold worker's start-up)")
    gross, seconds = sum(p or 0.0 for p in parts), sum(b - a for a, b in spans) / 1e9
    w = base.watts if base else None
    return ColdEnergy(domain=domain, seconds=seconds, gross_j=gross, baseline_w=w, baseline_from=base_from if w else None,
                      net_j=gross - w * seconds if w is not None else None, avg_w=gross / seconds,
                      samples=sum(1 for s in raw.samples if any(s.t1 > a and s.t0 < b for a, b in spans)),
                      reason=None if w is not None else "no idle baseline from the model's warm or prefix phase: "
                                                        "net joules unknown")


def _hottest(s: TelemetrySample) -> float | None:
    return max(s.temps_c.values()) if s.temps_c else None


def _thirds(values: list) -> tuple[list, list]:
    k = max(1, len(values) // 3)
    return values[:k], values[-k:]


def throttle(requests: Sequence[Request], raw: TelemetryRaw | None) -> Throttle:
    """Decode falling across the phase (first third of its requests against the last, in run
    order) while the hottest sensor warmed or the thermal pressure rose."""
    rates = [r.decode_tok_s for r in requests if r.status == "ok" and r.decode_tok_s]
    if len(rates) < 4:
        return Throttle(reason="fewer than 4 successful requests: no trend to read")
    early, late = (median(x) for x in _thirds(rates))
    drop = 1 - late / early if early else None
    inside = [s for s in (raw.samples if raw else ()) if raw and (raw.t_start or 0) <= s.t1 <= (raw.t_end or s.t1)]
    temps = [t for t in (_hottest(s) for s in inside) if t is not None]
    rise = None
    if len(temps) >= 2:
        t_early, t_late = _thirds(temps)
        rise = sum(t_late) / len(t_late) - sum(t_early) / len(t_early)
    levels = [p for p in [raw.thermal_pressure_start if raw else None, *(s.thermal_pressure for s in inside),
                          raw.thermal_pressure_end if raw else None] if p in PRESSURE_RANK]
    p_from, p_to = (levels[0], max(levels, key=PRESSURE_RANK.__getitem__)) if levels else (None, None)
    found = Throttle(decode_drop=drop, temp_rise_c=rise, pressure_from=p_from, pressure_to=p_to)
    if rise is None and p_from is None:
        return found.replace(reason="no temperature or thermal pressure was readable")
    hotter = rise is not None and rise >= THROTTLE_TEMP_RISE_C
    pressed = p_from is not None and p_to is not None and PRESSURE_RANK[p_to] > PRESSURE_RANK[p_from]
    if drop is not None and drop >= THROTTLE_DROP and (hotter or pressed):
        why = [f"temperature rose {rise:.1f} °C"] if hotter else []
        why += [f"thermal pressure went from {p_from} to {p_to}"] if pressed else []
        return found.replace(throttled=True, reason=f"decode fell {drop:.0%} while " + " and ".join(why))
    return found.replace(throttled=False)


def phase_telemetry(raws: Sequence[TelemetryRaw], requests: Sequence[Request], trend: bool = True) -> PhaseTelemetry | None:
    """The phase's telemetry record (None when none was journaled: a log from before it).
    ``trend``: whether its requests share one shape, so that their decode speeds form a trend
    (a sweep's cases do not)."""
    raw = merged(raws)
    if raw is None:
        return None
    base = baseline(raw)
    pressures = [p for p in [raw.thermal_pressure_start, *(s.thermal_pressure for s in raw.samples),
                             raw.thermal_pressure_end] if p in PRESSURE_RANK]
    temps = [t for t in (_hottest(s) for s in raw.samples) if t is not None]
    return PhaseTelemetry(**{f.name: getattr(raw, f.name) for f in record_fields(TelemetryRaw)}, baseline=base,
                          energy=energy(requests, raw, base), per_request=per_request(requests, raw, base),
                          thermal_pressure_max=max(pressures, key=PRESSURE_RANK.__getitem__) if pressures else None,
                          temp_max_c=max(temps) if temps else None,
                          throttle=throttle(requests, raw) if trend else Throttle(
                              reason="a sweep's cases differ in shape: their decode speeds form no single trend"))
