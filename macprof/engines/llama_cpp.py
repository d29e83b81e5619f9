"""llama.cpp adapter over llama-cpp-python's low-level API (the llama.h mirror).

The per-token loop is one ``llama_decode`` of the last token, then greedy selection as an argmax
over a zero-copy numpy view of llama.cpp's own logits buffer (SIMD, in C; nothing is copied
into Python). llama.cpp's greedy sampler chain does the same job but first fills a candidate
array for the whole vocabulary: measured here at 53 µs per token against 6.5 µs for the view's
argmax, with a 32 000-token vocabulary (1.5 % of a 3.4 ms decode step). The prompt cache is the context's KV memory: a new prompt
keeps the longest common prefix with what the memory holds (``llama_memory_seq_rm`` drops
the rest), as ``Llama.generate`` does.

Batched decoding is llama.cpp's own (as in its ``batched`` example and llama-batched-bench):
a second context with one KV stream per sequence, and one ``llama_batch`` per step holding
the last token of every sequence, each with its own sequence id and position; one
``llama_decode`` then reads the weights once for all of them.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import llama_cpp as lc
import numpy as np
from llama_cpp import _logger as _lc_logger

from macprof.engines.base import EngineSettings, TopTwo, reusable_prefix, top_two
from macprof.errors import MacprofError

_SEQ = 0
_GGML_KV_TYPES = {"q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}  # the kv_type option -> ggml_type
# llama.cpp logs every tensor it loads; keep its errors only, unless asked for more.
_lc_logger.set_verbose(os.environ.get("MACPROF_ENGINE_VERBOSE") == "1")


def default_threads(platform: str = sys.platform, sysctl=None) -> tuple[int, str]:
    """llama-bench's default thread count (common_cpu_get_num_math) and where it came from: on
    macOS the performance cores only (sysctl hw.perflevel0.physicalcpu, as llama.cpp's
    common_cpu_get_num_physical_cores reads it); elsewhere the physical cores (psutil)."""
    if platform == "darwin":
        text = (sysctl or _sysctl)("hw.perflevel0.physicalcpu")
        if text and text.strip().isdigit() and int(text) > 0:
            return int(text), "sysctl hw.perflevel0.physicalcpu (performance cores, llama-bench's default)"
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


class LlamaCppEngine:
    name = "llama.cpp"
    separate_tokenizer = False  # the GGUF vocabulary loads with the model

    def __init__(self) -> None:
        self.model = None
        self.ctx = None
        self.vocab = None
        self._logits_t: Any = None  # ctypes pointer type to the logits row, set by load_model
        self.threads = 0
        self.threads_source = ""
        self._load: dict = {}  # what load_model passed to llama.cpp, for the run log
        self.kv_type = "f16"
        self.n_batch = 0
        self._history: list[int] = []
        self._reused = 0
        self._mem = None
        self._bctx = None  # the batch context (open_batch .. close_batch)
        self._bsize = 0

    # -- loading -------------------------------------------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        model = lc.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            # llama.cpp says why on the worker's stderr, which the parent keeps with the failure
            raise MacprofError(f"{path}: llama.cpp could not load this model (its own message, if it printed one, "
                               f"is the failure's stderr_tail in the run log; MACPROF_ENGINE_VERBOSE=1 logs more)")
        self.model = model
        self.vocab = lc.llama_model_get_vocab(model)
        self.threads, self.threads_source = ((settings.threads, "settings") if settings.threads else default_threads())
        self.kv_type = settings.kv_type
        self.n_batch = min(2048, settings.n_ctx)  # llama-bench's default n_batch
        self.ctx = self._context(settings.n_ctx, 1)
        if not self.ctx:
            raise MacprofError(f"{path}: llama.cpp could not create a context of {settings.n_ctx} tokens")
        self._mem = lc.llama_get_memory(self.ctx)
        self._logits_t = ctypes.POINTER(ctypes.c_float * self.vocab_size)
        self._load = load_facts(model, mparams, self._context_params(settings.n_ctx, 1))  # as passed

    def _context(self, n_ctx: int, n_seq: int):
        return lc.llama_init_from_model(self.model, self._context_params(n_ctx, n_seq))

    def _context_params(self, n_ctx: int, n_seq: int):
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = min(self.n_batch, n_ctx)
        cparams.n_ubatch = min(512, cparams.n_batch)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = False  # one KV stream per sequence, n_ctx / n_seq cells each
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        if self.kv_type != "f16":  # llama.cpp quantizes a V cache only with flash attention: enabled, and recorded
            cparams.type_k = cparams.type_v = _GGML_KV_TYPES[self.kv_type]
            cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        return cparams

    def load_tokenizer(self) -> None:
        """The GGUF file carries the vocabulary: it is loaded with the model."""

    # -- tokens --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, True, False)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, True, False)
        return list(buf[:n])

    def detokenize(self, ids: Sequence[int]) -> str:
        arr = (lc.llama_token * max(1, len(ids)))(*ids)
        cap = 16 * len(ids) + 16
        out = ctypes.create_string_buffer(cap)
        n = lc.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, False)
        if n < 0:
            cap = -n
            out = ctypes.create_string_buffer(cap)
            n = lc.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, False)
        return out.raw[:n].decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return int(lc.llama_vocab_n_tokens(self.vocab))

    # -- cache ---------------------------------------------------------------------------
    def reset(self) -> None:
        lc.llama_memory_clear(self._mem, True)
        self._history = []
        if self._bctx:
            lc.llama_memory_clear(lc.llama_get_memory(self._bctx), True)

    def truncate(self, n_tokens: int) -> None:
        lc.llama_memory_seq_rm(self._mem, _SEQ, n_tokens, -1)
        self._history = self._history[:n_tokens]

    def cached_tokens(self) -> int:
        return int(lc.llama_memory_seq_pos_max(self._mem, _SEQ)) + 1

    @property
    def reused_tokens(self) -> int:
        return self._reused

    def _decode(self, ids: Sequence[int]) -> None:
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start:start + self.n_batch]
            arr = (lc.llama_token * len(chunk))(*chunk)
            rc = lc.llama_decode(self.ctx, lc.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise MacprofError(f"llama_decode failed with code {rc} (context {self.cached_tokens()} tokens)")

    # -- generation ----------------------------------------------------------------------
    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        keep = reusable_prefix(self._history[: self.cached_tokens()], ids)
        if not lc.llama_memory_seq_rm(self._mem, _SEQ, keep, -1):
            self.reset()
            keep = 0
        self._reused = keep
        self._history = history = list(ids)
        if n <= 0:
            return
        self._decode(ids[keep:])
        ctx, logits_t = self.ctx, self._logits_t
        decode, get_one, get_logits = lc.llama_decode, lc.llama_batch_get_one, lc.llama_get_logits_ith
        cast, frombuffer, f32 = ctypes.cast, np.frombuffer, np.float32
        one = (lc.llama_token * 1)()
        for i in range(n):
            token = int(frombuffer(cast(get_logits(ctx, -1), logits_t).contents, dtype=f32).argmax())
            history.append(token)
            yield token
            if i + 1 < n:
                one[0] = token
                rc = decode(ctx, get_one(one, 1))
                if rc != 0:
                    raise MacprofError(f"llama_decode failed with code {rc} at generated token {i + 1}")

    # -- batched generation ----------------------------------------------------------------
    batch_unsupported: str | None = None

    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        self.close_batch()
        per_seq = -(-tokens_per_seq // 256) * 256  # llama.cpp pads a context to 256 cells; keep n_ctx / n_seq whole
        self._bctx = self._context(size * per_seq, size)
        if not self._bctx:
            raise MacprofError(f"llama.cpp could not create a context for {size} sequences of {tokens_per_seq} tokens")
        self._bsize = size

    def close_batch(self) -> None:
        if self._bctx:
            lc.llama_free(self._bctx)
        self._bctx, self._bsize = None, 0

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        """The prompts are prefilled together (chunks of n_batch tokens, logits kept only for
        each prompt's last token), then every step decodes one token of every sequence."""
        if len(prompts) > self._bsize:
            raise MacprofError(f"{len(prompts)} sequences for a batch context opened for {self._bsize}")
        ctx = self._bctx
        batch = lc.llama_batch_init(max(self.n_batch, len(prompts)), 0, len(prompts))
        try:
            cast, frombuffer, f32, logits_t = ctypes.cast, np.frombuffer, np.float32, self._logits_t

            def argmax(i: int) -> int:
                return int(frombuffer(cast(lc.llama_get_logits_ith(ctx, i), logits_t).contents, dtype=f32).argmax())

            # prefill: (sequence, position, token) in order; a chunk is decoded when full
            pending = [(s, pos, t) for s, ids in enumerate(prompts) for pos, t in enumerate(ids)]
            last = {s: len(ids) - 1 for s, ids in enumerate(prompts)}
            tokens = [0] * len(prompts)
            for start in range(0, len(pending), self.n_batch):
                chunk = pending[start:start + self.n_batch]
                outputs = _fill(batch, chunk, last)
                _decode_batch(ctx, batch, f"prefill of {len(prompts)} sequences")
                for s, i in outputs:
                    tokens[s] = argmax(i)
            for step in range(n):
                yield list(tokens)
                if step + 1 == n:
                    break
                _fill(batch, [(s, len(prompts[s]) + step, t) for s, t in enumerate(tokens)], None)
                _decode_batch(ctx, batch, f"generated token {step + 1}")
                tokens = [argmax(s) for s in range(len(prompts))]
        finally:
            lc.llama_batch_free(batch)

    def top2(self, ids: Sequence[int]) -> TopTwo:
        self.reset()
        self._decode(ids)
        ptr = lc.llama_get_logits_ith(self.ctx, -1)
        values = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)).copy()
        self.reset()
        return top_two(values)

    # -- memory and facts ----------------------------------------------------------------
    def kv_cache_bytes(self) -> int | None:
        # Size of the sequence's serialised state: the K and V cells in use (plus a small header).
        return int(lc.llama_state_seq_get_size(self.ctx, _SEQ))

    def memory(self) -> dict:
        return {}

    def reset_peak_memory(self) -> None:
        """llama.cpp keeps no peak counter of its own: process RSS covers it."""

    def versions(self) -> dict:
        return {
            "llama_cpp_python": lc.__version__,
            "llama_cpp_system_info": lc.llama_print_system_info().decode(errors="replace").strip(),
            "threads": self.threads,
            "threads_source": self.threads_source,
            "load": self._load,
            "kv_type": self.kv_type,
        }

    def close(self) -> None:
        self.close_batch()
        if self.ctx:
            lc.llama_free(self.ctx)
        if self.model:
            lc.llama_model_free(self.model)
        self.ctx = self.model = None


def ggml_devices() -> list[dict]:
    """ggml's backend devices (name, description, type: 0 CPU, 1 GPU, 2 accelerator; total
    memory, which Metal gives as recommendedMaxWorkingSetSize), read through ggml's own C API:
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
    gpus = [d for d in devices if d.get("type") == 1]
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


def _fill(batch, entries, last: dict | None) -> list[tuple[int, int]]:
    """Write (sequence, position, token) entries into ``batch``; logits are requested for
    every entry (last is None) or only at each sequence's last prompt position. Returns
    (sequence, batch index) of the entries whose logits will be read."""
    outputs = []
    for i, (s, pos, t) in enumerate(entries):
        batch.token[i] = t
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = s
        want = last is None or last[s] == pos
        batch.logits[i] = want
        if want:
            outputs.append((s, i))
    batch.n_tokens = len(entries)
    return outputs


def _decode_batch(ctx, batch, what: str) -> None:
    rc = lc.llama_decode(ctx, batch)
    if rc != 0:
        raise MacprofError(f"llama_decode failed with code {rc} ({what})")


ENGINE = LlamaCppEngine
