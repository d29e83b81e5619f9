"""macOS telemetry: power, GPU use and temperatures from macmon-lib (IOReport and the SMC,
without sudo), thermal pressure from notify(3), the power source from pmset.

macmon-lib is a macOS arm64 dependency, imported only here and only when asked, so that
macprof installs and runs everywhere else. Its ``Sampler.metrics()`` returns, for each IOReport
"Energy Model" channel, the energy since the previous call divided by the time since it
(macmon's IOReport.get_sample: IOReportCreateSamplesDelta over the two samples, watts() = delta /
duration), so a sample's power is the mean over the interval since the one before, and
energy = sum of P_i x dt_i. Its ``package`` is cpu + gpu + ane + ram + gpu_ram. Temperatures are
averages over the CPU and GPU sensors, 0 where a chip exposes none (macmon's zero_div), which
is read here as unknown.
"""

from __future__ import annotations

import ctypes
import importlib
import ctypes.util
from typing import Any

from macprof.collect.machine import parse_pmset_batt
from macprof.collect.system import run_command

# OSThermalNotification.h, macOS values of OSThermalPressureLevel (iOS uses 0, 10, 20, ...)
PRESSURE_LEVELS = {0: "nominal", 1: "moderate", 2: "heavy", 3: "trapping", 4: "sleeping"}
PRESSURE_NAME = b"com.apple.system.thermalpressurelevel"  # kOSThermalNotificationPressureLevelName


def open_macmon(module: Any = None) -> tuple[Any, str | None, str | None]:
    """(sampler, library version, None), or (None, None, why not): not installed, or a Mac
    where it cannot initialise (the library's own message)."""
    try:
        lib = module if module is not None else importlib.import_module("macmon")  # macOS arm64 only
        sampler = lib.Sampler()
    except ImportError as exc:
        return None, None, f"macmon-lib is not installed ({exc}); pip install macmon-lib"
    except Exception as exc:  # noqa: BLE001 - MacmonError and whatever its FFI raises: record it
        return None, None, f"macmon-lib could not start: {type(exc).__name__}: {exc}"
    return sampler, _version(), None


def _version() -> str | None:
    try:
        from importlib.metadata import version
        return version("macmon-lib")
    except Exception:  # noqa: BLE001 - a version is a label, never a reason to fail
        return None


def read_macmon(sampler: Any) -> dict:
    """One macmon sample as macprof's fields: watts by domain (means over the interval since
    the previous call), temperatures in °C, GPU use (0..1) and frequency."""
    m = sampler.metrics()
    p = m.power
    watts = {"package": p.package, "cpu": p.cpu, "gpu": p.gpu, "ane": p.ane, "dram": p.ram, "gpu_sram": p.gpu_ram}
    temps = {k: v for k, v in (("cpu_average", m.temperature.cpu_average), ("gpu_average", m.temperature.gpu_average))
             if v and v > 0}
    gpu = m.gpu_usage[0] if m.gpu_usage else None
    return {"watts": {k: float(v) for k, v in watts.items()}, "temps_c": temps or None,
            "gpu_usage": float(gpu.usage) if gpu else None, "gpu_mhz": int(gpu.frequency_mhz) if gpu else None}


class ThermalPressure:
    """The system's thermal pressure level through notify(3): notify_register_check once,
    then notify_get_state per reading (a syscall, no subprocess). ``lib`` is libSystem, or a
    fake with the same two functions in tests."""

    def __init__(self, lib: Any = None) -> None:
        self.reason: str | None = None
        self._lib = lib
        self._token = ctypes.c_int(0)
        try:
            if self._lib is None:
                self._lib = ctypes.CDLL(ctypes.util.find_library("System") or "/usr/lib/libSystem.B.dylib")
            status = self._lib.notify_register_check(PRESSURE_NAME, ctypes.byref(self._token))
        except (OSError, AttributeError) as exc:
            self.reason = f"notify(3) unavailable: {exc}"
            return
        if status != 0:
            self.reason = f"notify_register_check({PRESSURE_NAME.decode()}) returned {status}"

    def read(self) -> str | None:
        if self.reason is not None:
            return None
        state = ctypes.c_uint64(0)
        if self._lib.notify_get_state(self._token, ctypes.byref(state)) != 0:
            return None
        return PRESSURE_LEVELS.get(state.value, f"level {state.value}")


def power_source() -> tuple[str | None, str | None]:
    """"ac" or "battery" from `pmset -g batt` ("Now drawing from 'AC Power'"); run at phase
    boundaries only: a subprocess per sample would perturb what is measured."""
    text = run_command(["pmset", "-g", "batt"])
    if not text:
        return None, "pmset -g batt gave nothing"
    found = parse_pmset_batt(text)
    return (found, None) if found else (None, "pmset -g batt did not name the power source")
