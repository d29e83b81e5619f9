"""prefix: a shared prefix; each request (prefix + distinct suffix) is measured with the prefix
already in the cache and with the cache emptied, alternating which goes first; outputs are
compared token by token.

The reuse half puts exactly the prefix in the cache and then extends it, which every cache can do
(a sliding-window or recurrent one too). Where an engine still cannot keep the prefix, it says why
(``reuse_refused``): the half is measured from an empty cache (reused_tokens 0, never called
reuse) and the phase records the reason once (``reuse_not_possible``)."""

from __future__ import annotations

from typing import cast

from macprof.engines.base import AnyEngine
from macprof.model import events as ev
from macprof.run.phases.common import (PhaseContext, _kind, _pause, announced, sent, compare_outputs, prime, request_key,
                                       timed_request)
from macprof.run.prompts import Prompt


def run_prefix(ctx: PhaseContext[AnyEngine]) -> None:
    engine, builder, s = ctx.engine, ctx.builder, ctx.settings
    prefix = builder.prompt("prefix:shared", s.prefix_tokens)
    prompts = [builder.prefixed(prefix, f"prefix:{i}", s.prompt_tokens) for i in range(s.reps + 1)]
    heads = [{mode: {"phase": "prefix", "index": i - 1, "kind": _kind(i), "mode": mode}
              for mode in ("reuse", "noreuse", "check")} for i in range(s.reps + 1)]
    # a pair is left while a half or its check is; the warm-up pair runs again, unrecorded, for those after it
    left = [any(request_key(h) not in ctx.done for h in pair.values()) for pair in heads]
    engine.reset_peak_memory()
    for i, prompt in enumerate(prompts):
        if sent(left, i):
            _pair(ctx, prefix, prompt, i, heads[i], record=left[i])
    ctx.emit(ev.PhaseMemory(phase="prefix", engine_memory=engine.memory()))


def _pair(ctx: PhaseContext[AnyEngine], prefix: Prompt, prompt: Prompt, i: int, heads: dict[str, dict], record: bool) -> None:
    """One prompt with the prefix cached and without, alternating which goes first (the first
    pair warms up both paths and is discarded); a half recorded before a resume is not run
    again, its tokens are compared with the other half's."""
    engine, s = ctx.engine, ctx.settings
    outputs: dict[str, tuple[int, ...]] = {}
    noted = False
    for mode in ("reuse", "noreuse") if i % 2 == 0 else ("noreuse", "reuse"):
        key = request_key(heads[mode])
        if record and key in ctx.done:
            outputs[mode] = ctx.done[key]
            continue
        _pause(s)
        engine.reset()
        if mode == "reuse":  # put exactly the prefix in the cache, untimed
            prime(engine, prefix)
        rec = announced(ctx.emit, heads[mode], lambda: timed_request(engine, prompt, s.gen_tokens, ctx.clock),
                        record=record)
        outputs[mode] = cast(tuple[int, ...], rec.tokens)  # an in-process request's: ids
        refused = engine.reuse_refused if engine.kind == "in_process" else None  # a server's: its report
        if mode == "reuse" and refused and record and not noted:
            ctx.emit(ev.ReuseNotPossible(phase="prefix", reason=refused))
            noted = True
    if record and request_key(heads["check"]) not in ctx.done:
        check = compare_outputs(engine, prompt, outputs["noreuse"], outputs["reuse"])
        ctx.emit(ev.PrefixCheck(phase="prefix", index=i - 1, kind=_kind(i), **check.to_json()))
