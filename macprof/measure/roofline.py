"""The roofline (pure): how fast decoding could go, limited by memory bandwidth and compute.

docs/design.md "The ceiling":
  kv(c)              = K/V bytes read per token at context c (macprof.measure.kvmodel: c x per-token
                       bytes for full attention, min(c, window) for sliding layers, constant state
                       for recurrent ones); c x kv_per_token where only the scalar is known
  ceiling_tok_s(c)   = 1 / step(1) = 1 / max((W + kv(c)) / bandwidth, 2 x active_params / flops);
                       bandwidth / (W + kv(c)) while memory-bound or with compute unknown
  compute per token  = 2 x active_params operations (a multiply and an add per parameter)
  step(B)            = max((W + B kv(c)) / bandwidth, B x 2 x active_params / flops)
  per-user ITL = step(B); aggregate tok/s = B / step(B)
Units: bytes, bytes/s, FLOP/s, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from macprof.measure.kvmodel import KvLayout, kv_bytes_read


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element: float = 2) -> float:
    return 2 * layers * kv_heads * head_dim * bytes_per_element


@dataclass(frozen=True)
class Roofline:
    weight_bytes: float  # weights read per generated token
    bandwidth: float  # bytes/s
    active_params: float | None = None
    flops: float | None = None  # FLOP/s
    kv_per_token: float = 0.0  # bytes per token of context, where no layout is given
    kv: KvLayout | None = None  # the attention memory; overrides kv_per_token

    def kv_read(self, context: float = 0) -> float:
        """K/V bytes one sequence reads per generated token at ``context`` (0 where unknown:
        callers check layout.known first and give no ceiling)."""
        if self.kv is None:
            return context * self.kv_per_token
        return kv_bytes_read(self.kv, context) or 0.0

    def read_s(self, context: float = 0, batch: int = 1) -> float:
        return (self.weight_bytes + batch * self.kv_read(context)) / self.bandwidth

    def compute_s(self, batch: int = 1) -> float | None:
        if not self.active_params or not self.flops:
            return None
        return batch * 2 * self.active_params / self.flops

    def step_s(self, context: float = 0, batch: int = 1) -> float:
        compute = self.compute_s(batch)
        return max(self.read_s(context, batch), compute or 0.0)

    def bound(self, context: float = 0, batch: int = 1) -> str:
        compute = self.compute_s(batch)
        if compute is None:
            return "memory (compute unknown)"
        return "memory" if self.read_s(context, batch) >= compute else "compute"

    def ceiling_tok_s(self, context: float = 0) -> float:
        """Single-sequence decode ceiling: 1 / max(read time, compute time) of one token."""
        return 1.0 / self.step_s(context, 1)

    def batch_row(self, batch: int, context: float) -> dict:
        step = self.step_s(context, batch)
        return {"batch": batch, "step_s": step, "itl_s": step, "aggregate_tok_s": batch / step,
                "per_user_tok_s": 1.0 / step, "bound": self.bound(context, batch)}

    def prefill_ceiling_tok_s(self) -> float | None:
        """Prefill is compute-bound: one weight read serves every prompt token."""
        if not self.active_params or not self.flops:
            return None
        return self.flops / (2 * self.active_params)


def efficiency(measured_tok_s: float | None, ceiling_tok_s: float | None) -> float | None:
    if not measured_tok_s or not ceiling_tok_s:
        return None
    return measured_tok_s / ceiling_tok_s
