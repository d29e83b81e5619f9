"""llama-bench's figures of one test from its samples (pure), by the definitions of
tools/llama-bench/llama-bench.cpp in the llama.cpp that llama-cpp-python vendors:

- a sample is one repetition's time in ns: ``pp P`` times the P prompt tokens' batches
  (test_prompt), ``tg N`` the N single-token decode steps (test_gen), ``pp P + tg N`` both;
- ``samples_ts[i] = 1e9 * (n_prompt + n_gen) / samples_ns[i]`` (test::get_ts);
- ``avg_ns``: the mean of samples_ns in integer arithmetic (its uint64 ``avg``: the sum divided
  by the count, truncated); ``avg_ts``: the mean of samples_ts;
- ``stddev_ns``, ``stddev_ts``: the sample standard deviations (n - 1; 0 for one sample, as its
  ``stdev``). llama-bench computes stddev_ns in 64-bit unsigned integers, which truncates every
  step and overflows once a test's samples pass about 1.9 s (the sum of their squares passes
  2^64): here it is the exact sample deviation, truncated to an integer as its type is.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

NS = 1_000_000_000


def bench_name(n_prompt: int, n_gen: int, n_depth: int = 0) -> str:
    """``pp512``, ``tg128``, ``pp512+tg128``, ``... @ d4096``: the markdown printer's test column."""
    if n_prompt > 0 and n_gen == 0:
        name = f"pp{n_prompt}"
    elif n_gen > 0 and n_prompt == 0:
        name = f"tg{n_gen}"
    else:
        name = f"pp{n_prompt}+tg{n_gen}"
    return f"{name} @ d{n_depth}" if n_depth > 0 else name


@dataclass(frozen=True)
class Figures:
    samples_ns: tuple[int, ...]
    samples_ts: tuple[float, ...]
    avg_ns: int
    stddev_ns: int
    avg_ts: float
    stddev_ts: float


def figures(samples_ns: Sequence[int], n_tokens: int) -> Figures:
    """A test's figures from its repetitions' times (ns) and its token count (n_prompt + n_gen)."""
    ns = tuple(int(t) for t in samples_ns)
    if not ns or min(ns) <= 0 or n_tokens <= 0:
        raise ValueError(f"a test needs positive samples and tokens, not {ns} and {n_tokens}")
    ts = tuple(NS * n_tokens / t for t in ns)
    return Figures(samples_ns=ns, samples_ts=ts, avg_ns=sum(ns) // len(ns),
                   stddev_ns=int(statistics.stdev(ns)) if len(ns) > 1 else 0,
                   avg_ts=math.fsum(ts) / len(ts), stddev_ts=statistics.stdev(ts) if len(ts) > 1 else 0.0)
