"""The parent's telemetry sampler, beside its RSS sampler (run/watch.py).

While a worker runs, ``tick`` takes a sample from the run's telemetry source at most every
TELEMETRY_PERIOD_S (the watch loop wakes at least every RSS_PERIOD_S, so the period holds). A
phase's boundaries take the slower readings (the power source). At a phase's end its samples,
from the start of the idle wait before it to its end, become one ``telemetry`` event; nothing is
journaled per sample, so the sampler adds no fsync to the phase it measures. A cold trial's
worker (``from_spawn``) keeps every sample from before its spawn on: its phase's event then
covers spawn to ready as well, the cold trial's energy (analyse/energy.py, cold_energy).
"""

from __future__ import annotations

import time

from macprof.collect.telemetry import TELEMETRY_PERIOD_S, Source
from macprof.model import events as ev
from macprof.model.telemetry import TelemetryRaw, TelemetrySample

KEEP_BEFORE_PHASE = 64  # samples kept between phases (the idle wait needs a few; loading needs none)


class TelemetrySampler:
    def __init__(self, source: Source, period_s: float = TELEMETRY_PERIOD_S, from_spawn: bool = False) -> None:
        self.source = source
        # created before the worker is spawned: the first interval starts before t_spawn
        self.t_from: int | None = time.perf_counter_ns() if from_spawn else None
        self.period_ns = int(period_s * 1e9)
        self.period_s = period_s
        self.samples: list[TelemetrySample] = []
        self.start: ev.PhaseStart | None = None
        self.boundary: dict = {}
        self._next = time.perf_counter_ns() + self.period_ns
        source.sample()  # the first interval starts now, not at the source's opening

    def tick(self, force: bool = False) -> None:
        now = time.perf_counter_ns()
        if now < self._next and not force:
            return
        self._next = now + self.period_ns
        self.samples.append(TelemetrySample(**self.source.sample()))
        if self.start is None and self.t_from is None and len(self.samples) > KEEP_BEFORE_PHASE:
            del self.samples[:-KEEP_BEFORE_PHASE]

    def phase_start(self, event: ev.PhaseStart) -> None:
        self.start, self.boundary = event, self.source.boundary()

    def phase_end(self, event: ev.PhaseEnd) -> ev.Telemetry:
        """The phase's telemetry event: its samples that overlap the idle wait or the phase."""
        self.tick(force=True)  # the last interval reaches past the phase's end
        end = self.source.boundary()
        start = self.start
        t_from = self.t_from or ((start.t_idle_start or start.t) if start else None)
        kept = tuple(s for s in self.samples if t_from is None or s.t1 > t_from)
        self.samples, self.start, self.t_from = [], None, None
        return ev.Telemetry.of(TelemetryRaw(
            phase=event.phase, source=self.source.name, total_domain=self.source.total,
            domains=tuple(self.source.domains), unavailable=dict(self.source.unavailable), period_s=self.period_s,
            t_idle_start=start.t_idle_start if start else None, t_start=start.t if start else None, t_end=event.t,
            power_source_start=self.boundary.get("power_source"), power_source_end=end.get("power_source"),
            thermal_pressure_start=self.boundary.get("thermal_pressure"),
            thermal_pressure_end=end.get("thermal_pressure"), samples=kept))
