"""The worker's side of the phases macprof/phases.py declares: each phase's protocol, a
function taking a PhaseContext, and how many request events a model's phases emit."""

from __future__ import annotations

from typing import Callable

from macprof.config import Settings
from macprof.engines.base import AnyEngine
from macprof.phases import REGISTRY, cases_of, load
from macprof.run.phases.common import PhaseContext

PHASES: dict[str, Callable[[PhaseContext[AnyEngine]], None]] = {name: load(p.protocol) for name, p in REGISTRY.items()}


def planned_requests(s: Settings) -> int:
    """The request events a model's phases emit, warm-ups included, as their protocols run them
    (what a progress display counts): each phase's own count over its planned cases."""
    return sum(REGISTRY[p].requests(s, cases_of(p, s)) for p in s.phases)


__all__ = ["PHASES", "PhaseContext", "planned_requests"]
