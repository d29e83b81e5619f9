"""Telemetry records: the raw samples the parent takes while a phase runs, and what the
analyse layer derives from them (idle baseline, energy per token, the throttling check).
docs/runlog.md defines every field; collect/telemetry.py says where each comes from."""

from __future__ import annotations

from msgspec import field

from macprof.model.records import ABSENT, Number, Record
from macprof.model.kind import OWN, TEXT, VOCAB


class TelemetrySample(Record):
    """One sampling interval t0..t1 (perf_counter_ns): ``watts`` are each domain's mean power
    over it; temperatures, pressure and GPU figures are read at t1. A figure the source cannot
    give is absent from its dict or null."""

    KINDS = {"watts": TEXT, "temps_c": TEXT, "thermal_pressure": VOCAB}

    t0: int
    t1: int
    watts: dict[str, Number] | None = None
    temps_c: dict[str, Number] | None = None
    thermal_pressure: str | None = None
    gpu_usage: Number | None = None
    gpu_mhz: int | None = None


class TelemetryRaw(Record):
    """What the parent journals for one phase: the source, what it could not give and why, the
    phase's stamps (the worker's), its two boundary readings and every sample."""

    KINDS = {"phase": VOCAB, "source": VOCAB, "total_domain": VOCAB, "domains": VOCAB, "unavailable": OWN,
             "power_source_start": VOCAB, "power_source_end": VOCAB, "thermal_pressure_start": VOCAB,
             "thermal_pressure_end": VOCAB}

    phase: str = ""
    source: str | None = None
    total_domain: str | None = None
    domains: tuple[str, ...] = ()
    unavailable: dict[str, str] = field(default_factory=dict)
    period_s: Number | None = None
    t_idle_start: int | None = None  # the worker's idle wait before the phase began (baseline window)
    t_start: int | None = None
    t_end: int | None = None
    power_source_start: str | None = None
    power_source_end: str | None = None
    thermal_pressure_start: str | None = None
    thermal_pressure_end: str | None = None
    samples: tuple[TelemetrySample, ...] = ()


class Baseline(Record):
    """Idle power before the phase: the mean over the samples wholly inside the idle window."""

    KINDS = {"reason": OWN}

    watts: Number | None = None
    window_s: Number | None = None
    samples: int = 0
    reason: str | None = None


class Energy(Record):
    """Joules of the total domain over the requests' prefill windows [t0, t_1] and decode
    windows [t_1, t_n], less the idle baseline over the same time; null with ``reason`` where
    unknown."""

    KINDS = {"reason": OWN, "domain": VOCAB, "note": OWN}

    reason: str | None = None
    domain: str | None = None
    baseline_w: Number | None = None
    prefill_j: Number | None = None
    decode_j: Number | None = None
    prefill_gross_j: Number | None = None
    decode_gross_j: Number | None = None
    prefill_s: Number | None = None
    decode_s: Number | None = None
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_j_per_token: Number | None = None
    decode_j_per_token: Number | None = None
    avg_w: Number | None = None
    requests: int = 0
    samples: int = 0
    short_windows: int = 0  # windows shorter than the sampling period: per request unresolved
    note: str | None = ABSENT


class RequestEnergy(Record):
    """One measured request's energy, attributed by overlap like the phase's; a window shorter
    than the sampling period is not resolved (a sample's power is its interval's mean), so its
    figure is null with ``reason``. Net figures subtract the phase's idle baseline."""

    KINDS = {"kind": VOCAB, "case": VOCAB, "mode": VOCAB, "reason": OWN}

    index: int | None = None
    kind: str | None = None
    case: str | None = ABSENT  # a sweep's case id
    mode: str | None = ABSENT  # prefix: reuse / noreuse
    seconds: Number | None = None  # t_n - t0
    gross_j: Number | None = None  # E(t0, t_n)
    net_j: Number | None = None
    prefill_j: Number | None = None  # net, over [t0, t_1]
    decode_j: Number | None = None  # net, over [t_1, t_n]
    decode_j_per_token: Number | None = None
    reason: str | None = None


class ColdEnergy(Record):
    """A cold trial's energy from spawn to ready (the windows ready_s counts: spawn -> the
    worker's first line, then the engine's import -> tokenizer loaded), less an idle baseline
    where the model's warm (else prefix) phase measured one: a cold worker has no idle wait."""

    KINDS = {"reason": OWN, "domain": VOCAB, "baseline_from": VOCAB}

    reason: str | None = None
    domain: str | None = None
    seconds: Number | None = None
    gross_j: Number | None = None
    baseline_w: Number | None = None
    baseline_from: str | None = None
    net_j: Number | None = None
    avg_w: Number | None = None
    samples: int = 0


class Throttle(Record):
    """Decode speed falling across the phase while temperature or thermal pressure rose.
    ``throttled`` is null when it cannot be told (too few requests, no temperature or pressure)."""

    KINDS = {"reason": OWN, "pressure_from": VOCAB, "pressure_to": VOCAB}

    throttled: bool | None = None
    reason: str | None = None
    decode_drop: Number | None = None  # 1 - late median / early median of decode tok/s
    temp_rise_c: Number | None = None
    pressure_from: str | None = None
    pressure_to: str | None = None


class PhaseTelemetry(TelemetryRaw):
    """A phase's telemetry in the run log: the raw journal record plus the derived figures."""

    KINDS = {"thermal_pressure_max": VOCAB}

    baseline: Baseline = field(default_factory=Baseline)
    energy: Energy = field(default_factory=Energy)
    thermal_pressure_max: str | None = None
    temp_max_c: Number | None = None
    throttle: Throttle = field(default_factory=Throttle)
    per_request: tuple[RequestEnergy, ...] | None = ABSENT  # absent from logs before it
