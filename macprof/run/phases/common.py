"""What every measurement protocol shares: a timestamped request (single or batched), the
request_start/request pair, and the token-by-token output check (the phase's context is
run/phases/context.py's, imported here too).

Each protocol emits events (macprof.model.events) as it goes; the worker streams them to the
parent, which journals them at once, so nothing measured waits in memory for the end of a phase.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Generator, Iterable, Iterator, Sequence, cast

from macprof.config import Settings
from macprof.engines.base import AnyEngine, Engine, EngineCore, ServerEngine
from macprof.engines.capabilities import TOP2, Batching, able
from macprof.errors import reason
from macprof.model import events as ev
from macprof.model.definitions import NEAR_TIE_LOGITS
from macprof.model.phases import OutputCheck, Request
from macprof.run.phases.context import Clock, Emit, PhaseContext
from macprof.run.prompts import Prompt, PromptBuilder


@dataclass(frozen=True)
class ByKind:
    """A phase whose protocol differs by the engine's kind: ``local`` for an engine in this
    process, ``served`` for a server, each typed for its kind (so mypy checks every call it
    makes); the registry names the instance, which the worker calls with its context."""

    local: Callable[[PhaseContext[Engine]], None]
    served: Callable[[PhaseContext[ServerEngine]], None]

    def __call__(self, ctx: PhaseContext[AnyEngine]) -> None:
        if ctx.engine.kind == "server":
            self.served(cast(PhaseContext[ServerEngine], ctx))
        else:
            self.local(cast(PhaseContext[Engine], ctx))


def request_key(head: dict) -> tuple:
    """What names a request within a model's run: phase, case, mode, kind, index."""
    return (head["phase"], head.get("case"), head.get("mode"), head["kind"], head["index"])


def done_requests(items: list[dict]) -> dict[tuple, tuple]:
    """A worker job's ``done`` list (macprof/run/resume.py) as PhaseContext.done."""
    return {request_key(d): tuple(d.get("tokens") or ()) for d in items}


def done_cached(items: list[dict]) -> dict[tuple, int]:
    """A worker job's ``done`` list as PhaseContext.done_cached: the cache each request left, where kept."""
    return {request_key(d): d["cached_tokens_after"] for d in items if isinstance(d.get("cached_tokens_after"), int)}


def _stamped(engine: EngineCore, texts: list[str], generate: Callable[[list[list[int]]], Iterable[Any]], clock: Clock,
             tokenize: Callable[[str], list[int]] | None = None) -> dict:
    """Tokenize ``texts`` (``tokenize``: the engine's plain one unless given) and run ``generate(ids)``, timestamping each item it yields; an
    engine error becomes a recorded failure with whatever timestamps it had."""
    engine.reset_peak_memory()
    times: list[int] = []
    outs: list = []
    ids: list[list[int]] | None = None
    t_tok = None
    t0 = clock()
    try:
        ids = [(tokenize or engine.tokenize)(t) for t in texts]
        t_tok = clock()
        for out in generate(ids):
            times.append(clock())
            outs.append(out)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded failure
        status, error = "error", reason(exc)
    return {"status": status, "error": error, "t0": t0, "t_tokenized": t_tok, "token_times": times,
            "outs": outs, "ids": ids}


def timed_request(engine: AnyEngine, prompt: Prompt, n: int, clock: Clock = time.perf_counter_ns,
                  eos: Collection[int] = ()) -> dict:
    """One request, timestamped by the caller's clock (engines never time themselves). The
    engine's peak-memory counter is reset before it, outside the timed span. ``eos``: the ids
    that end the reply, as an app's generation ends (the conversation phase); the speed phases
    give none, so that every request yields exactly ``n`` tokens."""
    if engine.kind == "server":  # chunks and the server's own counts; its reply ends where the server ends it
        from macprof.run.phases.server_request import server_request

        return server_request(engine, prompt, n, clock)
    tokenize = engine.tokenize_chat if prompt.chat else engine.tokenize  # a chat prompt: as it was built
    # the speed phases' tokens straight from the engine: no generator between its yield and the stamp
    tokens_of: Callable[[list[int]], Iterable[int]] = (lambda ids: ending_at(engine.generate(ids, n), eos)) if eos \
        else (lambda ids: engine.generate(ids, n))
    r = stamped_sequence(engine, prompt, n, tokens_of, clock, "engine", tokenize, eos)
    return {**r, **reuse_of(engine, r["prompt_tokens"], engine.reused_tokens)}


def ending_at(tokens: Iterator[int], eos: Collection[int]) -> Generator[int, None, None]:
    """``tokens`` up to and including the first id of ``eos``, the engine's generator then closed
    (its loop stops there, as the tasks phase's replies stop)."""
    try:
        for token in tokens:
            yield token
            if token in eos:
                return
    finally:
        close = getattr(tokens, "close", None)
        if close is not None:
            close()


def reply_end(tokens: Sequence[int], eos: Collection[int]) -> str:
    """How a reply generated with ``ending_at`` ended: "eos" (its last id is an end-of-generation
    id) or "max_tokens" (it ran to the limit)."""
    return "eos" if tokens and tokens[-1] in eos else "max_tokens"


def stamped_sequence(engine: Engine, prompt: Prompt, n: int, tokens_of: Callable[[list[int]], Iterable[int]],
                     clock: Clock, what: str, tokenize: Callable[[str], list[int]] | None = None,
                     eos: Collection[int] = ()) -> dict:
    """One sequence's request: ``tokens_of(ids)`` stamped (``_stamped``), exactly ``n`` tokens
    checked, or fewer ending at an id of ``eos`` (else a recorded error naming ``what`` yielded
    them), with the fields every one-sequence request has: its tokens, its prompt's size, the
    engine's memory after it."""
    r = _stamped(engine, [prompt.text], lambda ids: tokens_of(ids[0]), clock, tokenize)
    tokens, ids = r.pop("outs"), (r.pop("ids") or [list(prompt.ids)])[0]
    if r["status"] == "ok" and len(tokens) != n and not (len(tokens) < n and reply_end(tokens, eos) == "eos"):
        r.update(status="error", error=f"{what} yielded {len(tokens)} tokens instead of {n}"
                                       + (" (and the last is no end-of-generation id)" if eos else ""))
    return {**r, "tokens": tokens, "prompt_tokens": len(ids), "engine_memory": engine.memory() or None}


def reuse_of(engine: Engine, prompt_tokens: int, reused: int) -> dict:
    """What a request reused of the cache and left in it."""
    return {"reused_tokens": reused, "computed_prompt_tokens": prompt_tokens - reused,
            "cached_tokens_after": engine.cached_tokens(), "kv_cache_bytes": engine.kv_cache_bytes()}


def timed_batch(engine: Batching, prompts: list[Prompt], n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """B sequences decoded together: one timestamp per step (each step yields one token of
    every sequence), tokens kept per sequence."""
    r = _stamped(engine, [p.text for p in prompts], lambda ids: engine.generate_batch(ids, n), clock)
    steps, ids = r.pop("outs"), r.pop("ids") or [list(p.ids) for p in prompts]
    seqs = [[step[j] for step in steps] for j in range(len(prompts))]
    if r["status"] == "ok" and (len(steps) != n or any(len(step) != len(prompts) for step in steps)):
        r.update(status="error", error=f"engine yielded {len(steps)} steps instead of {n}, "
                                       f"or a step without one token per sequence")
    return {**r, "tokens": seqs, "batch": len(prompts), "prompt_tokens": len(ids[0]),
            "computed_prompt_tokens": sum(len(x) for x in ids), "engine_memory": engine.memory() or None}


def announced(emit: Emit, head: dict, measure: Callable[[], dict], record: bool = True) -> Request:
    """``request_start`` before the measurement (the parent's per-request timeout runs from
    it), then the ``request`` record; both carry ``head`` (phase, index, kind, case...); the
    request as measured is returned.
    ``record=False``: a warm-up a resumed run recorded before (or the conversation's, never
    recorded), run again but not recorded twice: a ``request_end`` then tells the parent it
    ended, so that neither its deadline nor the blame for what comes next stays on it. What
    ``measure`` raises is that request's failure (status "error", the reason): the next one runs."""
    emit(ev.RequestStart(**head))
    t0 = time.perf_counter_ns()
    try:
        fields = measure()
    except Exception as exc:  # noqa: BLE001 - whatever one request raises (a server's reply, a template) fails it alone
        fields = {"status": "error", "error": reason(exc), "t0": t0}
    rec = ev.Request(**{**head, **fields})
    emit(rec if record else ev.RequestEnd(**head))
    return rec.record()


def todo(ctx: PhaseContext[EngineCore], heads: list[dict]) -> list[bool]:
    """Per request of a case (a warm-up first, then the measured ones): whether to run it and
    record it (False: recorded before a resume); an empty list when nothing is left. The
    protocols run a recorded warm-up again, unrecorded, when requests after it are left."""
    left = [request_key(h) not in ctx.done for h in heads]
    if not any(left):
        return []
    return left


def sent(left: Sequence[bool], i: int) -> bool:
    """Whether request ``i`` of a case is sent, ``left`` saying per request (a warm-up first) whether
    it is still to be recorded: a measured one left, or the warm-up while any is left (a resumed
    case warms up again, unrecorded, before what the interruption left)."""
    return any(left) and (left[i] or i == 0)


def warm_prompts(builder: PromptBuilder, key: str, prompt_tokens: int, reps: int) -> list[Prompt]:
    """A warm case's prompts: the warm-up's, then each measured request's (also what `macprof
    overhead --endpoint` sends its raw client, bench/server.py)."""
    return [builder.prompt(f"{key}:{i}", prompt_tokens) for i in range(reps + 1)]


def prime(engine: AnyEngine, prompt: Prompt) -> None:
    """Put exactly ``prompt`` in the engine's cache, untimed: a request of it for one token (an
    in-process engine has then not fed that token; a server holds the prompt, and its one token)."""
    sent = engine.request(prompt.text, 1) if engine.kind == "server" else engine.generate(list(prompt.ids), 1)
    for _ in sent:
        pass


def _warm_case(ctx: PhaseContext[AnyEngine], phase: str, key: str, prompt_tokens: int, gen_tokens: int, tags: dict) -> None:
    """One warm-up request (discarded), then ``reps`` measured ones, the cache emptied before each."""
    engine, s = ctx.engine, ctx.settings
    prompts = warm_prompts(ctx.builder, key, prompt_tokens, s.reps)
    heads = [{"phase": phase, "index": i - 1, "kind": _kind(i), **tags} for i in range(s.reps + 1)]
    left = todo(ctx, heads)
    for i, (prompt, head) in enumerate(zip(prompts, heads)):
        if not sent(left, i):
            continue
        _pause(s)
        engine.reset()
        announced(ctx.emit, head, lambda: timed_request(engine, prompt, gen_tokens, ctx.clock), record=left[i])


def _pause(settings: Settings) -> None:
    if settings.delay > 0:
        time.sleep(settings.delay)


def _kind(i: int) -> str:
    return "warmup" if i == 0 else "measured"


def compare_outputs(engine: EngineCore, prompt: Prompt, reference: Sequence[Any], other: Sequence[Any]) -> OutputCheck:
    """Token-by-token agreement (ids; a server's: its chunks' texts); at the first divergence, the top-2 logit margin of the
    reference (uncached) path decides whether it is a near-tie or a failed check."""
    n = max(len(reference), len(other))
    same = sum(1 for a, b in zip(reference, other) if a == b)
    first = next((k for k, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if first is None and len(reference) != len(other):
        first = min(len(reference), len(other))
    if first is not None and first < len(reference):
        diagnosing = able(engine, TOP2)
        if isinstance(diagnosing, str):  # a server gives no logits: a divergence there cannot be called a near-tie
            return OutputCheck(identical_fraction=same / n, first_divergence=first, margin=None, near_tie=None,
                               passed=False)
        margin = diagnosing.top2(list(prompt.ids) + list(reference[:first])).margin
        near_tie = margin < NEAR_TIE_LOGITS
        return OutputCheck(identical_fraction=same / n, first_divergence=first, margin=margin, near_tie=near_tie,
                           passed=near_tie)
    return OutputCheck(identical_fraction=same / n if n else 1.0, first_divergence=first, margin=None, near_tie=None,
                       passed=first is None)
