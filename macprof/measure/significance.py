"""Is a difference between two sets of raw samples real? Mann–Whitney U (pure).

Two-sided test on the raw per-request samples: exact null distribution when both samples are
small and untied (as with a handful of repetitions), normal approximation with tie and
continuity corrections otherwise. No distribution is assumed for the samples themselves, which
suits timings (skewed, with outliers).

Small samples cannot be significant at all: the exact test's smallest two-sided p for sizes n1, n2
is 2 / C(n1 + n2, n1) (3 vs 3: 0.1), so those sizes are said to be unable to tell rather than
reported as "no significant difference". Beside the test, a seeded bootstrap interval for the
ratio of medians says how large the difference could be.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from macprof.measure.stats import median

ALPHA = 0.05
CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0  # fixed: the same samples always give the same interval


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@lru_cache(maxsize=None)
def _count(u: int, n1: int, n2: int) -> int:
    """Number of arrangements of n1 + n2 untied values whose U statistic is exactly u."""
    if u < 0:
        return 0
    if n1 == 0 or n2 == 0:
        return 1 if u == 0 else 0
    return _count(u - n2, n1 - 1, n2) + _count(u, n1, n2 - 1)


def mann_whitney(a: list[float], b: list[float]) -> dict:
    """U of sample a, and the two-sided p-value."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return {"u": None, "p": None, "method": "no samples"}
    ranks = _ranks(list(a) + list(b))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    tied = len(set(a) | set(b)) < n1 + n2
    if not tied and n1 * n2 <= 400:
        total = math.comb(n1 + n2, n1)
        lo = min(u1, n1 * n2 - u1)
        tail = sum(_count(u, n1, n2) for u in range(int(lo) + 1)) / total
        return {"u": u1, "p": min(1.0, 2 * tail), "method": "exact"}
    mean = n1 * n2 / 2
    counts: dict[float, int] = {}
    for v in list(a) + list(b):
        counts[v] = counts.get(v, 0) + 1
    n = n1 + n2
    tie_term = sum(t**3 - t for t in counts.values()) / (n * (n - 1))
    var = n1 * n2 / 12 * ((n + 1) - tie_term)
    if var <= 0:
        return {"u": u1, "p": 1.0, "method": "normal (all tied)"}
    z = (abs(u1 - mean) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0) / math.sqrt(2))
    return {"u": u1, "p": min(1.0, p), "method": "normal approximation"}


def smallest_p(n1: int, n2: int) -> float | None:
    """The smallest two-sided p the exact test can give for sizes n1, n2 (no ties): the two most
    extreme of the C(n1 + n2, n1) equally likely arrangements, 2 / C(n1 + n2, n1)."""
    if n1 <= 0 or n2 <= 0:
        return None
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def can_reach(n1: int, n2: int, alpha: float = ALPHA) -> bool:
    """Whether any pair of samples of these sizes could be significant at alpha (p < alpha)."""
    p = smallest_p(n1, n2)
    return p is not None and p < alpha


def min_reps(alpha: float = ALPHA) -> int:
    """The fewest requests per side (equal sizes) at which the exact test can reach alpha."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    n = 1
    while not can_reach(n, n, alpha):
        n += 1
    return n


def reach(n1: int, n2: int, alpha: float = ALPHA) -> dict:
    """What sizes n1, n2 allow: the smallest possible p, whether it is below alpha, and the
    fewest requests per side that would be."""
    return {"sizes": [n1, n2], "smallest_p": smallest_p(n1, n2), "can_reach_alpha": can_reach(n1, n2, alpha),
            "min_reps_per_side": min_reps(alpha)}


def verdict(a: list[float], b: list[float], higher_is_better: bool, alpha: float = ALPHA) -> dict:
    """Compare b against baseline a: 'faster', 'slower', 'no significant difference', or
    'cannot tell' when these sizes could not reach alpha whatever the samples (``why`` says so)."""
    test = mann_whitney(a, b)
    if test["p"] is None:
        return {**test, "sizes": [len(a), len(b)], "call": "not comparable (missing samples)"}
    sizes = reach(len(a), len(b), alpha)
    # decided by the sizes, whatever p says: with ties the normal approximation can dip below
    # alpha at 3 vs 3 ([1, 1, 1] vs [2, 2, 2]: 0.047), an artefact, since the exact permutation
    # p (twice the smaller tail) is at least 2 / C(n1 + n2, n1) with ties too
    if not sizes["can_reach_alpha"]:
        why = (f"{len(a)} vs {len(b)} requests, p >= {sizes['smallest_p']:.2g}; "
               f"needs >= {sizes['min_reps_per_side']} per side")
        return {**test, **sizes, "call": "cannot tell", "why": why}
    if test["p"] >= alpha:
        return {**test, **sizes, "call": "no significant difference"}
    med_a, med_b = median(a), median(b)
    better = med_b > med_a if higher_is_better else med_b < med_a
    return {**test, **sizes, "call": "faster" if better else "slower"}


def median_ratio_interval(a: list[float], b: list[float], confidence: float = CONFIDENCE,
                          resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """Percentile bootstrap interval for median(b) / median(a): each side resampled with
    replacement independently, ``resamples`` times, from a generator seeded with ``seed``.
    Medians as stats.median (numpy's median is the same definition). Low and high are None,
    with the reason, when a side has no samples or a resampled baseline median is 0."""
    return median_ratio_intervals([(a, b)], confidence, resamples, seed)[0]


def median_ratio_intervals(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], confidence: float = CONFIDENCE,
                           resamples: int = RESAMPLES, seed: int = SEED) -> list[dict]:
    """median_ratio_interval of each (a, b) pair, the same intervals to the bit, computed together.

    Each pair's resamples are the ones median_ratio_interval has always drawn: a generator seeded
    with ``seed``, a's indices (resamples x len(a)) then b's. They depend on the sizes only, so
    they are drawn once per (len(a), len(b)) and reduced to what a median needs: the sides are
    sorted, so a resample's median is the value at its middle drawn index once those are sorted
    (odd size), or the mean of the values at its two middle ones (even size), as numpy's median
    computes it. Of 10,000 resamples of 5 vs 5 samples only some 25 (middle of a, middle of b)
    combinations occur: a pair's ratio of medians is computed once per combination, and sorted,
    with how often each was drawn it gives the two neighbours of each percentile among the
    10,000 ratios. np.quantile of those two neighbours, at the fraction between them that it
    computes for 10,000 values ((n - 1) q less its floor), interpolates exactly as it does among
    all 10,000: one call for all the pairs. Instead of a partition of every resample of every
    pair (2.4 s for the 1,186 intervals of 50 logs), a few small arrays per pair.

    Only for positive, finite samples, which timings and rates are: with a zero, a NaN or a
    negative value a ratio can be 0.0 or -0.0, whose order in a sort is arbitrary; such a pair
    is drawn and partitioned in full, as median_ratio_interval always did."""
    import numpy as np

    out = {"low": None, "high": None, "confidence": confidence, "resamples": resamples, "seed": seed,
           "method": "percentile bootstrap of the ratio of medians"}
    results: list[dict] = [out] * len(pairs)
    tail = (1 - confidence) / 2
    # as np.quantile places the percentiles among n values: (n - 1) q; the neighbours and the fraction
    virtual = (resamples - 1) * np.asanyarray([tail, 1 - tail])
    below = np.floor(virtual)
    fraction = virtual - below
    at = np.array([int(below[0]), int(below[0]) + 1, int(below[1]), int(below[1]) + 1])
    neighbours_known = resamples >= 2 and 0 <= at[0] and at[3] <= resamples - 1  # none clipped to an end
    fast: list[tuple[int, Any]] = []  # (place in pairs, the four neighbours)
    full: list[tuple[int, Any]] = []  # (place in pairs, every resample's ratio of medians)
    for i, (a, b) in enumerate(pairs):
        if len(a) == 0 or len(b) == 0:
            results[i] = {**out, "reason": "no samples on one side"}
            continue
        # sorted, so the interval depends on the values only, not on the order they were recorded in
        xa, xb = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
        if neighbours_known and xa[0] > 0 and xb[0] > 0 and np.isfinite(xa[-1]) and np.isfinite(xb[-1]):
            drawn = _drawn_middles(len(xa), len(xb), resamples, seed)
            ratio = _median_at(xb, drawn.b) / _median_at(xa, drawn.a)  # one per combination drawn
            order = np.argsort(ratio, kind="stable")
            # the value at sorted place p: the first combination whose running count passes p
            fast.append((i, ratio[order][np.searchsorted(np.cumsum(drawn.counts[order]), at, side="right")]))
            continue
        rng = np.random.default_rng(seed)
        med_a = np.median(xa[rng.integers(0, len(xa), size=(resamples, len(xa)))], axis=1)
        med_b = np.median(xb[rng.integers(0, len(xb), size=(resamples, len(xb)))], axis=1)
        if np.any(med_a == 0):
            results[i] = {**out, "reason": "a resampled baseline median is 0: the ratio is unknown"}
            continue
        full.append((i, med_b / med_a))
    if fast:
        points = np.stack([p for _, p in fast])
        lows = np.quantile(points[:, :2], fraction[0], axis=1)
        highs = np.quantile(points[:, 2:], fraction[1], axis=1)
        for (i, _), low, high in zip(fast, lows, highs):
            results[i] = {**out, "low": float(low), "high": float(high), "reason": None}
    for start in range(0, len(full), _BATCH):
        chunk = full[start:start + _BATCH]
        lows, highs = np.quantile(np.stack([r for _, r in chunk]), [tail, 1 - tail], axis=1)
        for (i, _), low, high in zip(chunk, lows, highs):
            results[i] = {**out, "low": float(low), "high": float(high), "reason": None}
    return results


_BATCH = 64  # pairs per np.quantile call: 64 x 10,000 resamples is 5 MB, not 95 MB for 1,186 pairs


class _Drawn(NamedTuple):
    a: tuple  # the middle drawn index (odd size), or the two (even), of each combination, for a
    b: tuple  # the same for b
    counts: Any  # how many of the resamples drew each combination


@lru_cache(maxsize=64)
def _drawn_middles(n_a: int, n_b: int, resamples: int, seed: int) -> _Drawn:
    """The combinations of middle indices (into the sorted sides) that the resamples of sizes
    n_a, n_b drew, from the generator median_ratio_interval seeds, in the order it draws them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    codes = []
    for n in (n_a, n_b):
        idx = np.sort(rng.integers(0, n, size=(resamples, n)), axis=1)
        codes.append(idx[:, (n - 1) // 2] * n + idx[:, n // 2])  # (low middle, high middle) as one number
    joint, counts = np.unique(codes[0] * (n_b * n_b) + codes[1], return_counts=True)
    code_a, code_b = np.divmod(joint, n_b * n_b)
    a, b = (tuple(np.divmod(code, n)) if n % 2 == 0 else (code // n,) for code, n in ((code_a, n_a), (code_b, n_b)))
    return _Drawn(a, b, counts)


def _median_at(x, middles: tuple):
    """The medians of resamples from their middle indices into sorted x, as numpy's median of
    the resampled values: the middle value, or the mean of the two middle ones, (lo + hi) / 2."""
    return x[middles[0]] if len(middles) == 1 else (x[middles[0]] + x[middles[1]]) / 2


def median_interval(values: list[float], confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                    seed: int = SEED) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval for the median of one sample (e.g. paired ratios), seeded;
    (None, None) without samples."""
    import numpy as np

    if not values:
        return None, None
    rng = np.random.default_rng(seed)
    x = np.sort(np.asarray(values, dtype=float))
    meds = np.median(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(meds, [tail, 1 - tail])
    return float(low), float(high)
