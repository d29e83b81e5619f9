"""What llama.cpp is given and reports back, and what its memory allows, apart from the
adapter's decode loop (macprof/engines/llama_cpp.py): the default thread count, ggml's devices,
the load facts recorded in the run log, and whether a KV memory can be cut back."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp as lc

from macprof.collect.macos import GGML_DEVICE_GPU


def default_threads(platform: str = sys.platform, sysctl=None) -> tuple[int, str]:
    """llama-bench's default thread count (common_cpu_get_num_math) and where it came from: on
    macOS the fastest level's cores only (sysctl hw.perflevel0.physicalcpu, as llama.cpp's
    common_cpu_get_num_physical_cores reads it: the Performance cores to M4, the Super ones from
    M5 on, an M5 Pro/Max's Performance cores being its second level); elsewhere the physical
    cores (psutil)."""
    if platform == "darwin":
        text = (sysctl or _sysctl)("hw.perflevel0.physicalcpu")
        if text and text.strip().isdigit() and int(text) > 0:
            return int(text), "sysctl hw.perflevel0.physicalcpu (the fastest cores, llama-bench's default)"
    try:
        import psutil

        cores = psutil.cpu_count(logical=False)
        if cores:
            return cores, "psutil physical cores"
    except ImportError:
        pass
    return os.cpu_count() or 1, "os.cpu_count() (logical cores)"


def _sysctl(key: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def ggml_devices() -> list[dict]:
    """ggml's backend devices (name, description, type: 0 CPU, 1 GPU, 2 IGPU, 3 ACCEL, 4 META as
    collect/macos.py's GGML_DEVICE_TYPES lists them; total memory, which Metal gives as
    recommendedMaxWorkingSetSize), read through ggml's own C API:
    llama-cpp-python binds none of it, the library it loaded exports it."""
    lib = Path(lc.__file__).parent / "lib"
    path = next((lib / n for n in ("libggml.dylib", "libggml.so") if (lib / n).exists()), None)
    if path is None:
        return []
    ggml, c = ctypes.CDLL(str(path)), ctypes
    ggml.ggml_backend_dev_count.restype = c.c_size_t
    ggml.ggml_backend_dev_get.restype, ggml.ggml_backend_dev_get.argtypes = c.c_void_p, [c.c_size_t]
    ggml.ggml_backend_dev_type.argtypes = [c.c_void_p]
    for fn in (ggml.ggml_backend_dev_name, ggml.ggml_backend_dev_description):
        fn.restype, fn.argtypes = c.c_char_p, [c.c_void_p]
    ggml.ggml_backend_dev_memory.argtypes = [c.c_void_p, c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)]
    out = []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        free, total = c.c_size_t(), c.c_size_t()
        ggml.ggml_backend_dev_memory(dev, c.byref(free), c.byref(total))
        out.append({"name": (ggml.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
                    "description": (ggml.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                    "type": int(ggml.ggml_backend_dev_type(dev)), "total_bytes": int(total.value)})
    return out


def load_facts(model, mparams, cparams, devices=None) -> dict:
    """What llama.cpp was given and reports back, so two logs can be compared: the devices, the
    layers asked on the GPU and the layers the model has, flash attention, mmap / mlock."""
    try:
        devices = ggml_devices() if devices is None else devices
    except (OSError, AttributeError) as exc:
        devices = [{"error": f"ggml device list unreadable: {exc}"}]
    n_layer = int(lc.llama_model_n_layer(model))
    asked = int(mparams.n_gpu_layers)
    gpus = [d for d in devices if d.get("type") == GGML_DEVICE_GPU]
    offload = bool(lc.llama_supports_gpu_offload()) and bool(gpus)
    # llama.cpp's load_tensors puts min(n_gpu_layers, n_layer + 1) layers (the output layer
    # counts as one) on the GPU, all of them for a negative value
    offloaded = (n_layer + 1 if asked < 0 else min(asked, n_layer + 1)) if offload else 0
    return {"devices": devices, "gpu_offload": offload, "n_gpu_layers": asked, "n_layer": n_layer,
            "offloaded_layers": offloaded, "flash_attn": _enum_name(lc, "llama_flash_attn_type_name", cparams.flash_attn_type),
            "load_mode": _load_mode(mparams)}


def _enum_name(module, fn: str, value: int) -> str:
    name = getattr(module, fn, lambda v: None)(int(value))
    return name.decode() if name else str(int(value))


def _load_mode(mparams) -> str:
    """The load mode passed: llama.cpp's own name for its load_mode enum (auto, none, mmap,
    mlock, mmap+mlock, direct_io; "auto" is resolved inside llama.cpp, which does not report
    its choice), or from use_mmap / use_mlock in the llama.cpp of before that enum."""
    if hasattr(mparams, "load_mode"):
        return _enum_name(lc, "llama_load_mode_name", mparams.load_mode)
    mmap = bool(mparams.use_mmap) and bool(lc.llama_supports_mmap())
    return "+".join([m for m, on in (("mmap", mmap), ("mlock", bool(mparams.use_mlock))) if on]) or "none"


def weights_held(load_mode: str, supports_mmap: bool) -> str:
    """"mapped" or "copied" (engines/base.py WEIGHTS_HELD) from the load mode passed. llama.cpp's
    "auto" maps the file unless a device lacks mmap support (llama-model.cpp, load_tensors:
    use_mmap is dropped then; ggml-cpu and ggml-metal both report mmap_support), and, mapped,
    hands the mapping itself to the backends (buffer_from_host_ptr: Metal wraps the pages, it
    does not copy them); "none" and "direct_io" read the weights into buffers of their own."""
    if load_mode == "auto":
        return "mapped" if supports_mmap else "copied"
    return "mapped" if "mmap" in load_mode.split("+") else "copied"


def cut_refusal(held: int, n_tokens: int, *, recurrent: bool, hybrid: bool, n_swa: int, swa_full: bool,
                pos_min: int) -> str | None:
    """Whether a memory holding positions [pos_min, held) can be cut back to its first
    ``n_tokens`` (None) or why not. A recurrent state can only be extended or emptied (llama.cpp's
    seq_rm refuses a partial removal; its per-token rollback is off at n_rs_seq = 0). A
    sliding-window cache that is not full size keeps only the last n_swa positions: the next
    token after the cut needs those from n_tokens - n_swa on (the test llama.cpp's server makes
    before it reuses a slot's prompt, pos_min against pos_next - n_swa)."""
    if n_tokens >= held:
        return None
    if (recurrent or hybrid) and n_tokens > 0:
        kind = "recurrent" if recurrent else "hybrid (attention + recurrent)"
        return (f"llama.cpp {kind} memory: its state holds {held} tokens and cannot be rewound to {n_tokens} "
                f"(llama_memory_seq_rm refuses a partial removal)")
    need = max(0, n_tokens - n_swa)
    if n_swa and n_tokens > 0 and pos_min > need:  # swa_full (the default) keeps every position: pos_min 0
        return (f"llama.cpp sliding-window cache (n_swa {n_swa}, swa_full {'on' if swa_full else 'off'}) holds "
                f"positions from {pos_min} on; "
                f"cutting back to {n_tokens} tokens needs them from {need}")
    return None
