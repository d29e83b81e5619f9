"""The worker's side of the phases macprof/phases.py declares: each phase's protocol, a
function taking a PhaseContext, what its parent gave it in the job, and how many request events
a model's phases emit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from macprof.config import Settings
from macprof.engines.base import AnyEngine
from macprof.phases import REGISTRY, cases_of, load
from macprof.run.phases.context import PhaseContext

if TYPE_CHECKING:
    from macprof.run.job import WorkerJob

PHASES: dict[str, Callable[[PhaseContext[AnyEngine]], None]] = {name: load(p.protocol) for name, p in REGISTRY.items()}


def prepared_of(job: WorkerJob, phase: str) -> Any:
    """What the parent gave ``phase`` in ``job`` (run/phases/api.py Parent.job), decoded with the
    type its registry line names (``prepared``), its fields checked; None where it gave nothing."""
    import msgspec

    raw, kind = job.prepared.get(phase), REGISTRY[phase].prepared
    if raw is None or kind is None:
        return None
    return msgspec.json.decode(raw, type=load(kind))


def planned_requests(s: Settings) -> int:
    """The request events a model's phases emit, warm-ups included, as their protocols run them
    (what a progress display counts): each phase's own count over its planned cases."""
    return sum(REGISTRY[p].requests(s, cases_of(p, s)) for p in s.phases)


__all__ = ["PHASES", "PhaseContext", "planned_requests", "prepared_of"]
