"""bench: llama-bench's tests, as its tools/llama-bench/llama-bench.cpp runs them (llama-cpp-python's
vendored llama.cpp), so that `macprof export --format llama-bench-*` writes figures by its
definitions from macprof's own stamps:

- ``pp P``: P token ids computed into an empty cache in chunks of n_batch, no token generated
  (llama-bench's test_prompt; the engine's ``prefill`` returns once the device has finished).
  Stamped before the first chunk and after the last (``t_prefilled``).
- ``tg N``: N single-token decode steps from an empty cache (test_gen): the first fed token is the
  one the model's prompts begin with (BOS) or a random id where it adds none, as llama-bench's;
  each later one is the greedy token of the step before, where llama-bench feeds a random id (the
  argmax over the vocabulary is the difference: microseconds a step). Stamped before the first
  step and as each token is out, so the test's time is t_N - t_tokenized.

The ids are random, seeded per case and request (llama-bench draws them with an unseeded
std::rand, the same every run), the first one BOS where the model adds it. Warm-up as
llama-bench's: one pp run before a pp test, a 1-token tg run before a tg test (the warm-up
request, kept in the log and out of the figures). The cache is emptied before every request.
"""

from __future__ import annotations

import random
from functools import partial

from macprof.engines.base import AnyEngine, Engine, EngineCore
from macprof.engines.capabilities import PREFILL, Prefilling, able
from macprof.errors import MacprofError, reason
from macprof.model import events as ev
from macprof.run.phases.common import Clock, PhaseContext, _kind, _pause, announced, sent, reuse_of, stamped_sequence, todo
from macprof.run.phases.sweeps import _sweep
from macprof.run.prompts import Prompt


def random_ids(engine: EngineCore, n: int, seed: str) -> list[int]:
    """``n`` ids, the first one the model's prompts begin with (what the tokenizer adds to an empty
    text: BOS) where it adds one, the rest uniform over the vocabulary, seeded by ``seed``."""
    rng = random.Random(seed)
    lead = list(engine.tokenize(""))[:1]
    return (lead + [rng.randrange(engine.vocab_size) for _ in range(n)])[:n]


def timed_prefill(engine: Prefilling, ids: list[int], clock: Clock) -> dict:
    """One pp request: the ids computed into the cache, stamped either side; an engine error is
    the request's recorded failure."""
    engine.reset_peak_memory()
    t0 = clock()
    t_end = None
    try:
        engine.prefill(ids)
        t_end = clock()
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded failure
        status, error = "error", reason(exc)
    return {"status": status, "error": error, "t0": t0, "t_tokenized": t0, "t_prefilled": t_end, "token_times": [],
            "tokens": [], "prompt_tokens": len(ids), "engine_memory": engine.memory() or None,
            **reuse_of(engine, len(ids), 0)}


def timed_generation(engine: Engine, ids: list[int], n: int, clock: Clock) -> dict:
    """One tg request: ``n`` tokens generated after ``ids`` (one id: its first decode step), each
    stamped as it is out; the ids are given, so t_tokenized follows t0 with nothing between."""
    r = stamped_sequence(engine, Prompt("", tuple(ids)), n, lambda got: engine.generate(got, n), clock, "engine",
                         lambda _: list(ids))
    return {**r, **reuse_of(engine, r["prompt_tokens"], engine.reused_tokens)}


def run_bench(ctx: PhaseContext[AnyEngine]) -> None:
    s, emit, clock = ctx.settings, ctx.emit, ctx.clock
    prefilling = able(ctx.engine, PREFILL)

    def one_case(case: dict) -> None:
        if isinstance(prefilling, str):
            emit(ev.CaseUnsupported(phase="bench", case=case["id"], reason=prefilling))
            return
        engine = prefilling
        tags = {"case": case["id"]}
        heads = [{"phase": "bench", "index": i - 1, "kind": _kind(i), **tags} for i in range(s.reps + 1)]
        left = todo(ctx, heads)
        if not left:
            return  # measured before a resume
        if ctx.n_ctx and case["prompt_tokens"] + case["gen_tokens"] > ctx.n_ctx:
            raise MacprofError(f"{case['id']} needs {case['prompt_tokens'] + case['gen_tokens']} tokens of context; "
                               f"the engine holds {ctx.n_ctx}")
        pp = case["test"] == "pp"
        for i, head in enumerate(heads):
            if not sent(left, i):
                continue
            ids = random_ids(engine, case["prompt_tokens"], f"bench:{case['id']}:{i}")
            _pause(s)
            engine.reset()
            # the tg warm-up is a 1-token tg run, as llama-bench's
            measure = (partial(timed_prefill, engine, ids, clock) if pp else
                       partial(timed_generation, engine, ids, 1 if i == 0 else case["gen_tokens"], clock))
            announced(emit, head, measure, record=left[i])
        engine.reset()

    _sweep(ctx.engine, "bench", ctx.cases, emit, one_case)
