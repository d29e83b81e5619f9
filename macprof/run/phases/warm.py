"""warm: model resident; one warm-up request (discarded), then `reps` requests with distinct
prompts, the cache emptied before each."""

from __future__ import annotations

from macprof.engines.base import AnyEngine
from macprof.model import events as ev
from macprof.run.phases.common import PhaseContext, _warm_case


def run_warm(ctx: PhaseContext[AnyEngine]) -> None:
    ctx.engine.reset_peak_memory()
    _warm_case(ctx, "warm", "warm", ctx.settings.prompt_tokens, ctx.settings.gen_tokens, {})
    ctx.emit(ev.PhaseMemory(phase="warm", engine_memory=ctx.engine.memory()))
