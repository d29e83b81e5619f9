"""Workload sweeps (pure): which cases the grid, depth and batch phases measure.

- grid:  every (prompt_tokens, gen_tokens) of ``prompt_grid`` x ``gen_grid``, plus the named
         shapes; each case runs the warm protocol (warm-up, then ``reps`` requests with
         distinct prompts, the cache emptied before each).
- depth: decode after the KV cache already holds d tokens. The d tokens are computed once
         per case (untimed); each request then adds one new prompt token and generates
         ``gen_tokens``, and the cache is cut back to d tokens before the next one.
- batch: B sequences (distinct prompts of ``prompt_tokens``) decoded together,
         ``gen_tokens`` each.
- bench: llama-bench's tests, each on its own from an empty cache: ``pp P`` for each prompt
         length (P random token ids computed, no token generated), ``tg N`` for each generated
         length (N single-token decode steps from the model's first token).
"""

from __future__ import annotations

from itertools import product

from macprof.phases import REGISTRY, SWEEPS, load

# Named workload shapes: (prompt tokens, generated tokens, what it stands for).
SHAPES = {
    "rag": (2048, 64, "long input, short output: retrieval-augmented answers, document Q&A"),
    "chat": (256, 256, "short input, medium output: a chat turn"),
    "code": (512, 1024, "short input, long output: code generation"),
}
SWEEP_PHASES = SWEEPS  # the phases macprof/phases.py declares as sweeps
CONTEXT_MARGIN = 16  # tokens the engine's context holds beyond a case's own


def case_id(phase: str, case: dict) -> str:
    if phase == "grid":
        return case["shape"] or f"p{case['prompt_tokens']}-g{case['gen_tokens']}"
    if phase == "depth":
        return f"d{case['depth']}"
    if phase == "bench":
        return f"pp{case['prompt_tokens']}" if case["test"] == "pp" else f"tg{case['gen_tokens']}"
    return f"b{case['batch']}"


def grid_cases(s) -> list[dict]:
    cases = [{"shape": None, "prompt_tokens": p, "gen_tokens": g}
             for p, g in product(s.prompt_grid or (s.prompt_tokens,), s.gen_grid or (s.gen_tokens,))]
    if s.shapes and not (s.prompt_grid or s.gen_grid):
        cases = []  # shapes alone: just the shapes
    return cases + [{"shape": name, "prompt_tokens": SHAPES[name][0], "gen_tokens": SHAPES[name][1]} for name in s.shapes]


def depth_cases(s) -> list[dict]:
    # the request's prompt is the d cached tokens plus one new one
    return [{"depth": d, "prompt_tokens": d + 1, "gen_tokens": s.gen_tokens} for d in s.depths]


def batch_cases(s) -> list[dict]:
    return [{"batch": b, "prompt_tokens": s.prompt_tokens, "gen_tokens": s.gen_tokens} for b in s.batches]


def bench_cases(s) -> list[dict]:
    """llama-bench's tests: pp for every prompt length, then tg for every generated length (its
    -p and -n lists; a tg test's one prompt token is the first decode step's input, BOS or a
    random id, as llama-bench's test_gen feeds it)."""
    return ([{"test": "pp", "prompt_tokens": p, "gen_tokens": 0} for p in s.prompt_grid or (s.prompt_tokens,)]
            + [{"test": "tg", "prompt_tokens": 1, "gen_tokens": g} for g in s.gen_grid or (s.gen_tokens,)])


def plan(s) -> dict[str, list[dict]]:
    """Cases per sweep phase of settings ``s`` (only the phases it asks for), in run order,
    each with its id and the mean context its ceiling is evaluated at."""
    out: dict[str, list[dict]] = {}
    for phase in (p for p in SWEEP_PHASES if p in s.phases):
        out[phase] = [{**c, "id": case_id(phase, c), "context_tokens": mean_context(c["prompt_tokens"], c["gen_tokens"])}
                      for c in load(REGISTRY[phase].planner or "")(s)]
    return out


def mean_context(prompt_tokens: int, gen_tokens: int) -> float:
    """Mean context while decoding, c = prompt + gen / 2: where the ceiling is evaluated."""
    return prompt_tokens + gen_tokens / 2


def tokens_per_sequence(case: dict) -> int:
    return case["prompt_tokens"] + case["gen_tokens"]
