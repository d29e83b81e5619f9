"""The phases are checked against typed engines (issue #39 item 2): every protocol the registry
names takes a ``PhaseContext`` of the engine's kind (``AnyEngine``, or a ``ByKind`` of an
``Engine`` one and a ``ServerEngine`` one), the phases' modules are under mypy's
``disallow_untyped_defs`` (pyproject.toml), and mypy rejects an engine call a phase's kind does
not have (mypy run on a probe module: under a second)."""

from __future__ import annotations

import tomllib
import typing
from pathlib import Path

import pytest

from macprof.engines.base import AnyEngine, Engine, ServerEngine
from macprof.phases import REGISTRY, load
from macprof.run.phases.common import ByKind, PhaseContext

ROOT = Path(__file__).resolve().parent.parent


def _ctx_hint(fn: typing.Callable) -> object:
    hints = typing.get_type_hints(fn, globalns=vars(__import__(fn.__module__, fromlist=["*"])))
    (name,) = [k for k in hints if k != "return"]
    return hints[name]


@pytest.mark.parametrize("phase", sorted(REGISTRY))
def test_every_registered_protocol_takes_a_context_of_its_engines_kind(phase):
    protocol = load(REGISTRY[phase].protocol)
    if isinstance(protocol, ByKind):  # the two kinds differ: each function typed for its own
        assert _ctx_hint(protocol.local) == PhaseContext[Engine], phase
        assert _ctx_hint(protocol.served) == PhaseContext[ServerEngine], phase
    else:  # one function for both: it asks engine.kind (or a capability) where they differ
        assert _ctx_hint(protocol) == PhaseContext[AnyEngine], phase


def test_the_phases_modules_are_fully_typed():
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if o.get("disallow_untyped_defs")]
    assert any("macprof.run.phases.*" in o["module"] and "macprof.engines.base" in o["module"] for o in strict)


BAD = '''
from macprof.engines.base import AnyEngine, ServerEngine
from macprof.run.phases.common import PhaseContext


def served(ctx: PhaseContext[ServerEngine]) -> None:
    for _ in ctx.engine.generate([1, 2], 4):  # an in-process engine's member: a server has none
        pass


def either(ctx: PhaseContext[AnyEngine]) -> None:
    ctx.engine.truncate(3)  # a server has no cache to cut
    if ctx.engine.kind == "in_process":
        ctx.engine.truncate(3)  # narrowed by its kind: fine
    else:
        ctx.engine.request("text", 4)  # a server's: fine
'''


def test_mypy_rejects_an_engine_call_the_phases_kind_does_not_have(tmp_path):
    from mypy import api

    probe = tmp_path / "probe_phase.py"
    probe.write_text(BAD)
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                                "--follow-imports", "silent", str(probe)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 2, out + err
    assert ':7: error: "ServerEngine" has no attribute "generate"' in errors[0]
    assert ':12: error: Item "ServerEngine" of "Engine | ServerEngine" has no attribute "truncate"' in errors[1]
