"""prefix: a shared prefix; each request (prefix + distinct suffix) is measured with the prefix
already in the cache and with the cache emptied, alternating which goes first; outputs are
compared token by token."""

from __future__ import annotations

from macprof.model import events as ev
from macprof.run.phases.common import PhaseContext, _kind, _pause, announced, compare_outputs, timed_request


def run_prefix(ctx: PhaseContext) -> None:
    engine, builder, s, emit, clock = ctx.engine, ctx.builder, ctx.settings, ctx.emit, ctx.clock
    prefix = builder.prompt("prefix:shared", s.prefix_tokens)
    prompts = [builder.prefixed(prefix, f"prefix:{i}", s.prompt_tokens) for i in range(s.reps + 1)]
    engine.reset_peak_memory()
    for i, prompt in enumerate(prompts):
        index = i - 1  # the first pair warms up both paths and is discarded
        kind = _kind(i)
        outputs: dict[str, tuple[int, ...]] = {}
        order = ("reuse", "noreuse") if i % 2 == 0 else ("noreuse", "reuse")
        for mode in order:
            _pause(s)
            engine.reset()
            if mode == "reuse":  # put exactly the prefix in the cache, untimed
                for _ in engine.generate(list(prefix.ids), 1):
                    pass
            rec = announced(emit, {"phase": "prefix", "index": index, "kind": kind, "mode": mode},
                            lambda: timed_request(engine, prompt, s.gen_tokens, clock))
            outputs[mode] = rec.tokens
        check = compare_outputs(engine, prompt, outputs["noreuse"], outputs["reuse"])
        emit(ev.PrefixCheck(phase="prefix", index=index, kind=kind, **check.to_json()))
    emit(ev.PhaseMemory(phase="prefix", engine_memory=engine.memory()))
