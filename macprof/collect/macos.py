"""macOS readings beyond the chip: the OS version, the power mode, the thermal state and the
GPU's recommended working set, each with the source it came from.

The parsers are pure and tested on outputs recorded on real Macs; what needs a Mac (a command,
a Foundation call) goes through a runner or a loader that the tests replace.
"""

from __future__ import annotations

import ctypes
import json
import platform
import re
import subprocess
import sys
from typing import Callable

from macprof.engines.ggml import GGML_DEVICE_GPU
# NSProcessInfoThermalState's words, in its order (Foundation, NSProcessInfo.h): the log's too
from macprof.model.vocab import THERMAL_STATES

Runner = Callable[[list[str]], "str | None"]

# `pmset -g`: `powermode` (macOS 12+ on the Macs that offer a High Power mode) or `lowpowermode`
# (the older key, 0/1); 2 is "high" (pmset -a powermode 2), 0 lets the system choose.
POWER_MODES = {0: "automatic", 1: "low", 2: "high"}

NS_THERMAL_SOURCE = "NSProcessInfo.thermalState"

PMSET_NO_LEVEL = ("pmset -g therm gave no thermal level (Apple Silicon prints 'No thermal warning level has been "
                  "recorded' even while throttling)")


def _run(cmd: list[str]) -> str | None:
    from macprof.collect.system import run_command

    return run_command(cmd)


# -- the OS version ------------------------------------------------------------------------
def os_version(run: Runner = _run) -> tuple[str | None, str]:
    """(version, source). `sw_vers` is right where platform.mac_ver() is not: a Python built
    against an older SDK reads 16.0 on macOS 26 (the compatibility version Apple reports to it)."""
    text = (run(["sw_vers", "-productVersion"]) or "").strip()
    if re.fullmatch(r"\d+(\.\d+)*", text):
        return text, "sw_vers -productVersion"
    fallback = platform.mac_ver()[0] or None
    return fallback, "platform.mac_ver() (sw_vers gave nothing; may read 16.0 on macOS 26)"


def os_major(version: str | None) -> int | None:
    m = re.match(r"(\d+)", version or "")
    return int(m.group(1)) if m else None


# -- power mode ----------------------------------------------------------------------------
def parse_power_mode(text: str) -> str | None:
    """`pmset -g`: 'automatic', 'low' or 'high'; None when neither key is printed."""
    for line in (text or "").splitlines():
        m = re.match(r"\W*(lowpowermode|powermode)\s+(\d+)", line.strip().strip("*"))
        if m:
            return POWER_MODES.get(int(m.group(2)), f"unknown ({m.group(1)} {m.group(2)})")
    return None


# -- thermal state -------------------------------------------------------------------------
def parse_pmset_therm(text: str) -> str | None:
    """`pmset -g therm`: only an Intel Mac's CPU_Speed_Limit says anything; Apple Silicon prints
    'No thermal warning level has been recorded' whatever its state, which is not 'nominal'."""
    m = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text or "")
    if m:
        return "nominal" if int(m.group(1)) >= 100 else f"throttled (CPU speed limit {m.group(1)}%)"
    return None


def _ns_thermal_state() -> int:
    """NSProcessInfo.processInfo.thermalState through the Objective-C runtime (no PyObjC):
    objc_msgSend is called through prototypes of the exact signature, as arm64 requires."""
    objc = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
    ctypes.CDLL("/System/Library/Frameworks/Foundation.framework/Foundation")  # registers NSProcessInfo
    objc.objc_getClass.restype = ctypes.c_void_p
    objc.objc_getClass.argtypes = [ctypes.c_char_p]
    objc.sel_registerName.restype = ctypes.c_void_p
    objc.sel_registerName.argtypes = [ctypes.c_char_p]
    address = ctypes.cast(objc.objc_msgSend, ctypes.c_void_p).value
    if not address:
        raise OSError("objc_msgSend not found")
    send_id = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(address)
    send_long = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)(address)
    info = send_id(objc.objc_getClass(b"NSProcessInfo"), objc.sel_registerName(b"processInfo"))
    if not info:
        raise OSError("NSProcessInfo.processInfo returned nil")
    return int(send_long(info, objc.sel_registerName(b"thermalState")))


def thermal_state(read: Callable[[], int] = _ns_thermal_state, run: Runner = _run) -> tuple[str | None, str]:
    """(state, source or, when None, the reason). The OS's own thermal state first; pmset only
    where it gives a level (Intel)."""
    if sys.platform != "darwin" and read is _ns_thermal_state:
        return None, "not read on this OS"
    try:
        value = read()
        if 0 <= value < len(THERMAL_STATES):
            return THERMAL_STATES[value], NS_THERMAL_SOURCE
        reason = f"NSProcessInfo.thermalState gave {value}, not a known state"
    except (OSError, AttributeError, ValueError) as exc:
        reason = f"NSProcessInfo.thermalState could not be read ({exc})"
    state = parse_pmset_therm(run(["pmset", "-g", "therm"]) or "")
    if state is not None:
        return state, "pmset -g therm (CPU_Speed_Limit)"
    return None, f"{reason}; {PMSET_NO_LEVEL}"


# -- the GPU's recommended working set -----------------------------------------------------
_MLX_QUERY = ("import json, mlx.core as mx; f = getattr(mx, 'device_info', None) or mx.metal.device_info; "
              "print(json.dumps({k: v for k, v in f().items() if isinstance(v, int)}))")
_GGML_QUERY = ("import json, llama_cpp; from macprof.engines.llama_cpp_facts import ggml_devices; "
               "llama_cpp.llama_backend_init(); print(json.dumps(ggml_devices()))")


def _python(code: str) -> str | None:
    """Run a query in a fresh interpreter: the parent loads no Metal device and holds no buffer."""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def parse_mlx_working_set(text: str | None) -> int | None:
    try:
        value = json.loads(text or "").get("max_recommended_working_set_size")
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def parse_ggml_working_set(text: str | None) -> tuple[int | None, str | None]:
    """(bytes, device name) of the first GPU device; Metal reports recommendedMaxWorkingSetSize
    as its total (ggml-metal-device.m)."""
    try:
        devices = json.loads(text or "")
    except ValueError:
        return None, None
    for d in devices if isinstance(devices, list) else []:
        if isinstance(d, dict) and d.get("type") == GGML_DEVICE_GPU and int(d.get("total_bytes") or 0) > 0:
            return int(d["total_bytes"]), str(d.get("description") or d.get("name"))
    return None, None


def gpu_working_set(python: Callable[[str], str | None] = _python) -> tuple[int | None, str]:
    """(bytes, source or, when None, the reason): Metal's recommendedMaxWorkingSetSize, the
    memory the GPU can keep resident, read through MLX or else through llama.cpp."""
    size = parse_mlx_working_set(python(_MLX_QUERY))
    if size:
        return size, "mlx device_info max_recommended_working_set_size"
    size, name = parse_ggml_working_set(python(_GGML_QUERY))
    if size:
        return size, f"llama.cpp ggml_backend_dev_memory total ({name}: Metal recommendedMaxWorkingSetSize)"
    return None, "neither MLX nor llama.cpp reported a GPU working set"
