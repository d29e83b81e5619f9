"""cold: the first request of a fresh worker process, then a warm one of the same shape, so the
first request's extra cost is measured, not guessed (the orchestrator spawns one worker per
trial and records the page-cache residency before it)."""

from __future__ import annotations

from macprof.engines.base import AnyEngine
from macprof.model import events as ev
from macprof.run.phases.common import PhaseContext, announced, timed_request


def run_cold(ctx: PhaseContext[AnyEngine]) -> None:
    """The first request of this fresh process, then a warm one of the same shape."""
    engine, builder, s, emit, trial = ctx.engine, ctx.builder, ctx.settings, ctx.emit, ctx.trial
    for kind in ("first", "second"):
        prompt = builder.prompt(f"cold:{trial}:{kind}", s.prompt_tokens)
        engine.reset()
        announced(emit, {"phase": "cold", "index": trial, "kind": kind},
                  lambda: timed_request(engine, prompt, s.gen_tokens, ctx.clock))
    emit(ev.PhaseMemory(phase="cold", engine_memory=engine.memory()))
