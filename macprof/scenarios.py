"""The measurement protocols, run inside a worker next to the loaded engine.

Each protocol emits events (plain dicts) as it goes; the worker streams them to the parent,
which journals them at once, so nothing measured waits in memory for the end of a phase.

- warm:   model resident; one warm-up request (discarded), then `reps` requests with
          distinct prompts, the cache emptied before each.
- prefix: a shared prefix; each request (prefix + distinct suffix) is measured with the
          prefix already in the cache and with the cache emptied, alternating which goes
          first; outputs are compared token by token.
- cold:   (see worker.py) the first request of a fresh process, then a warm one of the
          same shape, so the first request's extra cost is measured, not guessed.
- grid / depth / batch: the sweeps of macprof/cases.py.
"""

from __future__ import annotations

import time
from typing import Callable

from macprof.config import Settings
from macprof.prompts import Prompt, PromptBuilder

Emit = Callable[[dict], None]
Clock = Callable[[], int]

# A divergence between the cached and the uncached output at a position where the top-2
# logits differ by less than this is a legitimate floating-point near-tie, not a failure.
NEAR_TIE_LOGITS = 0.1


def _stamped(engine, texts: list[str], generate, clock: Clock) -> dict:
    """Tokenize ``texts`` and run ``generate(ids)``, timestamping each item it yields; an
    engine error becomes a recorded failure with whatever timestamps it had."""
    engine.reset_peak_memory()
    times: list[int] = []
    outs: list = []
    ids: list[list[int]] | None = None
    t_tok = None
    t0 = clock()
    try:
        ids = [engine.tokenize(t) for t in texts]
        t_tok = clock()
        for out in generate(ids):
            times.append(clock())
            outs.append(out)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded failure
        status, error = "error", f"{type(exc).__name__}: {exc}"
    return {"status": status, "error": error, "t0": t0, "t_tokenized": t_tok, "token_times": times,
            "outs": outs, "ids": ids}


def timed_request(engine, prompt: Prompt, n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """One request, timestamped by the caller's clock (engines never time themselves). The
    engine's peak-memory counter is reset before it, outside the timed span."""
    r = _stamped(engine, [prompt.text], lambda ids: engine.generate(ids[0], n), clock)
    tokens, ids = r.pop("outs"), (r.pop("ids") or [list(prompt.ids)])[0]
    if r["status"] == "ok" and len(tokens) != n:
        r.update(status="error", error=f"engine yielded {len(tokens)} tokens instead of {n}")
    reused = engine.reused_tokens
    return {**r, "tokens": tokens, "prompt_tokens": len(ids), "reused_tokens": reused,
            "computed_prompt_tokens": len(ids) - reused, "cached_tokens_after": engine.cached_tokens(),
            "kv_cache_bytes": engine.kv_cache_bytes(), "engine_memory": engine.memory() or None}


def timed_batch(engine, prompts: list[Prompt], n: int, clock: Clock = time.perf_counter_ns) -> dict:
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


def announced(emit: Emit, head: dict, measure: Callable[[], dict]) -> dict:
    """``request_start`` before the measurement (the parent's per-request timeout runs from
    it), then the ``request`` record; both carry ``head`` (phase, index, kind, case...)."""
    emit({"event": "request_start", **head})
    rec = measure()
    emit({"event": "request", **head, **rec})
    return rec


def _pause(settings: Settings) -> None:
    if settings.delay > 0:
        time.sleep(settings.delay)


def _kind(i: int) -> str:
    return "warmup" if i == 0 else "measured"


def _warm_case(engine, builder: PromptBuilder, s: Settings, emit: Emit, clock: Clock, phase: str, key: str,
               prompt_tokens: int, gen_tokens: int, tags: dict) -> None:
    """One warm-up request (discarded), then ``reps`` measured ones, the cache emptied before each."""
    prompts = [builder.prompt(f"{key}:{i}", prompt_tokens) for i in range(s.reps + 1)]
    for i, prompt in enumerate(prompts):
        _pause(s)
        engine.reset()
        announced(emit, {"phase": phase, "index": i - 1, "kind": _kind(i), **tags},
                  lambda: timed_request(engine, prompt, gen_tokens, clock))


def run_warm(engine, builder: PromptBuilder, s: Settings, emit: Emit, clock: Clock = time.perf_counter_ns) -> None:
    engine.reset_peak_memory()
    _warm_case(engine, builder, s, emit, clock, "warm", "warm", s.prompt_tokens, s.gen_tokens, {})
    emit({"event": "phase_memory", "phase": "warm", "engine_memory": engine.memory()})


def _sweep(engine, phase: str, cases: list[dict], emit: Emit, one_case: Callable[[dict], None]) -> None:
    """Run each case; a case that cannot be set up (its prompts cannot be built, the engine
    cannot make room for its batch) is recorded as that case's error and the next one runs."""
    from macprof.errors import MacprofError

    engine.reset_peak_memory()
    for case in cases:
        try:
            one_case(case)
        except MacprofError as exc:
            emit({"event": "case_error", "phase": phase, "case": case["id"], "reason": str(exc)})
    emit({"event": "phase_memory", "phase": phase, "engine_memory": engine.memory()})


def run_grid(engine, builder: PromptBuilder, s: Settings, cases: list[dict], emit: Emit,
             clock: Clock = time.perf_counter_ns) -> None:
    def one_case(case: dict) -> None:
        _warm_case(engine, builder, s, emit, clock, "grid", f"grid:{case['id']}", case["prompt_tokens"],
                   case["gen_tokens"], {"case": case["id"]})

    _sweep(engine, "grid", cases, emit, one_case)


def run_depth(engine, builder: PromptBuilder, s: Settings, cases: list[dict], emit: Emit,
              clock: Clock = time.perf_counter_ns) -> None:
    """The cache is filled with d tokens once per case (timed apart, as ``fill_s``); before each
    request it is cut back to exactly those d tokens, which the request then reuses."""
    def one_case(case: dict) -> None:
        d, tags = case["depth"], {"case": case["id"]}
        engine.reset()
        t_start = t_end = None
        if d > 0:
            context = builder.prompt(f"depth:{d}", d)
            t_start = clock()
            for _ in engine.generate(list(context.ids), 1):  # computes exactly the d context tokens
                pass
            t_end = clock()
            prompts = [builder.prefixed(context, f"depth:{d}:{i}", d + 1) for i in range(s.reps + 1)]
        else:
            prompts = [builder.prompt(f"depth:0:{i}", 1) for i in range(s.reps + 1)]
        emit({"event": "depth_fill", "phase": "depth", **tags, "depth": d, "t_start": t_start, "t_end": t_end,
              "fill_s": (t_end - t_start) / 1e9 if d > 0 else None, "cached_tokens": engine.cached_tokens(),
              "kv_cache_bytes": engine.kv_cache_bytes()})
        for i, prompt in enumerate(prompts):
            _pause(s)
            engine.truncate(d)  # restore the filled cache: drop what the previous request added
            announced(emit, {"phase": "depth", "index": i - 1, "kind": _kind(i), **tags,
                             "cached_tokens_before": engine.cached_tokens()},
                      lambda: timed_request(engine, prompt, case["gen_tokens"], clock))

    _sweep(engine, "depth", cases, emit, one_case)


def run_batch(engine, builder: PromptBuilder, s: Settings, cases: list[dict], emit: Emit,
              clock: Clock = time.perf_counter_ns) -> None:
    """Per batch size: a warm-up batch, then ``reps`` measured batches of distinct prompts. The
    first measured batch is checked against the same prompts run one at a time (greedy)."""
    from macprof.cases import CONTEXT_MARGIN, tokens_per_sequence

    def one_case(case: dict) -> None:
        size, n, tags = case["batch"], case["gen_tokens"], {"case": case["id"], "batch": case["batch"]}
        if engine.batch_unsupported:
            emit({"event": "case_unsupported", "phase": "batch", **tags, "reason": engine.batch_unsupported})
            return
        engine.reset()
        engine.open_batch(size, tokens_per_sequence(case) + CONTEXT_MARGIN)
        try:
            for i in range(s.reps + 1):
                prompts = [builder.prompt(f"batch:{size}:{i}:{j}", case["prompt_tokens"]) for j in range(size)]
                _pause(s)
                engine.reset()
                rec = announced(emit, {"phase": "batch", "index": i - 1, "kind": _kind(i), **tags},
                                lambda: timed_batch(engine, prompts, n, clock))
                if i == 1 and rec["status"] == "ok":
                    emit({"event": "batch_check", "phase": "batch", **tags, "index": 0,
                          "sequences": _batch_check(engine, prompts, rec["tokens"], n)})
        finally:
            engine.close_batch()

    _sweep(engine, "batch", cases, emit, one_case)


def run_prefix(engine, builder: PromptBuilder, s: Settings, emit: Emit, clock: Clock = time.perf_counter_ns) -> None:
    prefix = builder.prompt("prefix:shared", s.prefix_tokens)
    prompts = [builder.prefixed(prefix, f"prefix:{i}", s.prompt_tokens) for i in range(s.reps + 1)]
    engine.reset_peak_memory()
    for i, prompt in enumerate(prompts):
        index = i - 1  # the first pair warms up both paths and is discarded
        kind = _kind(i)
        outputs: dict[str, list[int]] = {}
        order = ("reuse", "noreuse") if i % 2 == 0 else ("noreuse", "reuse")
        for mode in order:
            _pause(s)
            engine.reset()
            if mode == "reuse":  # put exactly the prefix in the cache, untimed
                for _ in engine.generate(list(prefix.ids), 1):
                    pass
            rec = announced(emit, {"phase": "prefix", "index": index, "kind": kind, "mode": mode},
                            lambda: timed_request(engine, prompt, s.gen_tokens, clock))
            outputs[mode] = rec["tokens"]
        emit({"event": "prefix_check", "phase": "prefix", "index": index, "kind": kind,
              **compare_outputs(engine, prompt, outputs["noreuse"], outputs["reuse"])})
    emit({"event": "phase_memory", "phase": "prefix", "engine_memory": engine.memory()})


def _batch_check(engine, prompts: list[Prompt], batched: list[list[int]], n: int) -> list[dict]:
    out = []
    for prompt, tokens in zip(prompts, batched):
        engine.reset()
        alone = list(engine.generate(list(prompt.ids), n))
        out.append(compare_outputs(engine, prompt, alone, tokens))
    return out


def compare_outputs(engine, prompt: Prompt, reference: list[int], other: list[int]) -> dict:
    """Token-by-token agreement; at the first divergence, the top-2 logit margin of the
    reference (uncached) path decides whether it is a near-tie or a failed check."""
    n = max(len(reference), len(other))
    same = sum(1 for a, b in zip(reference, other) if a == b)
    first = next((k for k, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if first is None and len(reference) != len(other):
        first = min(len(reference), len(other))
    out = {"identical_fraction": same / n if n else 1.0, "first_divergence": first,
           "margin": None, "near_tie": None, "passed": first is None}
    if first is not None and first < len(reference):
        top = engine.top2(list(prompt.ids) + reference[:first])
        out["margin"] = top.margin
        out["near_tie"] = top.margin < NEAR_TIE_LOGITS
        out["passed"] = out["near_tie"]
    return out
