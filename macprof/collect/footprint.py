"""macOS physical footprint of a process: what Activity Monitor's Memory column shows.

RSS misses what a process holds on the GPU (Metal buffers: MLX's arrays, llama.cpp's offloaded
weights and KV cache live in unified memory but outside the resident pages RSS counts); the
kernel's phys_footprint ledger counts them. ``proc_pid_rusage(pid, RUSAGE_INFO_V4, &info)``
(libproc) gives it as ``ri_phys_footprint``, with ``ri_lifetime_max_phys_footprint``, the
process's peak since launch. The struct below is ``struct rusage_info_v4`` of the macOS SDK's
<sys/resource.h>, field for field; tests/test_footprint.py checks its size and offsets.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Callable

RUSAGE_INFO_V4 = 4
_U64 = ctypes.c_uint64


class RusageInfoV4(ctypes.Structure):
    _fields_ = [("ri_uuid", ctypes.c_uint8 * 16)] + [(name, _U64) for name in (
        "ri_user_time", "ri_system_time", "ri_pkg_idle_wkups", "ri_interrupt_wkups", "ri_pageins",
        "ri_wired_size", "ri_resident_size", "ri_phys_footprint", "ri_proc_start_abstime",
        "ri_proc_exit_abstime", "ri_child_user_time", "ri_child_system_time", "ri_child_pkg_idle_wkups",
        "ri_child_interrupt_wkups", "ri_child_pageins", "ri_child_elapsed_abstime", "ri_diskio_bytesread",
        "ri_diskio_byteswritten", "ri_cpu_time_qos_default", "ri_cpu_time_qos_maintenance",
        "ri_cpu_time_qos_background", "ri_cpu_time_qos_utility", "ri_cpu_time_qos_legacy",
        "ri_cpu_time_qos_user_initiated", "ri_cpu_time_qos_user_interactive", "ri_billed_system_time",
        "ri_serviced_system_time", "ri_logical_writes", "ri_lifetime_max_phys_footprint", "ri_instructions",
        "ri_cycles", "ri_billed_energy", "ri_serviced_energy", "ri_interval_max_phys_footprint",
        "ri_runnable_time")]


_libproc = None


def _rusage(pid: int) -> RusageInfoV4 | None:
    global _libproc
    if _libproc is None:
        _libproc = ctypes.CDLL("/usr/lib/libproc.dylib", use_errno=True)
        _libproc.proc_pid_rusage.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        _libproc.proc_pid_rusage.restype = ctypes.c_int
    info = RusageInfoV4()
    if _libproc.proc_pid_rusage(pid, RUSAGE_INFO_V4, ctypes.byref(info)) != 0:
        return None  # the process is gone, or not ours
    return info


def read(pid: int, rusage: Callable[[int], RusageInfoV4 | None] | None = None,
         platform: str = sys.platform) -> tuple[int | None, int | None]:
    """(phys_footprint, lifetime max phys_footprint) of ``pid`` in bytes; (None, None) off macOS
    or when the OS refuses."""
    if platform != "darwin":
        return None, None
    try:
        info = (rusage or _rusage)(pid)
    except OSError:
        return None, None
    if info is None:
        return None, None
    return int(info.ri_phys_footprint), int(info.ri_lifetime_max_phys_footprint)


def phase_peak(sampled: int | None, max_at_start: int | None, max_at_end: int | None) -> int | None:
    """A phase's peak footprint: the largest sample, or the process's lifetime maximum when that
    rose during the phase (then the phase holds the process's peak, and the kernel caught it
    exactly, spikes between two samples included)."""
    exact = max_at_end if max_at_end is not None and max_at_start is not None and max_at_end > max_at_start else None
    known = [v for v in (sampled, exact) if v]
    return max(known) if known else None
