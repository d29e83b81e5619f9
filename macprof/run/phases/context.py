"""What a phase's protocol gets in the worker: ``PhaseContext``. It names no phase: what the
parent prepared for one phase alone (run/phases/api.py) is ``prepared``, of the type the phase's
registry line names (macprof/phases.py ``prepared``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from macprof.config import Settings
from macprof.engines.base import EngineCore
from macprof.model import events as ev
from macprof.run.prompts import PromptBuilder

Emit = Callable[[ev.Event], None]
Clock = Callable[[], int]
# the engine's kind a phase takes (engines/base.py): AnyEngine (both; it asks ``engine.kind`` where
# they differ), Engine (in process) or ServerEngine; mypy then checks every call a phase makes on it.
# Covariant: a context of either kind is a context of AnyEngine.
E = TypeVar("E", bound=EngineCore, covariant=True)


@dataclass
class PhaseContext(Generic[E]):
    """Everything a protocol needs: the loaded engine, prompts, settings, where events go, the
    sweep cases (for grid / depth / batch), the trial's number, the clock, and the requests
    a resumed run recorded before (``request_key`` -> their tokens), which are not measured again."""

    engine: E
    builder: PromptBuilder
    settings: Settings
    emit: Emit
    cases: list[dict] = field(default_factory=list)
    trial: int = 0
    clock: Clock = time.perf_counter_ns
    done: dict[tuple, tuple] = field(default_factory=dict)
    # what each recorded request left in the engine's cache, where the journal kept it (a resumed
    # phase that carries its cache from item to item puts it back as the interrupted run had it)
    done_cached: dict[tuple, int] = field(default_factory=dict)
    n_ctx: int = 0  # the context the worker's engine holds, per sequence (0: not known)
    prepared: Any = None  # what the parent gave this phase (its registry line's ``prepared`` type), or None
