"""warm: model resident; one warm-up request (discarded), then `reps` requests with distinct
prompts, the cache emptied before each."""

from __future__ import annotations

from macprof.model import events as ev
from macprof.run.phases.common import PhaseContext, _warm_case


def run_warm(ctx: PhaseContext) -> None:
    engine, builder, s, emit, clock = ctx.engine, ctx.builder, ctx.settings, ctx.emit, ctx.clock
    engine.reset_peak_memory()
    _warm_case(engine, builder, s, emit, clock, "warm", "warm", s.prompt_tokens, s.gen_tokens, {})
    emit(ev.PhaseMemory(phase="warm", engine_memory=engine.memory()))
