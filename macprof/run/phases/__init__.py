"""The registry of measurement protocols: one function per phase, each taking a PhaseContext.
Adding a phase = a module here with ``run_<name>(ctx)``, an entry below, its builder in
macprof/analyse/build.py and its record in macprof/model/phases.py (new event kinds go to
macprof/model/events.py; docs/design.md walks through it)."""

from __future__ import annotations

from typing import Callable

from macprof import cases
from macprof.config import Settings
from macprof.run.phases.cold import run_cold
from macprof.run.phases.common import PhaseContext
from macprof.run.phases.prefix import run_prefix
from macprof.run.phases.quality import run_quality
from macprof.run.phases.serving import load_cases, run_concurrency
from macprof.run.phases.sweeps import run_batch, run_depth, run_grid
from macprof.run.phases.warm import run_warm

PHASES: dict[str, Callable[[PhaseContext], None]] = {
    "cold": run_cold, "warm": run_warm, "prefix": run_prefix,
    "grid": run_grid, "depth": run_depth, "batch": run_batch, "quality": run_quality, "concurrency": run_concurrency,
}


def planned_requests(s: Settings) -> int:
    """The request events a model's phases emit, warm-ups included, as the protocols above run
    them (what a progress display counts): a cold trial is a first and a second request;
    warm and each sweep case a warm-up and ``reps``; prefix a pair (reuse, no reuse) each."""
    plan = cases.plan(s)
    each = {"cold": 2 * s.cold_trials, "warm": s.reps + 1, "prefix": 2 * (s.reps + 1),
            "quality": 0,  # quality emits no request: it scores chunks (quality_chunk events)
            "concurrency": sum(c["requests"] for c in load_cases(s))}
    return sum(each[p] if p in each else len(plan.get(p, ())) * (s.reps + 1) for p in s.phases)


__all__ = ["PHASES", "PhaseContext", "planned_requests"]
