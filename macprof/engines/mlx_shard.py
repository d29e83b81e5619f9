"""mlx-lm sharded over an MLX distributed group: the MLX engine with the weights split by
mlx-lm's own ``shard`` (tensor parallel) or ``model.model.pipeline`` (pipeline parallel), as
``mlx_lm.utils.sharded_load`` does it: the model is built lazily, sharded, and only then are
this rank's weights read, so no rank ever holds the whole model.

Every rank runs the same requests in the same order (the collectives pair them up); after the
last all_sum every rank holds the same logits, so the greedy tokens are the same everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.utils import load_model

from macprof.engines.base import EngineSettings
from macprof.engines.mlx import MlxEngine, wire
from macprof.errors import MacprofError
from macprof.measure.kvmodel import MLX_KV_BITS


def support(model: Any) -> dict[str, str | None]:
    """Why each layout cannot be used for this model, or None where it can (what sharded_load checks)."""
    import mlx_lm

    version = getattr(mlx_lm, "__version__", "?")
    kind = type(model).__module__.rsplit(".", 1)[-1]
    inner = getattr(model, "model", None)
    return {
        "tensor": None if hasattr(model, "shard") else f"mlx-lm {version}'s {kind} model has no shard() method",
        "pipeline": None if inner is not None and hasattr(inner, "pipeline")
        else f"mlx-lm {version}'s {kind} model has no model.pipeline() (it does not use PipelineMixin)",
    }


class ShardedMlxEngine(MlxEngine):
    def __init__(self, group: Any, parallel: str) -> None:
        super().__init__()
        self.group = group
        self.parallel = parallel

    def load_model(self, path: Path, settings: EngineSettings) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._path = Path(path)
        self.model, self.config = load_model(self._path, lazy=True, strict=False)
        refusal = support(self.model)[self.parallel]
        if refusal:
            raise MacprofError(f"{self.parallel} parallel is not supported: {refusal}")
        if self.parallel == "tensor":
            self.model.shard(self.group)
        else:
            self.model.model.pipeline(self.group)
        mx.eval(self.model.parameters())
        # every rank loaded before the first request, as sharded_load does (a slow rank would
        # otherwise be timed inside rank 0's first collective)
        mx.eval(mx.distributed.all_sum(mx.array(1.0), group=self.group, stream=mx.cpu))
        from mlx_lm.generate import generation_stream

        self._stream = generation_stream  # as the unsharded engine's: mlx-lm's, which its sharded generate uses
        self._kv_bits = MLX_KV_BITS.get(settings.kv_type)
        self._old_wired, self._wired = wire()
        self.capabilities = {**self.capabilities, "batch": "batch unsupported: a sharded model is measured one sequence at a time",
                             "verify": "speculative decoding of a sharded model is not measured: the draft would "
                                       "run on every rank",
                             "native_draft": "speculative decoding of a sharded model is not measured: the draft "
                                             "would run on every rank",
                             "prefill": "the bench phase of a sharded model is not measured: its tests are one "
                                        "engine's, on one machine"}

    def versions(self) -> dict:
        return {**super().versions(), "parallel": self.parallel, "ranks": self.group.size()}


