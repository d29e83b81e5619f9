"""Telemetry over time: one source per run, sampled by the parent beside its RSS sampler.

A source gives two kinds of reading. ``sample()`` is cheap (file reads, one library call, one
syscall; never a subprocess) and is taken every TELEMETRY_PERIOD_S while a worker runs: the mean
power of each domain over the interval since the previous sample (``t0``..``t1``, perf_counter_ns,
the clock of the request stamps), temperatures, thermal pressure, GPU use. ``boundary()`` may run
a command (pmset) and is taken only at a phase's start and end: the power source.

What a source cannot give is listed in ``unavailable`` (figure -> reason), never guessed:

- macOS: macmon-lib (power by domain, GPU use and frequency, temperatures), notify(3) (thermal
  pressure), pmset (power source); see collect/power_macos.py.
- Linux: RAPL through powercap, thermal zones, power_supply; see collect/power_linux.py.
- elsewhere: nothing, with the reason.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from macprof.collect import power_linux

TELEMETRY_PERIOD_S = 0.25  # slower than the RSS sampler: a power figure needs an interval to mean anything
IDLE_BASELINE_S = 1.0  # the worker sits idle this long before each phase when power is readable


class Source:
    """No telemetry at all: every figure unavailable, with ``reason``."""

    name: str | None = None
    total: str | None = None  # the domain whose energy is attributed to requests
    domains: tuple[str, ...] = ()

    def __init__(self, reason: str = "") -> None:
        self.unavailable: dict[str, str] = {k: reason for k in ("power", "temperature", "thermal_pressure",
                                                                "power_source", "gpu")} if reason else {}
        self._last = time.perf_counter_ns()

    @property
    def has_power(self) -> bool:
        return self.total is not None

    def read(self, seconds: float) -> dict:  # the figures of one interval of ``seconds``, without its stamps
        return {}

    def sample(self) -> dict:
        t1 = time.perf_counter_ns()
        fields = self.read((t1 - self._last) / 1e9)
        t0, self._last = self._last, t1
        return {"t0": t0, "t1": t1, **fields}

    def boundary(self) -> dict:
        return {"power_source": None, "thermal_pressure": None}

    def close(self) -> None:
        pass


class LinuxSource(Source):
    def __init__(self, powercap=power_linux.POWERCAP, thermal=power_linux.THERMAL,
                 supply=power_linux.POWER_SUPPLY) -> None:
        super().__init__()
        self.supply = supply
        self.rapl, why = power_linux.open_rapl(powercap)
        if self.rapl is None:
            self.unavailable["power"] = why or "no RAPL"
        else:
            names = [d.name for d in self.rapl.domains]
            self.parts = ["psys"] if "psys" in names else [n for n in names if n.startswith(("package", "dram"))]
            self.total, self.domains = "total", ("total", *names)
            self.name = f"linux powercap RAPL (total = {' + '.join(self.parts)})"
            self._counters = self.rapl.read()
        self.zones, why = power_linux.thermal_zones(thermal)
        if why:
            self.unavailable["temperature"] = why
        self.unavailable["thermal_pressure"] = "Linux has no thermal pressure level (temperatures only)"
        self.unavailable["gpu"] = "GPU use and frequency are read on macOS only"
        if self.name is None:
            self.name = "linux sysfs" if self.zones else None
        self._last = time.perf_counter_ns()

    def read(self, seconds: float) -> dict:
        out: dict[str, Any] = {}
        if self.rapl is not None:
            now = self.rapl.read()
            watts = self.rapl.watts(self._counters, now, seconds)
            self._counters = now
            if all(p in watts for p in self.parts):
                watts["total"] = sum(watts[p] for p in self.parts)
            out["watts"] = watts or None
        if self.zones:
            out["temps_c"] = power_linux.read_temps(self.zones) or None
        return out

    def boundary(self) -> dict:
        found, why = power_linux.power_source(self.supply)
        if why:
            self.unavailable["power_source"] = why
        return {"power_source": found, "thermal_pressure": None}


class MacSource(Source):
    def __init__(self, module: Any = None, notify_lib: Any = None) -> None:
        super().__init__()
        from macprof.collect import power_macos

        self._mac = power_macos
        self.sampler, version, why = power_macos.open_macmon(module)
        if self.sampler is None:
            for k in ("power", "temperature", "gpu"):
                self.unavailable[k] = why or "macmon-lib unavailable"
        else:
            self.name, self.total = f"macmon-lib {version or '(version unknown)'}", "package"
            self.domains = ("package", "cpu", "gpu", "ane", "dram", "gpu_sram")
        self.pressure = power_macos.ThermalPressure(notify_lib)
        if self.pressure.reason:
            self.unavailable["thermal_pressure"] = self.pressure.reason
        self._last = time.perf_counter_ns()  # macmon's first interval runs from Sampler()

    def read(self, seconds: float) -> dict:
        out: dict[str, Any] = {"thermal_pressure": self.pressure.read()}
        if self.sampler is not None:
            try:
                out.update(self._mac.read_macmon(self.sampler))
            except Exception as exc:  # noqa: BLE001 - a failed sample is a gap, with the library's message
                self.unavailable.setdefault("sample_errors", f"{type(exc).__name__}: {exc}")
        return out

    def boundary(self) -> dict:
        found, why = self._mac.power_source()
        if why:
            self.unavailable["power_source"] = why
        return {"power_source": found, "thermal_pressure": self.pressure.read()}

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


def open_source(platform: str | None = None) -> Source:
    """The telemetry source of this OS; on a Mac that is not arm64 macmon-lib is not installed
    and says so."""
    platform = platform or sys.platform
    if platform == "darwin":
        return MacSource()
    if platform.startswith("linux"):
        return LinuxSource()
    return Source(f"no telemetry source on {platform}")
