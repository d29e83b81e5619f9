"""Every adapter against its kind's protocol and each capability protocol it declares, for mypy
alone (it checks every module of the package; nothing imports this one at run time, so the
registry in engines/__init__.py need not import the adapters). tests/test_capabilities.py holds
the declarations to the same protocols at run time: a capability declared None is one whose
members the class has."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from macprof.engines.base import Engine, ServerEngine
    from macprof.engines.capabilities import Batching, Chatting, NativeDrafting, Prefilling, Sampling
    from macprof.engines.fake import FakeEngine
    from macprof.engines.llama_cpp import LlamaCppEngine
    from macprof.engines.mlx import MlxEngine
    from macprof.engines.mlx_shard import ShardedMlxEngine
    from macprof.engines.openai import OpenAIEngine

    # an instance, not the class: mypy then names each member that does not match
    _llama_cpp: Engine = LlamaCppEngine()
    _mlx: Engine = MlxEngine()
    _mlx_shard: Engine = ShardedMlxEngine(None, "tensor")
    _fake: Engine = FakeEngine()
    _openai: ServerEngine = OpenAIEngine()

    # the capabilities each declares it has (None in its ``capabilities``)
    _batching: list[Batching] = [LlamaCppEngine(), MlxEngine(), FakeEngine()]
    _sampling: list[Sampling] = [LlamaCppEngine(), MlxEngine(), FakeEngine()]
    _native: list[NativeDrafting] = [LlamaCppEngine(), MlxEngine(), FakeEngine()]
    _prefilling: list[Prefilling] = [LlamaCppEngine(), MlxEngine(), FakeEngine()]
    _chatting: Chatting = OpenAIEngine()
