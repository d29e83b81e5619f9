"""Proportions and paired comparisons of right answers (pure math, no scipy): the 95 % Wilson
score interval of k right of n, and the exact McNemar test of two models on the same tasks
(the two-sided binomial test of the discordant pairs at p = 1/2)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054  # the standard normal's 97.5th percentile
ALPHA = 0.05


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials; (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"{k} successes of {n} trials")
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at k = 0 or k = n the bound is exact: no rounding past it
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


def binomial_two_sided(k: int, n: int) -> float:
    """The exact two-sided p-value of k successes in n trials at p = 1/2 (twice the smaller tail)."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def mcnemar_exact(b: int, c: int) -> float:
    """The exact McNemar p-value: ``b`` tasks only the first model got right, ``c`` only the second."""
    return binomial_two_sided(b, b + c)


def smallest_significant_pairs(alpha: float = ALPHA) -> int:
    """The fewest discordant pairs at which the exact test can reach ``alpha`` at all (all of
    them one way): with fewer, "cannot tell" whatever the answers (6 at 0.05)."""
    n = 1
    while binomial_two_sided(0, n) >= alpha:
        n += 1
    return n
