"""Is a difference between two sets of raw samples real? Mann–Whitney U (pure).

Two-sided test on the raw per-request samples: exact null distribution when both samples are
small and untied (as with a handful of repetitions), normal approximation with tie and
continuity corrections otherwise. No distribution is assumed for the samples themselves, which
suits timings (skewed, with outliers).
"""

from __future__ import annotations

import math
import statistics
from functools import lru_cache

ALPHA = 0.05


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


def verdict(a: list[float], b: list[float], higher_is_better: bool, alpha: float = ALPHA) -> dict:
    """Compare b against baseline a: 'faster', 'slower' or 'no significant difference'."""
    test = mann_whitney(a, b)
    if test["p"] is None:
        return {**test, "call": "not comparable (missing samples)"}
    if test["p"] >= alpha:
        return {**test, "call": "no significant difference"}
    med_a, med_b = statistics.median(a), statistics.median(b)
    better = med_b > med_a if higher_is_better else med_b < med_a
    return {**test, "call": "faster" if better else "slower"}
