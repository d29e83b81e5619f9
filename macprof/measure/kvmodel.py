"""The attention memory a model reads per generated token (pure): a small typed description,
per kind of layer, and one function of the context c used by inspect, estimate, the roofline
and the ceilings.

Bytes read for one generated token at context c (docs/design.md "The ceiling"):
  full     layers x per_token x c                 (K and V of every position)
  sliding  layers x per_token x min(c, window)    (only the window is attended to)
  latent   layers x per_token x c                 (MLA: one latent of kv_lora_rank + rope dims, K and V share it)
  state    layers x state_bytes                   (recurrent / SSM / short-conv layers: constant state)
Where the layout is unknown, ``reason`` says why and no figure is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from macprof.measure.words import KV_TYPES  # noqa: F401  # the types the tables below are keyed by; readers import it here

KINDS = ("full", "sliding", "latent", "state")

# Bytes per element of a K/V cache type: llama.cpp's ggml block sizes (q8_0: 32 int8 + one f16
# scale = 34 bytes per 32; q4_0: 16 bytes of nibbles + f16 scale = 18 per 32)
GGML_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
MLX_KV_GROUP = 64  # mlx-lm's kv_group_size default
MLX_KV_BITS = {"q8_0": 8, "q4_0": 4}  # the run option mapped to mlx-lm's kv_bits


def kv_element_bytes(kv_type: str, fmt: str) -> float:
    """Bytes per cached K/V element for ``kv_type`` in the engine that reads ``fmt`` files.
    MLX's QuantizedKVCache keeps bits/8 per element plus an f16 scale and bias per group."""
    if kv_type == "f16" or fmt != "mlx":
        return GGML_KV_BYTES[kv_type]
    return MLX_KV_BITS[kv_type] / 8 + 2 * 2 / MLX_KV_GROUP


@dataclass(frozen=True)
class KvGroup:
    kind: str  # one of KINDS
    layers: int
    per_token: float = 0.0  # bytes per position per layer (full, sliding, latent)
    window: int | None = None  # sliding
    state_bytes: float = 0.0  # per layer (state)

    def bytes_read(self, context: float) -> float:
        if self.kind == "state":
            return self.layers * self.state_bytes
        positions = min(context, self.window) if self.kind == "sliding" and self.window is not None else context
        return self.layers * self.per_token * positions


@dataclass(frozen=True)
class KvLayout:
    groups: tuple[KvGroup, ...] = ()
    kv_type: str = "f16"
    reason: str | None = None  # set where the layout is unknown

    @property
    def known(self) -> bool:
        return self.reason is None

    @property
    def linear_per_token(self) -> float | None:
        """Bytes per token of context where the read grows linearly with c (no window, no
        state): the old scalar kv_bytes_per_token. None otherwise."""
        if not self.known or any(g.kind in ("sliding", "state") for g in self.groups):
            return None
        return sum(g.layers * g.per_token for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kv_type": self.kv_type, "reason": self.reason, "groups": [
            {k: v for k, v in vars(g).items() if v is not None} for g in self.groups]}
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KvLayout:
        return cls(tuple(KvGroup(**g) for g in d.get("groups") or ()), d.get("kv_type") or "f16", d.get("reason"))

    @classmethod
    def linear(cls, per_token: float, layers: int = 1) -> KvLayout:
        """A layout from the scalar figure alone (logs and estimate inputs before layouts)."""
        return cls((KvGroup("full", layers, per_token / layers),))

    @classmethod
    def unknown(cls, reason: str, kv_type: str = "f16") -> KvLayout:
        return cls((), kv_type, reason)


def kv_bytes_read(layout: KvLayout, context: float) -> float | None:
    """K/V (and recurrent state) bytes read to generate one token with ``context`` tokens
    cached; None where the layout is unknown."""
    if not layout.known:
        return None
    return sum(g.bytes_read(context) for g in layout.groups)


def layout_from_shape(shape: dict) -> KvLayout:
    """The layout a run log's shape carries; a log written before layouts has the scalar
    kv_bytes_per_token only (full attention: all it could describe)."""
    d = shape.get("kv_layout")
    if isinstance(d, dict):
        return KvLayout.from_json(d)
    per_token = shape.get("kv_bytes_per_token")
    return KvLayout.linear(per_token) if per_token else KvLayout()
