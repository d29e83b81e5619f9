"""Every adapter against the engine protocol, for mypy alone (it checks every module of the
package; nothing imports this one at run time, so the registry in engines/__init__.py need not
import the adapters)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from macprof.engines.base import Engine
    from macprof.engines.fake import FakeEngine
    from macprof.engines.llama_cpp import LlamaCppEngine
    from macprof.engines.mlx import MlxEngine
    from macprof.engines.openai import OpenAIEngine

    # an instance, not the class: mypy then names each member that does not match
    _llama_cpp: Engine = LlamaCppEngine()
    _mlx: Engine = MlxEngine()
    _fake: Engine = FakeEngine()
    _openai: Engine = OpenAIEngine()
