"""grid / depth / batch: the sweeps planned by macprof/cases.py, each case run in turn; a case
that cannot be set up is that case's recorded error and the next one runs."""

from __future__ import annotations

from typing import Callable, Sequence, cast

from macprof.cases import CONTEXT_MARGIN, tokens_per_sequence
from macprof.engines.base import AnyEngine, CacheCutRefused, Engine, EngineCore
from macprof.engines.capabilities import BATCH, CACHE_CUT, Batching, able
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.phases import DepthFill, OutputCheck
from macprof.run.phases.common import (Emit, PhaseContext, _kind, _pause, _warm_case, announced, sent, compare_outputs,
                                       prime, request_key, timed_batch, timed_request, todo)
from macprof.run.prompts import Prompt


def _sweep(engine: EngineCore, phase: str, cases: list[dict], emit: Emit, one_case: Callable[[dict], None]) -> None:
    """Run each case; a case that cannot be set up (its prompts cannot be built, the engine
    cannot make room for its batch) is recorded as that case's error and the next one runs."""
    engine.reset_peak_memory()
    for case in cases:
        try:
            one_case(case)
        except MacprofError as exc:
            emit(ev.CaseError(phase=phase, case=case["id"], reason=str(exc)))
    emit(ev.PhaseMemory(phase=phase, engine_memory=engine.memory()))


def run_grid(ctx: PhaseContext[AnyEngine]) -> None:
    def one_case(case: dict) -> None:
        _warm_case(ctx, "grid", f"grid:{case['id']}", case["prompt_tokens"], case["gen_tokens"], {"case": case["id"]})

    _sweep(ctx.engine, "grid", ctx.cases, ctx.emit, one_case)


def run_depth(ctx: PhaseContext[AnyEngine]) -> None:
    """The cache is filled with d tokens once per case (timed apart, as ``fill_s``); before each
    request it is cut back to exactly those d tokens, which the request then reuses. A cache
    that cannot be cut back (sliding-window, recurrent) is refilled instead, untimed, and the
    case records why (``reuse_not_possible``): the request still extends d cached tokens. An
    engine that cannot cut its cache at all (a server's) cannot run the phase: the reason."""
    builder, s, emit, clock, cases = ctx.builder, ctx.settings, ctx.emit, ctx.clock, ctx.cases
    engine = able(ctx.engine, CACHE_CUT)
    if isinstance(engine, str):
        raise MacprofError(f"depth: {engine}")
    def one_case(case: dict) -> None:
        d, tags = case["depth"], {"case": case["id"]}
        left = todo(ctx, [{"phase": "depth", "index": i - 1, "kind": _kind(i), **tags} for i in range(s.reps + 1)])
        if not left:
            return  # measured before a resume
        engine.reset()
        t_start = t_end = fill_s = None
        context: Prompt | None = None
        if d > 0:
            context = builder.prompt(f"depth:{d}", d)
            t_start = clock()
            prime(engine, context)  # computes exactly the d context tokens
            t_end = clock()
            fill_s = (t_end - t_start) / 1e9
            prompts = [builder.prefixed(context, f"depth:{d}:{i}", d + 1) for i in range(s.reps + 1)]
        else:
            prompts = [builder.prompt(f"depth:0:{i}", 1) for i in range(s.reps + 1)]
        emit(ev.DepthFill.of(DepthFill(t_start=t_start, t_end=t_end, fill_s=fill_s, cached_tokens=engine.cached_tokens(),
                                       kv_cache_bytes=engine.kv_cache_bytes()), phase="depth", **tags, depth=d))
        noted = False
        for i, prompt in enumerate(prompts):
            if not sent(left, i):
                continue
            _pause(s)
            refused = _restore(engine, d, context)
            if refused and not noted:
                emit(ev.ReuseNotPossible(phase="depth", **tags, reason=refused))
                noted = True
            announced(emit, {"phase": "depth", "index": i - 1, "kind": _kind(i), **tags,
                             "cached_tokens_before": engine.cached_tokens()},
                      lambda: timed_request(engine, prompt, case["gen_tokens"], clock), record=left[i])

    _sweep(engine, "depth", cases, emit, one_case)


def _restore(engine: Engine, d: int, context: Prompt | None) -> str | None:
    """Bring the cache back to the case's d filled tokens: cut back what the previous request
    added, or, where the cache cannot be cut (the reason is returned), empty it and fill it
    again, untimed: the request then extends d cached tokens either way."""
    try:
        engine.truncate(d)
        return None
    except CacheCutRefused as exc:
        engine.reset()
        if context is not None:
            prime(engine, context)
        return exc.reason


def run_batch(ctx: PhaseContext[AnyEngine]) -> None:
    """Per batch size: a warm-up batch, then ``reps`` measured batches of distinct prompts. The
    first measured batch is checked against the same prompts run one at a time (greedy)."""
    builder, s, emit, clock, cases = ctx.builder, ctx.settings, ctx.emit, ctx.clock, ctx.cases
    batching = able(ctx.engine, BATCH)

    def one_case(case: dict) -> None:
        size, n, tags = case["batch"], case["gen_tokens"], {"case": case["id"], "batch": case["batch"]}
        if isinstance(batching, str):
            emit(ev.CaseUnsupported(phase="batch", **tags, reason=batching))
            return
        engine = batching
        heads = [{"phase": "batch", "index": i - 1, "kind": _kind(i), **tags} for i in range(s.reps + 1)]
        left = todo(ctx, heads) or [False] * len(heads)
        check = request_key({**heads[1], "mode": "check"})
        if not any(left) and check in ctx.done:
            return  # measured before a resume
        engine.reset()
        engine.open_batch(size, tokens_per_sequence(case) + CONTEXT_MARGIN)
        try:
            for i, head in enumerate(heads):
                prompts = [builder.prompt(f"batch:{size}:{i}:{j}", case["prompt_tokens"]) for j in range(size)]
                if sent(left, i):
                    _pause(s)
                    engine.reset()
                    rec = announced(emit, head, lambda: timed_batch(engine, prompts, n, clock), record=left[i])
                    # a batch's tokens: one list of ids per sequence
                    tokens = cast(tuple[list[int], ...], rec.tokens) if rec.status == "ok" else None
                else:  # recorded before a resume: its check, if that is what is missing, from its tokens
                    tokens = ctx.done.get(request_key(head))
                if i == 1 and tokens and check not in ctx.done:
                    emit(ev.BatchCheck(phase="batch", **tags, index=0, sequences=_batch_check(engine, prompts, tokens, n)))
        finally:
            engine.close_batch()

    _sweep(ctx.engine, "batch", cases, emit, one_case)


def _batch_check(engine: Batching, prompts: list[Prompt], batched: Sequence[Sequence[int]], n: int) -> tuple[OutputCheck, ...]:
    out = []
    for prompt, tokens in zip(prompts, batched):
        engine.reset()
        alone = list(engine.generate(list(prompt.ids), n))
        out.append(compare_outputs(engine, prompt, alone, tokens))
    return tuple(out)
