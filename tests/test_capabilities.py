"""Engines declare what they can do (issue #22, item 4): every engine names every capability
of engines/capabilities.py CAPABILITIES, None where it can, else why not; phases ask ``able`` or
``lacks``, never an engine's name, a private attribute or ``hasattr``; an engine that lacks one
gets the phase's refusal with that reason. Issue #39 item 2: two kinds, two protocols (``Engine``
in process, ``ServerEngine``), each adapter with every member of its kind's and of each
capability's protocol it declares, and no member that only raises."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from macprof import config
from macprof.engines import base, capabilities
from macprof.engines.capabilities import CAPABILITIES, CAPABILITY, lacks

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
    # a server is its own kind (no "stream" capability any more), scores nothing and batches by itself
    kinds = {name: cls.kind for name, cls in _classes().items()}
    assert all(kind == "in_process" for name, kind in kinds.items() if name != "openai") and kinds["openai"] == "server"
    assert table["openai"]["score"] and table["openai"]["batch"] and table["openai"]["chat"] is None
    assert set(CAPABILITY) == set(CAPABILITIES)  # every capability has its protocol


def _members(protocol) -> set[str]:
    """The members a protocol class declares, its bases' included (typing's own left out)."""
    out: set[str] = set()
    for cls in protocol.__mro__:
        if cls.__module__ in (base.__name__, capabilities.__name__):
            out |= {k for k in vars(cls) if not k.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return out


def test_every_adapter_has_its_kinds_members_and_those_of_every_capability_it_declares():
    """The run-time half of engines/conformance.py (which mypy checks): an adapter has every member
    of its kind's protocol, and a capability its class declares None is exactly one whose protocol's
    members it has (one it may still refuse at run time, as MLX's batch on an old mlx-lm, it has)."""
    assert _members(base.Engine) >= {"generate", "propose", "truncate", "score", "top2", "verify", "tokenize"}
    assert _members(base.ServerEngine) >= {"request", "stream", "settle", "prompt_tokens", "reuse_unreported"}
    assert not (_members(base.Engine) - _members(base.EngineCore)) & _members(base.ServerEngine)  # two kinds apart
    for name, cls in _classes().items():
        has = set(dir(cls)) | _instance_attributes(cls)
        kind = base.ServerEngine if cls.kind == "server" else base.Engine
        assert not _members(kind) - has, (name, _members(kind) - has)
        for key, cap in CAPABILITY.items():
            assert (cls.capabilities[key] is None) == (_members(cap.protocol) <= has), (name, key)


def _instance_attributes(cls) -> set[str]:
    """Attributes an adapter sets in __init__ (self.x = ...), read off its source."""
    import inspect
    import textwrap

    out: set[str] = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None or klass.__module__.startswith("builtins"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError):
            continue
        out |= {t.attr for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AnnAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                for t in (t.elts if isinstance(t, ast.Tuple) else [t])
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}
    return out


def test_the_server_engine_has_no_member_that_only_raises():
    """engines/openai.py lost its stubs (propose, score, open_batch ... raising "a server cannot"):
    a server is not asked what only an in-process engine does; none of its methods is a lone raise."""
    tree = ast.parse((ROOT / "engines" / "openai.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OpenAIEngine"]
    stubs = []
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef):
            body = [b for b in fn.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Raise):
                stubs.append(fn.name)
    assert not stubs, stubs
    from macprof.engines.openai import OpenAIEngine

    assert not {"propose", "score", "top2", "verify", "open_batch", "generate_sampled", "truncate", "prefill",
                "native_generate", "generate"} & set(dir(OpenAIEngine))


def test_an_unknown_capability_is_a_programming_error():
    from macprof.engines.fake import FakeEngine

    with pytest.raises(KeyError, match="no capability"):
        lacks(FakeEngine(), "teleport")


def test_no_phase_asks_an_engine_its_name_or_its_attributes():
    """The run path's phases and worker never branch on an engine's name, ``hasattr``, a
    ``getattr`` with a default or a private attribute of the engine."""
    bad = []
    for path in [*(ROOT / "run" / "phases").glob("*.py"), ROOT / "run" / "worker.py", ROOT / "cli" / "serve.py",
                 ROOT / "run" / "prompts.py", ROOT / "run" / "chat.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("hasattr", "getattr") and node.args \
                    and ast.unparse(node.args[0]) in ("engine", "self.engine", "ctx.engine"):
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
