"""The process's own peak RSS as the OS keeps it (its high-water mark), read by the worker.

Linux keeps VmHWM in /proc/self/status and resets it to the current RSS when "5" is written to
/proc/self/clear_refs (proc(5)), so a phase's peak is exact whatever the parent's sampling
rate. macOS keeps only the lifetime maximum (getrusage ru_maxrss, in bytes there): a phase's
peak cannot be isolated from it, so it is reported with the scope "process" and the parent's
samples stay the phase figure.
"""

from __future__ import annotations

import resource
import sys


def reset() -> bool:
    """Start a new high-water mark at the current RSS; False where the OS cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def read(was_reset: bool) -> tuple[int | None, str | None]:
    """(peak bytes, scope): scope "phase" when measured since ``reset()`` succeeded, "process"
    for a lifetime maximum, (None, None) when the OS gives nothing."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024, "phase" if was_reset else "process"
        except (OSError, ValueError, IndexError):
            return None, None
        return None, None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (int(peak) if sys.platform == "darwin" else int(peak) * 1024), "process"
