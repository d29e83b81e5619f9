"""Which of a model's measurements are llama-bench tests, by llama-bench's own definitions
(tools/llama-bench/llama-bench.cpp), and each one's repetitions as samples (pure: records in,
figures out; measure/llamabench.py computes them). docs/export.md tells the mapping:

- the bench phase's ``pp P`` case: each request computed P random ids into an empty cache and
  generated nothing; its sample is t_prefilled - t_tokenized (test_prompt's span) -> ``pp P``;
- the bench phase's ``tg N`` case: N single-token decode steps from an empty cache; its sample is
  t_N - t_tokenized, the first step included (test_gen's span) -> ``tg N``;
- a depth case ``d D``: the request's one new prompt token and its N - 1 following tokens are N
  single-token decode steps after D cached tokens; t_N - t_tokenized -> ``tg N @ d D``;
- the warm phase and each grid case: after the prompt's P tokens and the first token, the n - 1
  following tokens are single-token decode steps from depth P; t_n - t_1 -> ``tg(n-1) @ dP``.

Not exported: the warm phase's prefill as a ``pp P``: its time ends when the first generated token
is out, which llama-bench's pp never generates (one more sampling and, on MLX, the first step's
own forward pass over the last prompt token); a server's requests; a test with a failed request
(llama-bench writes no row for a test that failed). Each is said in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from macprof.measure.llamabench import Figures, figures, bench_name
from macprof.model.log import ModelResult
from macprof.model.phases import Request, SweepCase


@dataclass(frozen=True)
class BenchTest:
    """One llama-bench test measured in a model's log: its shape, figures and where it came from."""

    n_prompt: int
    n_gen: int
    n_depth: int
    figures: Figures
    source: str  # the phase (and case) it was measured in: "bench pp512", "depth d4096", "warm"

    @property
    def name(self) -> str:
        return bench_name(self.n_prompt, self.n_gen, self.n_depth)


Sample = Callable[[Request], int | None]
Shape = Callable[[Request], tuple[int, int, int] | None]  # a request as llama-bench's (n_prompt, n_gen, n_depth)
Found = BenchTest | str  # a test, or the line saying why what was measured gives no row
SKIPPED = ("unsupported", "refused", "not run")  # a case's status where it measured nothing


def _pp(r: Request) -> int | None:
    return r.t_prefilled - r.t_tokenized if r.t_prefilled is not None and r.t_tokenized is not None else None


def _from_start(r: Request) -> int | None:
    return r.token_times[-1] - r.t_tokenized if r.token_times and r.t_tokenized is not None else None


def _after_first(r: Request) -> int | None:
    return r.token_times[-1] - r.token_times[0] if len(r.token_times) >= 2 else None


def _as_pp(r: Request) -> tuple[int, int, int] | None:
    """A bench pp request: its prompt computed into an empty cache, nothing generated."""
    return (r.prompt_tokens, 0, 0) if r.n_tokens == 0 and not r.reused_tokens else None


def _as_tg(r: Request) -> tuple[int, int, int] | None:
    """A bench tg request: one prompt token, then its decode steps, from an empty cache."""
    return (0, r.n_tokens, 0) if r.prompt_tokens == 1 and not r.reused_tokens else None


def _as_tg_after_prompt(r: Request) -> tuple[int, int, int] | None:
    """A warm or grid request: the steps after its first token, at the depth of its prompt."""
    return (0, r.n_tokens - 1, r.prompt_tokens) if r.n_tokens >= 2 and not r.reused_tokens else None


def _at_depth(d: int) -> Shape:
    """A depth case's request as ``tg n @ d``: only where it computed its one new prompt token
    after the d cached ones (reused, not recomputed)."""
    def shape(r: Request) -> tuple[int, int, int] | None:
        return (0, r.n_tokens, d) if r.computed_prompt_tokens == 1 and r.prompt_tokens == d + 1 else None

    return shape


def _test(name: str, source: str, requests: Sequence[Request], shape: Shape, sample: Sample) -> Found:
    """The test ``source``'s measured requests make, each one repetition of it, or why they make
    none: a request failed, none was measured, or they are not that one test each."""
    measured = [r for r in requests if r.kind == "measured"]
    failed = [r for r in measured if r.status != "ok"]
    if not measured:
        return f"{name}: {source}: no measured request: no row"
    if failed:
        return (f"{name}: {source}: {len(failed)} of {len(measured)} measured requests failed: no row "
                f"(llama-bench writes none for a test that failed)")
    shapes = {shape(r) for r in measured}
    samples = [sample(r) for r in measured]
    if None in shapes or len(shapes) != 1 or any(s is None or s <= 0 for s in samples):
        return (f"{name}: {source}: its requests are not one llama-bench test each (another number of "
                f"tokens, a prompt not computed as the test's, or a stamp missing): no row")
    shape_, = shapes
    assert shape_ is not None
    n_prompt, n_gen, n_depth = shape_
    return BenchTest(n_prompt, n_gen, n_depth, figures([s for s in samples if s], n_prompt + n_gen), source)


def _bench_case(name: str, case: SweepCase) -> Found:
    """A bench phase's case: llama-bench's own pp or tg test."""
    if case.status in SKIPPED:
        return f"{name}: bench {case.id}: {case.status}" + (f": {case.reason}" if case.reason else "")
    pp = case.test == "pp"
    return _test(name, f"bench {case.id}", case.requests, _as_pp if pp else _as_tg, _pp if pp else _from_start)


def _depth_case(name: str, case: SweepCase) -> Found:
    """A depth case's requests as ``tg n @ d``: the one new prompt token is the first decode step
    only where the d cached ones were reused."""
    if case.status in SKIPPED:
        return f"{name}: depth {case.id}: {case.status}"
    return _test(name, f"depth {case.id}", case.requests, _at_depth(case.depth or 0), _from_start)


def _pp_not_exported(name: str, warm: list[tuple[str, Sequence[Request]]], tests: list[BenchTest]) -> list[str]:
    """A warm or grid prompt length no bench pp test measured: one line each, why its prefill is
    not exported as one."""
    pp_done = {t.n_prompt for t in tests if t.n_gen == 0}
    return [f"{name}: pp{p} not exported from the {source} phase: its prefill ends with the first generated "
            f"token, which llama-bench's pp never generates (--preset llama-bench measures pp{p})"
            for source, requests in warm
            for p in sorted({r.prompt_tokens for r in requests if r.kind == "measured"} - pp_done)]


def bench_tests(m: ModelResult) -> tuple[list[BenchTest], list[str]]:
    """The model's llama-bench tests, and one line per test it ran that gives no row (a failed
    request, a request that was not the test) and per approximation left out."""
    name = m.identity.name
    if m.identity.engine == "openai":
        return [], [f"{name}: measured through a server: its requests are not llama-bench's tests (no row)"]
    ph = m.phases
    warm: list[tuple[str, Sequence[Request]]] = [("warm", ph.warm.requests)] if ph.warm else []
    warm += [(f"grid {c.id}", c.requests) for c in (ph.grid.cases if ph.grid else ()) if c.requests]
    found = [_bench_case(name, case) for case in (ph.bench.cases if ph.bench else ())]
    found += [_depth_case(name, case) for case in (ph.depth.cases if ph.depth else ())]
    found += [_test(name, source, requests, _as_tg_after_prompt, _after_first) for source, requests in warm]
    out = [f for f in found if isinstance(f, BenchTest)]
    missing = [f for f in found if isinstance(f, str)] + _pp_not_exported(name, warm, out)
    if not out and not missing:
        missing.append(f"{name}: no llama-bench test in this log (no bench, depth, warm or grid phase)")
    return out, missing
