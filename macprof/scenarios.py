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


def timed_request(engine, prompt: Prompt, n: int, clock: Clock = time.perf_counter_ns) -> dict:
    """One request, timestamped by the caller's clock (engines never time themselves). The
    engine's peak-memory counter is reset before it, outside the timed span."""
    engine.reset_peak_memory()
    times: list[int] = []
    tokens: list[int] = []
    t_tok = None
    t0 = clock()
    try:
        ids = engine.tokenize(prompt.text)
        t_tok = clock()
        for token in engine.generate(ids, n):
            times.append(clock())
            tokens.append(token)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded failure
        status, error = "error", f"{type(exc).__name__}: {exc}"
        ids = list(prompt.ids)
    if status == "ok" and len(tokens) != n:
        status, error = "error", f"engine yielded {len(tokens)} tokens instead of {n}"
    reused = engine.reused_tokens
    return {
        "status": status,
        "error": error,
        "t0": t0,
        "t_tokenized": t_tok,
        "token_times": times,
        "tokens": tokens,
        "prompt_tokens": len(ids),
        "reused_tokens": reused,
        "computed_prompt_tokens": len(ids) - reused,
        "cached_tokens_after": engine.cached_tokens(),
        "kv_cache_bytes": engine.kv_cache_bytes(),
        "engine_memory": engine.memory() or None,
    }


def _pause(settings: Settings) -> None:
    if settings.delay > 0:
        time.sleep(settings.delay)


def run_warm(engine, builder: PromptBuilder, s: Settings, emit: Emit, clock: Clock = time.perf_counter_ns) -> None:
    prompts = [builder.prompt(f"warm:{i}", s.prompt_tokens) for i in range(s.reps + 1)]
    engine.reset_peak_memory()
    for i, prompt in enumerate(prompts):
        kind = "warmup" if i == 0 else "measured"
        _pause(s)
        engine.reset()
        emit({"event": "request_start", "phase": "warm", "index": i - 1, "kind": kind})
        rec = timed_request(engine, prompt, s.gen_tokens, clock)
        emit({"event": "request", "phase": "warm", "index": i - 1, "kind": kind, **rec})
    emit({"event": "phase_memory", "phase": "warm", "engine_memory": engine.memory()})


def run_prefix(engine, builder: PromptBuilder, s: Settings, emit: Emit, clock: Clock = time.perf_counter_ns) -> None:
    prefix = builder.prompt("prefix:shared", s.prefix_tokens)
    prompts = [builder.prefixed(prefix, f"prefix:{i}", s.prompt_tokens) for i in range(s.reps + 1)]
    engine.reset_peak_memory()
    for i, prompt in enumerate(prompts):
        index = i - 1  # the first pair warms up both paths and is discarded
        kind = "warmup" if i == 0 else "measured"
        outputs: dict[str, list[int]] = {}
        order = ("reuse", "noreuse") if i % 2 == 0 else ("noreuse", "reuse")
        for mode in order:
            _pause(s)
            engine.reset()
            if mode == "reuse":  # put exactly the prefix in the cache, untimed
                for _ in engine.generate(list(prefix.ids), 1):
                    pass
            emit({"event": "request_start", "phase": "prefix", "index": index, "kind": kind, "mode": mode})
            rec = timed_request(engine, prompt, s.gen_tokens, clock)
            outputs[mode] = rec["tokens"]
            emit({"event": "request", "phase": "prefix", "index": index, "kind": kind, "mode": mode, **rec})
        emit({"event": "prefix_check", "phase": "prefix", "index": index, "kind": kind,
              **compare_outputs(engine, prompt, outputs["noreuse"], outputs["reuse"])})
    emit({"event": "phase_memory", "phase": "prefix", "engine_memory": engine.memory()})


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
