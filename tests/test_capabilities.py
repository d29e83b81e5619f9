"""Engines declare what they can do (issue #22, item 4): every engine names every capability
of engines/base.py CAPABILITIES, None where it can, else why not; phases ask ``lacks``, never
an engine's name, a private attribute or ``hasattr``; an engine that lacks one gets the
phase's refusal with that reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from macprof import config
from macprof.engines.base import CAPABILITIES, IN_PROCESS, lacks

ROOT = Path(__file__).resolve().parent.parent / "macprof"


def _classes():
    from macprof.engines.fake import FakeEngine
    from macprof.engines.openai import OpenAIEngine

    out = {"fake": FakeEngine, "openai": OpenAIEngine}
    try:
        from macprof.engines.llama_cpp import LlamaCppEngine

        out["llama.cpp"] = LlamaCppEngine
    except ImportError:  # pragma: no cover - the test extra installs it
        pass
    try:
        from macprof.engines.mlx import MlxEngine
        from macprof.engines.mlx_shard import ShardedMlxEngine

        out.update({"mlx": MlxEngine, "mlx (sharded)": ShardedMlxEngine})
    except ImportError:  # pragma: no cover
        pass
    return out


def test_every_engine_declares_every_capability():
    table = {name: cls.capabilities for name, cls in _classes().items()}
    for name, caps in table.items():
        assert set(caps) == set(CAPABILITIES), name
        assert all(v is None or (isinstance(v, str) and v) for v in caps.values()), name
    print("\n" + "\n".join(f"{name:14} " + ", ".join(f"{k}: {'yes' if v is None else 'no'}" for k, v in caps.items())
                           for name, caps in table.items()))
    # in-process engines stream to no server; a server scores nothing and batches by itself
    assert all(caps["stream"] == IN_PROCESS for name, caps in table.items() if name != "openai")
    assert table["openai"]["stream"] is None and table["openai"]["score"] and table["openai"]["batch"]


def test_an_unknown_capability_is_a_programming_error():
    from macprof.engines.fake import FakeEngine

    with pytest.raises(KeyError, match="no capability"):
        lacks(FakeEngine(), "teleport")


def test_no_phase_asks_an_engine_its_name_or_its_attributes():
    """The run path's phases and worker never branch on an engine's name, ``hasattr``, a
    ``getattr`` with a default or a private attribute of the engine."""
    bad = []
    for path in [*(ROOT / "run" / "phases").glob("*.py"), ROOT / "run" / "worker.py", ROOT / "cli" / "serve.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("hasattr", "getattr") and node.args \
                    and ast.unparse(node.args[0]) == "engine":
                bad.append(f"{path.name}: {ast.unparse(node)}")
            if isinstance(node, ast.Compare) and ast.unparse(node.left) == "engine.name":
                bad.append(f"{path.name}: {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and ast.unparse(node.value) in ("engine", "openai", "ctx.engine"):
                bad.append(f"{path.name}: {ast.unparse(node)}")
    assert not bad, bad


def test_a_phase_an_engine_cannot_run_is_refused_with_the_engines_reason():
    """The quality phase on an engine without "score": the phase fails with that reason."""
    from macprof.errors import MacprofError
    from macprof.run.phases import PhaseContext
    from macprof.run.phases.quality import run_quality

    class NoScore:
        name = "noscore"
        capabilities = {**dict.fromkeys(CAPABILITIES), "score": "its logits never leave the device"}

    s = config.Settings(phases=("quality",))
    with pytest.raises(MacprofError, match="its logits never leave the device"):
        run_quality(PhaseContext(NoScore(), None, s, lambda e: None))
