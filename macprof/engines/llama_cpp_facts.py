"""What llama.cpp is given and reports back, and what its memory allows, apart from the
adapter's decode loop (macprof/engines/llama_cpp.py): the default thread count, ggml's devices,
the load facts recorded in the run log, and whether a KV memory can be cut back."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import llama_cpp as lc

from macprof.engines.ggml import GGML_DEVICE_GPU


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


def _ggml():
    """ggml's own library, as the installed llama-cpp-python loaded it (llama-cpp-python binds
    none of ggml's device, registry or build API; the library exports them), or None."""
    lib = Path(lc.__file__).parent / "lib"
    path = next((lib / n for n in ("libggml.dylib", "libggml.so") if (lib / n).exists()), None)
    if path is None:
        return None
    ggml, c = ctypes.CDLL(str(path)), ctypes
    ggml.ggml_backend_dev_count.restype = c.c_size_t
    ggml.ggml_backend_dev_get.restype, ggml.ggml_backend_dev_get.argtypes = c.c_void_p, [c.c_size_t]
    ggml.ggml_backend_dev_type.argtypes = [c.c_void_p]
    for fn in (ggml.ggml_backend_dev_name, ggml.ggml_backend_dev_description):
        fn.restype, fn.argtypes = c.c_char_p, [c.c_void_p]
    ggml.ggml_backend_dev_memory.argtypes = [c.c_void_p, c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)]
    ggml.ggml_backend_reg_count.restype = c.c_size_t
    ggml.ggml_backend_reg_get.restype, ggml.ggml_backend_reg_get.argtypes = c.c_void_p, [c.c_size_t]
    ggml.ggml_backend_reg_name.restype, ggml.ggml_backend_reg_name.argtypes = c.c_char_p, [c.c_void_p]
    ggml.ggml_backend_reg_dev_count.restype, ggml.ggml_backend_reg_dev_count.argtypes = c.c_size_t, [c.c_void_p]
    return ggml


def ggml_devices() -> list[dict]:
    """ggml's backend devices (name, description, type: 0 CPU, 1 GPU, 2 IGPU, 3 ACCEL, 4 META as
    engines/ggml.py's GGML_DEVICE_TYPES lists them; total memory, which Metal gives as
    recommendedMaxWorkingSetSize), read through ggml's own C API."""
    ggml, c = _ggml(), ctypes
    if ggml is None:
        return []
    out = []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        free, total = c.c_size_t(), c.c_size_t()
        ggml.ggml_backend_dev_memory(dev, c.byref(free), c.byref(total))
        out.append({"name": (ggml.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
                    "description": (ggml.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
                    "type": int(ggml.ggml_backend_dev_type(dev)), "total_bytes": int(total.value)})
    return out


def ggml_backends() -> list[dict]:
    """ggml's backend registries (CPU, Metal, BLAS, RPC...) and how many devices each has: what
    llama-bench's ``backends`` field is made of (test::get_backend)."""
    ggml = _ggml()
    if ggml is None:
        return []
    return [{"name": (ggml.ggml_backend_reg_name(reg) or b"").decode(errors="replace"),
             "devices": int(ggml.ggml_backend_reg_dev_count(reg))}
            for reg in (ggml.ggml_backend_reg_get(i) for i in range(ggml.ggml_backend_reg_count()))]


def ggml_build() -> dict:
    """The commit and version of the llama.cpp / ggml sources the installed llama-cpp-python was
    built from, as ggml recorded them at build time (``ggml_commit()``: git's short hash of the
    vendored llama.cpp, "-dirty" where its tree had changes; ``ggml_version()``); None where the
    library predates them or cannot be opened."""
    lib = Path(lc.__file__).parent / "lib"
    path = next((lib / n for n in ("libggml-base.dylib", "libggml-base.so") if (lib / n).exists()), None)
    out: dict = {"ggml_commit": None, "ggml_version": None}
    if path is None:
        return out
    base = ctypes.CDLL(str(path))
    for name in out:
        fn = getattr(base, name, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            out[name] = (fn() or b"").decode(errors="replace") or None
    return out


def model_facts(model) -> dict:
    """How llama.cpp describes a loaded model (llama-bench's model_type, model_size and
    model_n_params come from the same calls)."""
    buf = ctypes.create_string_buffer(128)
    lc.llama_model_desc(model, buf, len(buf))
    return {"model_desc": buf.value.decode(errors="replace"), "model_size": int(lc.llama_model_size(model)),
            "model_n_params": int(lc.llama_model_n_params(model))}


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


# -- what llama.cpp resolved, read from its own log --------------------------------------------
class CapturedLog:
    """llama.cpp's log while a model loads and a context is made: every line it writes (INFO
    included, which llama-cpp-python's own callback drops unless verbose), forwarded to that
    callback unchanged, so MACPROF_ENGINE_VERBOSE=1 still prints it. llama.cpp reports some of
    what it resolves only there: flash attention's "auto", the K/V cache's types, the layers
    offloaded (llama.h has no getter for them)."""

    def __init__(self) -> None:
        self._pieces: list[str] = []  # as written: a line may come in pieces (GGML_LOG_LEVEL_CONT)
        from llama_cpp import _logger

        forward = _logger.llama_log_callback

        @lc.llama_log_callback
        def collect(level, text, user_data):  # noqa: ANN001 - ctypes' callback
            self._pieces.append((text or b"").decode("utf-8", errors="replace"))
            forward(level, text, user_data)

        self._collect, self._forward = collect, forward  # held: ctypes callbacks must outlive their use

    def __enter__(self) -> "CapturedLog":
        lc.llama_log_set(self._collect, ctypes.c_void_p(0))
        return self

    def __exit__(self, *exc) -> None:
        lc.llama_log_set(self._forward, ctypes.c_void_p(0))

    @property
    def lines(self) -> list[str]:
        return "".join(self._pieces).splitlines()


_FA_SOURCE = "llama.cpp's log at context creation"


def flash_attn_resolved(asked: str, lines: list[str]) -> tuple[str | None, str]:
    """Flash attention as llama.cpp resolved it, and where that was read. llama_init_from_model
    forces it off for Grok and on for a quantized V cache (it logs both); "auto" is then settled
    when the context reserves its graphs (llama_context::resolve_fused_ops): enabled unless the
    FLASH_ATTN_EXT op lands on another device than its layer's, logged as "Flash Attention enabled"
    or "... not supported, set to disabled". "enabled" and "disabled" as asked are used as asked.
    (None, why) where the log says nothing a known version says."""
    for line in lines:
        if "flash_attn" in line and "forcing off" in line:
            return "disabled", f"{_FA_SOURCE}: {line.strip()}"
        if "enabling flash_attn since it is required" in line:
            return "enabled", f"{_FA_SOURCE}: {line.strip()}"
    if asked in ("enabled", "disabled"):
        return asked, f"asked {asked}: llama.cpp probes only \"auto\" and uses this one as asked"
    for line in lines:
        if "Flash Attention" in line and "not supported" in line:
            return "disabled", f"{_FA_SOURCE}: {line.strip()}"
        if "Flash Attention enabled" in line:
            return "enabled", f"{_FA_SOURCE}: {line.strip()}"
    return None, (f"asked {asked}, and llama.cpp logged no resolution of it at context creation "
                  f"(resolve_fused_ops' \"Flash Attention enabled\" / \"not supported\" lines)")


_KV_LINE = re.compile(r"llama_kv_cache: size = .*K \((\w+)\):.*V \((\w+)\):")


def kv_types_resolved(lines: list[str]) -> tuple[str, str] | None:
    """The K and V cache types llama.cpp allocated (llama_kv_cache's size line), or None where it
    logged none (a model with no attention cache: a recurrent one)."""
    found = [m.groups() for m in map(_KV_LINE.search, lines) if m]
    return (found[-1][0], found[-1][1]) if found else None


_OFFLOAD_LINE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def offloaded_resolved(lines: list[str], supports_offload: bool) -> tuple[int | None, str]:
    """The layers llama.cpp put on the GPU (load_tensors' "offloaded N/M layers to GPU", the
    output layer counting as one), and where that was read; 0 where this build offloads nothing."""
    if not supports_offload:
        return 0, "llama_supports_gpu_offload() is false: this llama.cpp runs every layer on the CPU"
    found = [m for m in map(_OFFLOAD_LINE.search, lines) if m]
    if found:
        return int(found[-1].group(1)), f"llama.cpp's log at model load: {found[-1].group(0)}"
    return None, "llama.cpp logged no \"offloaded N/M layers to GPU\" line at model load"


_PASSED = "passed to llama.cpp, which takes it as given"


def resolved_settings(ctx, mparams, cparams, lines: list[str], threads_source: str, weights: str) -> dict:
    """Every setting of the context macprof decodes with (the batch sweep's context is made with
    the same parameters, but for its size and sequences), as asked and as llama.cpp resolved it:
    the context's own getters where llama.h has one (n_ctx, n_batch, n_ubatch, threads), its log
    where it reports only there (flash attention's "auto", the K/V types, the layers offloaded),
    and the load mode as llama-model-loader.cpp resolves it."""
    from macprof.model.resolved import Resolved, as_passed

    def got(asked, value, call: str) -> Resolved:
        return Resolved(asked=asked, value=int(value), source=f"{call} (llama.h)")

    fa_asked = _enum_name(lc, "llama_flash_attn_type_name", cparams.flash_attn_type)
    fa, fa_source = flash_attn_resolved(fa_asked, lines)
    kv = kv_types_resolved(lines)
    asked_k, asked_v = (_GGML_TYPE_NAMES.get(int(t), str(int(t))) for t in (cparams.type_k, cparams.type_v))
    no_kv = "llama.cpp logged no K/V cache size line (a model without an attention cache)"
    offloaded, offload_source = offloaded_resolved(lines, bool(lc.llama_supports_gpu_offload()))
    out = {
        "n_ctx": got(int(cparams.n_ctx), lc.llama_n_ctx(ctx), "llama_n_ctx(ctx): padded to 256 cells"),
        "n_batch": got(int(cparams.n_batch), lc.llama_n_batch(ctx), "llama_n_batch(ctx): at most n_ctx"),
        "n_ubatch": got(int(cparams.n_ubatch), lc.llama_n_ubatch(ctx), "llama_n_ubatch(ctx): at most n_batch"),
        "n_threads": Resolved(asked=int(cparams.n_threads), value=int(lc.llama_n_threads(ctx)),
                              source=f"llama_n_threads(ctx) (llama.h); asked: {threads_source}"),
        "n_threads_batch": Resolved(asked=int(cparams.n_threads_batch), value=int(lc.llama_n_threads_batch(ctx)),
                                    source="llama_n_threads_batch(ctx) (llama.h)"),
        "flash_attn": Resolved(asked=fa_asked, value=fa, source=fa_source if fa else None,
                               unknown=None if fa else fa_source),
        "type_k": Resolved(asked=asked_k, value=kv[0] if kv else None,
                           source="llama.cpp's log at context creation (llama_kv_cache's size line)" if kv else None,
                           unknown=None if kv else no_kv),
        "type_v": Resolved(asked=asked_v, value=kv[1] if kv else None,
                           source="llama.cpp's log at context creation (llama_kv_cache's size line)" if kv else None,
                           unknown=None if kv else no_kv),
        "n_gpu_layers": Resolved(asked=int(mparams.n_gpu_layers), value=offloaded,
                                 source=offload_source if offloaded is not None else None,
                                 unknown=None if offloaded is not None else offload_source),
        "mmap": Resolved(asked=_load_mode(mparams), value=weights == "mapped",
                         source="the load mode as llama-model-loader.cpp resolves it: \"auto\" maps the file where "
                                "llama_supports_mmap()"),
        "split_mode": as_passed(_SPLIT_MODES.get(int(mparams.split_mode), str(int(mparams.split_mode))), _PASSED),
        "main_gpu": as_passed(int(mparams.main_gpu), _PASSED),
        "no_kv_offload": as_passed(not bool(cparams.offload_kqv), _PASSED),
        "no_op_offload": as_passed(not bool(cparams.op_offload), _PASSED),
        "embeddings": as_passed(bool(cparams.embeddings), _PASSED),
    }
    for field, name in (("use_extra_bufts", "repack"), ("no_host", "no_host")):
        if hasattr(mparams, field):
            out[name] = as_passed(bool(getattr(mparams, field)), _PASSED)
    return out


_SPLIT_MODES = {0: "none", 1: "layer", 2: "row", 3: "tensor"}  # llama-bench's split_mode_str
# ggml_type_name's words for the K/V types macprof passes (llama-cpp-python binds no ggml_type_name)
_GGML_TYPE_NAMES = {int(lc.GGML_TYPE_F32): "f32", int(lc.GGML_TYPE_F16): "f16", int(lc.GGML_TYPE_Q8_0): "q8_0",
                    int(lc.GGML_TYPE_Q4_0): "q4_0"}
