"""cold: the first request of a fresh worker process, then a warm one of the same shape, so the
first request's extra cost is measured, not guessed (the orchestrator spawns one worker per
trial, macprof/phases.py ``trials``; this phase's parent records the page-cache residency, and
drops the cache where asked, before each)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from macprof.engines.base import AnyEngine
from macprof.model import events as ev
from macprof.run.phases.api import Parent
from macprof.run.phases.common import PhaseContext, announced, timed_request

if TYPE_CHECKING:
    from macprof.config import ModelSpec
    from macprof.run.resume import ModelPast

PHASE = "cold"


def run_cold(ctx: PhaseContext[AnyEngine]) -> None:
    """The first request of this fresh process, then a warm one of the same shape."""
    engine, builder, s, emit, trial = ctx.engine, ctx.builder, ctx.settings, ctx.emit, ctx.trial
    for kind in ("first", "second"):
        prompt = builder.prompt(f"cold:{trial}:{kind}", s.prompt_tokens)
        engine.reset()
        announced(emit, {"phase": PHASE, "index": trial, "kind": kind},
                  lambda: timed_request(engine, prompt, s.gen_tokens, ctx.clock))
    emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory()))


class ColdParent(Parent[None, None]):
    def before_trial(self, model: ModelSpec, trial: int) -> tuple[ev.Event | None, str]:
        """The trial's cold_trial: the page cache dropped where asked, then how much of the model's
        files it holds (the progress line says which)."""
        from macprof.collect import residency
        from macprof.model.phases import DropCache, Residency

        drop = residency.drop_cache(model.files) if model.settings.drop_cache else None
        before = residency.residency(model.files)
        return ev.ColdTrial(index=trial, drop_cache=DropCache(**drop) if drop else None,
                            residency=Residency(**before)), before["label"]


def resumed(past: ModelPast, event: ev.Event, spawn: ev.WorkerSpawn) -> bool:
    """--resume: a trial whose second request was recorded is done (its worker's end need not be)."""
    if isinstance(event, ev.Request) and event.kind == "second":
        past.trials_done.setdefault(PHASE, set()).add(spawn.trial)
        return True
    return False
