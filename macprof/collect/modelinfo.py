"""Model shape and bytes from metadata only: the GGUF header and tensor table, or an MLX
directory's config.json and safetensors headers. Never loads a weight.
"""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from macprof.collect import kvlayout
from macprof.files import filekind, ggufconst, ggufheader, stheader
from macprof.files.modelconfig import json_object
from macprof.errors import MacprofError
from macprof.measure.kvmodel import KV_TYPES, KvLayout, kv_bytes_read, kv_element_bytes

KV_BYTES_F16 = 2  # both engines keep K and V in f16 unless told otherwise
KV_SHOWN_AT = (1024, 4096, 32768)  # contexts inspect shows the K/V bytes read at


@dataclass(frozen=True)
class ModelInfo:
    format: str  # "gguf" or "mlx"
    architecture: str | None
    quant: str | None  # as the file declares it
    n_params: int
    tensor_bytes: int  # sum of the tensors' stored bytes
    file_bytes: int
    bytes_by_type: dict = field(default_factory=dict)
    embedding_bytes: int = 0
    vocab_size: int | None = None
    tied_embeddings: bool = False
    n_layers: int | None = None
    hidden: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    context_length: int | None = None
    kv_bytes_per_element: float = KV_BYTES_F16
    kv_type: str = "f16"
    experts_total: int | None = None
    experts_active: int | None = None
    experts_shared: int | None = None  # always-active experts (DeepSeek, Qwen2-MoE): counted as dense weights
    expert_bytes: int = 0  # bytes of all experts' tensors (MoE)
    expert_params: int = 0
    kv_layout: KvLayout = field(default_factory=lambda: KvLayout.unknown("not read"))

    @property
    def kv_bytes_per_token(self) -> float | None:
        """K/V bytes per token of context where that grows linearly with the context (full
        attention and MLA only); None for sliding windows, recurrent layers or an unknown layout."""
        return self.kv_layout.linear_per_token

    def kv_bytes_read(self, context: float) -> float | None:
        return kv_bytes_read(self.kv_layout, context)

    @property
    def active_params(self) -> int:
        if self.experts_total and self.experts_active:
            return self.n_params - self.expert_params + self.expert_params * self.experts_active // self.experts_total
        return self.n_params

    @property
    def weight_bytes_per_token(self) -> int:
        """Bytes of weights read per generated token: one row of the embedding table (unless it
        is tied to the output head, which reads it whole) and only the active experts."""
        total = self.tensor_bytes
        if self.embedding_bytes and not self.tied_embeddings and self.vocab_size:
            total -= self.embedding_bytes - self.embedding_bytes // self.vocab_size
        if self.experts_total and self.experts_active:
            total -= self.expert_bytes - self.expert_bytes * self.experts_active // self.experts_total
        return total

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(kv_bytes_per_token=self.kv_bytes_per_token, active_params=self.active_params,
                 weight_bytes_per_token=self.weight_bytes_per_token, kv_layout=self.kv_layout.to_json(),
                 kv_bytes_read_at={str(c): self.kv_bytes_read(c) for c in KV_SHOWN_AT})
        return d


def inspect(path: Path | str, kv_type: str = "f16") -> ModelInfo:
    """``kv_type``: the K/V cache type the engine is run with (f16, q8_0, q4_0)."""
    path = Path(path)
    if kv_type not in KV_TYPES:
        raise MacprofError(f"kv_type must be one of {', '.join(KV_TYPES)}, not {kv_type!r}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise MacprofError(f"{path}: no such model file or directory") from None
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        if stat.S_ISDIR(mode):
            return _inspect_mlx(path, kv_type)
        return _inspect_gguf(path, kv_type)  # opens only a regular file (filekind.open_regular)
    except OSError as exc:  # unreadable, or gone since the stat: one line, as for any bad file
        raise MacprofError(f"{exc.filename or path}: cannot read: {exc.strerror}") from None


# -- GGUF ------------------------------------------------------------------------------
# "<arch>.<key>" values modelinfo reads: each must be a non-negative integer
_GGUF_COUNTS = ("vocab_size", "embedding_length", "block_count", "context_length", "attention.head_count",
                "attention.head_count_kv", "attention.key_length", "expert_count", "expert_used_count")


def _wanted(key: str) -> bool:
    """Keys whose strings or arrays are read; every other string and array is only skipped."""
    rest = key.partition(".")[2]
    return key in ("general.architecture", "general.file_type") or rest in _GGUF_COUNTS or rest in kvlayout.GGUF_KEYS


def _inspect_gguf(path: Path, kv_type: str) -> ModelInfo:
    gguf = ggufconst.load()
    h = ggufheader.read_header(path, _wanted)
    arch = h.string("general.architecture")
    meta = {k: h.count(f"{arch}.{k}") if arch else None for k in _GGUF_COUNTS if k != "attention.head_count_kv"}
    kvh = h.layers(f"{arch}.attention.head_count_kv") if arch else None
    # per-layer: the attention layers' figure where they agree (0 marks a hybrid's recurrent
    # layer); else None, no single figure describes the model (its layout has each layer's)
    if isinstance(kvh, tuple):
        attn = set(kvh) - {0}
        meta["attention.head_count_kv"] = attn.pop() if len(attn) == 1 else None
    else:
        meta["attention.head_count_kv"] = kvh
    ftype = h.count("general.file_type")
    try:
        quant = gguf.LlamaFileType(ftype).name.removeprefix("MOSTLY_") if ftype is not None else None
    except ValueError:
        quant = f"file_type {ftype}"
    n_params = tensor_bytes = emb_bytes = expert_bytes = expert_params = 0
    by_type: dict[str, int] = {}
    has_output = False
    vocab = None
    for t in h.tensors:
        n, b = t.n_elements, t.n_bytes
        n_params += n
        tensor_bytes += b
        by_type[t.type_name] = by_type.get(t.type_name, 0) + b
        if t.name == "token_embd.weight":
            emb_bytes = b
            vocab = t.dims[-1] if len(t.dims) > 1 else None
        elif t.name == "output.weight":
            has_output = True
        if "_exps" in t.name:
            expert_bytes += b
            expert_params += n
    n_heads, n_embd = meta["attention.head_count"], meta["embedding_length"]
    head_dim = meta["attention.key_length"] or (n_embd // n_heads if n_embd and n_heads else None)
    n_tokens = h.array_length("tokenizer.ggml.tokens")
    layout = kvlayout.gguf_layout(lambda k: h.layers(f"{arch}.{k}"), arch, meta["block_count"], n_embd, n_heads,
                                  kv_element_bytes(kv_type, "gguf"), kv_type)
    return ModelInfo(
        format="gguf", architecture=arch, quant=quant, n_params=n_params, tensor_bytes=tensor_bytes,
        file_bytes=path.stat().st_size, bytes_by_type=by_type, embedding_bytes=emb_bytes,
        vocab_size=meta["vocab_size"] or vocab or n_tokens or None,
        tied_embeddings=not has_output, n_layers=meta["block_count"], hidden=n_embd,
        n_heads=n_heads, n_kv_heads=meta["attention.head_count_kv"] or n_heads, head_dim=head_dim,
        context_length=meta["context_length"], experts_total=meta["expert_count"],
        experts_active=meta["expert_used_count"], expert_bytes=expert_bytes, expert_params=expert_params,
        experts_shared=h.count(f"{arch}.expert_shared_count") if arch else None,
        kv_bytes_per_element=kv_element_bytes(kv_type, "gguf"), kv_type=kv_type, kv_layout=layout,
    )


# -- MLX -------------------------------------------------------------------------------

class _Config:
    """Typed reads of config.json: each value modelinfo uses is checked, naming file and key."""

    def __init__(self, path: Path):
        self.path, self.cfg = path, json_object(path)
        text = self.cfg.get("text_config")
        if text is not None and not isinstance(text, dict):
            raise self._wrong("text_config", "an object", text)
        self.text, self.prefix = (text, "text_config.") if text is not None else (self.cfg, "")
        q = self.cfg.get("quantization") or {}  # absent, null or false: not quantized
        if not isinstance(q, dict):
            raise self._wrong("quantization", "an object", q)
        self.quant = q

    def _wrong(self, key: str, what: str, value) -> MacprofError:
        return MacprofError(f"{self.path}: key '{key}' must be {what}, not {stheader.short(value)}")

    def count(self, key: str, table: str = "text", positive: bool = False) -> int | None:
        d, prefix = {"text": (self.text, self.prefix), "top": (self.cfg, ""),
                     "quantization": (self.quant, "quantization.")}[table]
        v = d.get(key)
        if v is not None and not (stheader.is_count(v) and (v > 0 or not positive)):
            raise self._wrong(prefix + key, "a positive integer" if positive else "a non-negative integer", v)
        return v

    def get(self, key: str):
        """A value the KV layout reads: a non-negative integer, or a list (layer_types,
        full_attn_idxs) checked for its elements' type."""
        if key not in ("layer_types", "full_attn_idxs"):
            return self.count(key)
        v = self.text.get(key)
        element = str if key == "layer_types" else int
        if v is not None and not (isinstance(v, list) and all(isinstance(x, element) for x in v)):
            raise self._wrong(self.prefix + key, f"a list of {element.__name__}", v)
        return v

    def string(self, key: str) -> str | None:
        for d, prefix in ((self.text, self.prefix), (self.cfg, "")):
            v = d.get(key)
            if v is not None and not isinstance(v, str):
                raise self._wrong(prefix + key, "a string", v)
            if v:
                return v
        return None


def _inspect_mlx(path: Path, kv_type: str) -> ModelInfo:
    cfg_path = path / "config.json"
    if not os.path.lexists(cfg_path):
        raise MacprofError(f"{path}: not an MLX model directory (no config.json)")
    files = filekind.model_files(path)  # every entry a regular file, before any is opened
    cfg = _Config(cfg_path)
    weights = [f for f in files if f.name.endswith(".safetensors")]
    if not weights:
        raise MacprofError(f"{path}: no *.safetensors weights")
    group = cfg.count("group_size", "quantization", positive=True) or 64
    tensors: dict[str, stheader.Tensor] = {}
    for f in weights:
        tensors.update(stheader.read_header(f))
    n_params = tensor_bytes = emb_bytes = expert_bytes = expert_params = 0
    by_type: dict[str, int] = {}
    for name, t in tensors.items():
        b = t.n_bytes
        tensor_bytes += b
        by_type[t.dtype] = by_type.get(t.dtype, 0) + b
        if name.endswith(".scales") or name.endswith(".biases"):
            n = 0  # quantization metadata, not parameters
        elif name.endswith(".weight") and name[:-7] + ".scales" in tensors:
            n = _prod(tensors[name[:-7] + ".scales"].shape) * group  # one scale per group of weights
        else:
            n = _prod(t.shape)
        n_params += n
        if name.rsplit(".", 1)[0].endswith("embed_tokens"):
            emb_bytes += b
        if ("experts" in name or "switch_mlp" in name) and "shared_expert" not in name:  # shared: always read
            expert_bytes += b
            expert_params += n
    n_heads, hidden = cfg.count("num_attention_heads"), cfg.count("hidden_size")
    bits = cfg.count("bits", "quantization", positive=True)
    elem = kv_element_bytes(kv_type, "mlx")
    kv_heads = cfg.count("num_key_value_heads") or n_heads
    head_dim = cfg.count("head_dim") or (hidden // n_heads if hidden and n_heads else None)
    layout = kvlayout.mlx_layout(cfg.get, cfg.string("model_type"), cfg.count("num_hidden_layers"), kv_heads,
                                 head_dim, elem, kv_type)
    quant = f"{bits}bit" if bits else (cfg.string("torch_dtype") or (max(by_type, key=by_type.__getitem__) if by_type else None))
    return ModelInfo(
        format="mlx", architecture=cfg.string("model_type"), quant=quant, n_params=n_params,
        tensor_bytes=tensor_bytes, file_bytes=sum(f.stat().st_size for f in files), bytes_by_type=by_type,
        embedding_bytes=emb_bytes, vocab_size=cfg.count("vocab_size"),
        tied_embeddings=not any(n.startswith("lm_head.") for n in tensors), n_layers=cfg.count("num_hidden_layers"),
        hidden=hidden, n_heads=n_heads, n_kv_heads=kv_heads, head_dim=head_dim,
        context_length=cfg.count("max_position_embeddings"),
        experts_total=cfg.count("num_local_experts") or cfg.count("num_experts") or cfg.count("n_routed_experts"),
        experts_active=cfg.count("num_experts_per_tok"), expert_bytes=expert_bytes, expert_params=expert_params,
        experts_shared=cfg.count("n_shared_experts"), kv_bytes_per_element=elem, kv_type=kv_type, kv_layout=layout,
    )


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out
