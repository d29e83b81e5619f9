"""Model shape and bytes from metadata only: the GGUF header and tensor table, or an MLX
directory's config.json and safetensors headers. Never loads a weight.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from macprof.errors import MacprofError

KV_BYTES_F16 = 2  # both engines keep K and V in f16 unless told otherwise


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
    kv_bytes_per_element: int = KV_BYTES_F16
    kv_type: str = "f16"
    experts_total: int | None = None
    experts_active: int | None = None
    expert_bytes: int = 0  # bytes of all experts' tensors (MoE)
    expert_params: int = 0

    @property
    def kv_bytes_per_token(self) -> int | None:
        """2 (K and V) x layers x kv heads x head dim x bytes per element."""
        if self.n_layers is None or self.n_kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.kv_bytes_per_element

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
                 weight_bytes_per_token=self.weight_bytes_per_token)
        return d


def inspect(path: Path | str) -> ModelInfo:
    path = Path(path)
    if path.is_dir():
        return _inspect_mlx(path)
    if path.is_file():
        return _inspect_gguf(path)
    raise MacprofError(f"{path}: no such model file or directory")


# -- GGUF ------------------------------------------------------------------------------
def _field(reader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # noqa: BLE001 - older gguf packages
        return f.parts[f.data[0]].tolist()[0] if f.data else None


def _inspect_gguf(path: Path) -> ModelInfo:
    import gguf

    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
    if size == 0:
        raise MacprofError(f"{path}: empty file (0 bytes), not a GGUF model")
    if head[:4] != b"GGUF":
        raise MacprofError(f"{path}: not a GGUF file (magic {head[:4]!r}, expected b'GGUF')")
    version = struct.unpack("<I", head[4:8])[0] if len(head) == 8 else None
    if version not in (2, 3):
        raise MacprofError(f"{path}: unsupported GGUF version {version} (llama.cpp reads versions 2 and 3)")
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as exc:  # noqa: BLE001 - the gguf package raises many kinds
        raise MacprofError(f"{path}: truncated or corrupt GGUF file ({size} bytes; the header or tensor table "
                           f"does not fit: {type(exc).__name__}: {str(exc)[:120]})") from None
    arch = _field(reader, "general.architecture")

    def meta(key: str):
        return _field(reader, f"{arch}.{key}")

    ftype = _field(reader, "general.file_type")
    try:
        quant = gguf.LlamaFileType(ftype).name.removeprefix("MOSTLY_") if ftype is not None else None
    except ValueError:
        quant = f"file_type {ftype}"
    n_params = tensor_bytes = emb_bytes = expert_bytes = expert_params = 0
    by_type: dict[str, int] = {}
    has_output = False
    vocab = None
    for t in reader.tensors:
        n, b = int(t.n_elements), int(t.n_bytes)
        n_params += n
        tensor_bytes += b
        tname = t.tensor_type.name
        by_type[tname] = by_type.get(tname, 0) + b
        if t.name == "token_embd.weight":
            emb_bytes = b
            vocab = int(t.shape[-1]) if len(t.shape) > 1 else None
        elif t.name == "output.weight":
            has_output = True
        if "_exps" in t.name:
            expert_bytes += b
            expert_params += n
    n_heads = meta("attention.head_count")
    n_embd = meta("embedding_length")
    head_dim = meta("attention.key_length") or (n_embd // n_heads if n_embd and n_heads else None)
    n_kv = meta("attention.head_count_kv") or n_heads
    tokens = _field(reader, "tokenizer.ggml.tokens")
    return ModelInfo(
        format="gguf", architecture=arch, quant=quant, n_params=n_params, tensor_bytes=tensor_bytes,
        file_bytes=path.stat().st_size, bytes_by_type=by_type, embedding_bytes=emb_bytes,
        vocab_size=meta("vocab_size") or vocab or (len(tokens) if tokens else None),
        tied_embeddings=not has_output, n_layers=meta("block_count"), hidden=n_embd,
        n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, context_length=meta("context_length"),
        experts_total=meta("expert_count"), experts_active=meta("expert_used_count"),
        expert_bytes=expert_bytes, expert_params=expert_params,
    )


# -- MLX -------------------------------------------------------------------------------
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2,
             "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise MacprofError(f"{path}: truncated safetensors file (no header)")
        (length,) = struct.unpack("<Q", raw)
        if length > 100_000_000 or length > path.stat().st_size - 8:
            raise MacprofError(f"{path}: corrupt safetensors header (claims {length} bytes)")
        try:
            header = json.loads(fh.read(length))
        except ValueError as exc:
            raise MacprofError(f"{path}: corrupt safetensors header ({exc})") from None
    if not isinstance(header, dict):
        raise MacprofError(f"{path}: corrupt safetensors header (not a JSON object)")
    header.pop("__metadata__", None)
    return header


def _inspect_mlx(path: Path) -> ModelInfo:
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise MacprofError(f"{path}: not an MLX model directory (no config.json)")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as exc:
        raise MacprofError(f"{cfg_path}: invalid JSON ({exc})") from None
    text_cfg = cfg.get("text_config", cfg)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise MacprofError(f"{path}: no *.safetensors weights")
    q = cfg.get("quantization") or {}
    group = q.get("group_size", 64)
    tensors: dict[str, dict] = {}
    for f in files:
        tensors.update(safetensors_header(f))
    n_params = tensor_bytes = emb_bytes = expert_bytes = expert_params = 0
    by_type: dict[str, int] = {}
    for name, t in tensors.items():
        shape, dtype = t["shape"], t["dtype"]
        b = int(t["data_offsets"][1]) - int(t["data_offsets"][0])
        tensor_bytes += b
        by_type[dtype] = by_type.get(dtype, 0) + b
        if name.endswith(".scales") or name.endswith(".biases"):
            n = 0  # quantization metadata, not parameters
        elif name.endswith(".weight") and name[:-7] + ".scales" in tensors:
            scales = tensors[name[:-7] + ".scales"]["shape"]
            n = _prod(scales[:-1]) * scales[-1] * group
        else:
            n = _prod(shape)
        n_params += n
        module = name.rsplit(".", 1)[0]
        if module.endswith("embed_tokens"):
            emb_bytes += b
        if "experts" in name or "switch_mlp" in name:
            expert_bytes += b
            expert_params += n
    n_heads = text_cfg.get("num_attention_heads")
    hidden = text_cfg.get("hidden_size")
    has_head = any(n.startswith("lm_head.") for n in tensors)
    bits = q.get("bits")
    quant = f"{bits}bit" if bits else (text_cfg.get("torch_dtype") or cfg.get("torch_dtype") or (max(by_type, key=by_type.__getitem__) if by_type else None))
    return ModelInfo(
        format="mlx", architecture=text_cfg.get("model_type") or cfg.get("model_type"), quant=quant,
        n_params=n_params, tensor_bytes=tensor_bytes, file_bytes=sum(f.stat().st_size for f in path.iterdir() if f.is_file()),
        bytes_by_type=by_type, embedding_bytes=emb_bytes, vocab_size=text_cfg.get("vocab_size"),
        tied_embeddings=not has_head, n_layers=text_cfg.get("num_hidden_layers"), hidden=hidden,
        n_heads=n_heads, n_kv_heads=text_cfg.get("num_key_value_heads") or n_heads,
        head_dim=text_cfg.get("head_dim") or (hidden // n_heads if hidden and n_heads else None),
        context_length=text_cfg.get("max_position_embeddings"),
        experts_total=text_cfg.get("num_local_experts") or text_cfg.get("num_experts"),
        experts_active=text_cfg.get("num_experts_per_tok"),
        expert_bytes=expert_bytes, expert_params=expert_params,
    )


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out
