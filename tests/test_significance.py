"""The pure pieces `compare` rests on: the smallest p the exact test can give for given sample
sizes, the seeded bootstrap interval for a ratio of medians, and the one median and one ratio."""

import itertools
import math
import statistics

import numpy as np
import pytest

from macprof.measure.significance import (can_reach, mann_whitney, median_ratio_interval, median_ratio_intervals, min_reps,
                                          smallest_p, verdict)
from macprof.measure.stats import median, ratio


# -- what sample sizes allow -----------------------------------------------------------------
@pytest.mark.parametrize("n1,n2", [(2, 2), (3, 3), (3, 4), (4, 4), (5, 5), (2, 7)])
def test_smallest_p_is_the_exact_test_on_fully_separated_samples(n1, n2):
    a, b = [float(i) for i in range(n1)], [float(100 + i) for i in range(n2)]
    assert mann_whitney(a, b)["method"] == "exact"
    assert smallest_p(n1, n2) == pytest.approx(mann_whitney(a, b)["p"])
    assert smallest_p(n1, n2) == pytest.approx(min(1.0, 2 / math.comb(n1 + n2, n1)))


def test_smallest_p_is_the_least_over_every_arrangement():
    # every way to split 7 untied values 3 / 4: none gives a smaller p than the bound
    values = list(range(7))
    ps = [mann_whitney([float(v) for v in left], [float(v) for v in values if v not in left])["p"]
          for left in itertools.combinations(values, 3)]
    assert min(ps) == pytest.approx(smallest_p(3, 4))


def test_sizes_that_can_reach_alpha():
    assert smallest_p(3, 3) == pytest.approx(0.1) and not can_reach(3, 3)
    assert smallest_p(4, 4) == pytest.approx(2 / 70) and can_reach(4, 4)
    assert smallest_p(0, 5) is None and not can_reach(0, 5)
    for alpha in (0.1, 0.05, 0.01, 0.001):
        n = min_reps(alpha)
        assert can_reach(n, n, alpha) and not can_reach(n - 1, n - 1, alpha)
    assert min_reps(0.05) == 4
    with pytest.raises(ValueError):
        min_reps(0)


def test_three_vs_three_cannot_tell_even_when_fully_separated():
    a, b = [10.0, 10.1, 10.2], [20.0, 20.1, 20.2]
    v = verdict(a, b, higher_is_better=True)
    assert v["call"] == "cannot tell" and not v["can_reach_alpha"] and v["min_reps_per_side"] == 4
    assert v["why"] == "3 vs 3 requests, p >= 0.1; needs >= 4 per side"


def test_tied_three_vs_three_cannot_tell_although_the_approximation_says_p_below_alpha():
    a, b = [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]
    assert mann_whitney(a, b)["p"] < 0.05  # the normal approximation's artefact at this size
    assert verdict(a, b, higher_is_better=True)["call"] == "cannot tell"


def test_five_vs_five_with_a_real_difference_is_called():
    a, b = [10.0, 10.2, 9.9, 10.1, 10.05], [12.0, 12.3, 11.8, 12.1, 11.9]
    v = verdict(a, b, higher_is_better=True)
    assert v["call"] == "faster" and v["can_reach_alpha"] and "why" not in v


# -- the bootstrap interval for the ratio of medians ------------------------------------------
def _samples(seed, n, med):
    """Lognormal samples whose true median is ``med``."""
    return list(med * np.random.default_rng(seed).lognormal(0.0, 0.05, n))


def test_interval_contains_the_true_ratio_and_excludes_one():
    a, b = _samples(1, 20, 100.0), _samples(2, 20, 120.0)  # true ratio of medians 1.2
    ci = median_ratio_interval(a, b)
    assert ci["low"] < 1.2 < ci["high"] and ci["low"] > 1.0
    assert ci["low"] <= median(b) / median(a) <= ci["high"]
    assert ci["confidence"] == 0.95 and ci["reason"] is None


def test_interval_is_deterministic_for_a_seed_and_independent_of_order():
    a, b = _samples(3, 8, 50.0), _samples(4, 8, 40.0)
    first = median_ratio_interval(a, b, seed=7)
    assert median_ratio_interval(a, b, seed=7) == first
    assert median_ratio_interval(a[::-1], b[::-1], seed=7) == first
    assert median_ratio_interval(a, b, seed=8) != first


def test_interval_narrows_with_confidence():
    a, b = _samples(5, 10, 10.0), _samples(6, 10, 11.0)
    wide, narrow = median_ratio_interval(a, b, confidence=0.99), median_ratio_interval(a, b, confidence=0.5)
    assert wide["low"] <= narrow["low"] <= narrow["high"] <= wide["high"]


def test_interval_unknown_with_the_reason():
    assert median_ratio_interval([], [1.0])["low"] is None
    zero = median_ratio_interval([0.0, 0.0, 1.0], [1.0, 2.0])
    assert zero["low"] is None and zero["high"] is None and "0" in zero["reason"]


# -- one median, one ratio -------------------------------------------------------------------
@pytest.mark.parametrize("xs", [[3.0], [4.0, 1.0], [5.0, 1.0, 3.0], [2.0, 9.0, 1.0, 7.0]])
def test_median_is_the_middle_or_the_mean_of_the_two_middles(xs):
    assert median(xs) == statistics.median(xs) == np.median(xs)


def test_ratio_zero_and_unknown():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(0.0, 2.0) == 0.0  # a zero numerator is a real zero
    assert ratio(3.0, 0.0) is None and ratio(0, 0) is None  # a zero denominator has no ratio
    assert ratio(None, 2.0) is None and ratio(2.0, None) is None


# -- the intervals computed together are the ones drawn one pair at a time --------------------
def _drawn_one_at_a_time(a, b, confidence=0.95, resamples=10_000, seed=0):
    """median_ratio_interval as it was before the intervals were computed together (issue #22):
    every resample of every pair drawn and partitioned. Kept here only to show that the batch
    gives the same intervals, to the bit."""
    out = {"low": None, "high": None, "confidence": confidence, "resamples": resamples, "seed": seed,
           "method": "percentile bootstrap of the ratio of medians"}
    if not a or not b:
        return {**out, "reason": "no samples on one side"}
    rng = np.random.default_rng(seed)
    xa, xb = np.sort(np.asarray(a, dtype=float)), np.sort(np.asarray(b, dtype=float))
    med_a = np.median(xa[rng.integers(0, len(xa), size=(resamples, len(xa)))], axis=1)
    med_b = np.median(xb[rng.integers(0, len(xb), size=(resamples, len(xb)))], axis=1)
    if np.any(med_a == 0):
        return {**out, "reason": "a resampled baseline median is 0: the ratio is unknown"}
    tail = (1 - confidence) / 2
    low, high = np.quantile(med_b / med_a, [tail, 1 - tail])
    return {**out, "low": float(low), "high": float(high), "reason": None}


def _same(got: dict, want: dict) -> bool:
    """Equal dicts, bit for bit (a NaN bound equals a NaN bound; 0.0 and -0.0 differ)."""
    def same(x, y):
        if isinstance(x, float) and isinstance(y, float):
            return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        return x == y
    return got.keys() == want.keys() and all(same(got[k], want[k]) for k in got)


def _pairs(rng, count, kind):
    def side():
        n = int(rng.integers(0, 12))
        if kind == "timings":  # what compare gives it: positive, skewed, untied
            return list(rng.lognormal(0.0, 0.3, n) * 40)
        if kind == "ties":  # few distinct values, zeros among them
            return [float(v) for v in rng.integers(0, 4, n)]
        # anything numpy takes: signs, signed zeros, NaN, infinities
        pool = [0.0, -0.0, 1.0, -1.5, 2.0, 3.25, float("nan"), float("inf"), -float("inf")]
        return [pool[i] for i in rng.integers(0, len(pool), n)]
    return [(side(), side()) for _ in range(count)]


@pytest.mark.parametrize("kind", ["timings", "ties", "anything"])
def test_intervals_together_equal_each_drawn_alone(kind):
    pairs = _pairs(np.random.default_rng(len(kind)), 150, kind)
    with np.errstate(all="ignore"):  # inf / inf and the like: NaN bounds, on both sides alike
        got = median_ratio_intervals(pairs)
        for (a, b), one in zip(pairs, got):
            assert _same(one, _drawn_one_at_a_time(a, b)), (a, b)
            assert _same(median_ratio_interval(a, b), one)


@pytest.mark.parametrize("confidence", [0.0, 0.5, 0.9, 0.95, 0.99, 1.0])
@pytest.mark.parametrize("resamples", [1, 2, 3, 10, 999, 10_000])
def test_intervals_together_equal_each_drawn_alone_at_any_confidence_and_resample_count(confidence, resamples):
    rng = np.random.default_rng(resamples)
    pairs = [(list(rng.lognormal(0, 0.2, rng.integers(1, 10))), list(rng.lognormal(0, 0.2, rng.integers(1, 10))))
             for _ in range(6)]
    for seed in (0, 3):
        got = median_ratio_intervals(pairs, confidence=confidence, resamples=resamples, seed=seed)
        want = [_drawn_one_at_a_time(a, b, confidence, resamples, seed) for a, b in pairs]
        assert all(_same(g, w) for g, w in zip(got, want))


def test_intervals_together_keep_their_order_and_reasons():
    a, b = _samples(7, 6, 30.0), _samples(8, 5, 33.0)
    got = median_ratio_intervals([(a, b), ([], b), (b, a), ([0.0, 0.0, 1.0], [1.0, 2.0]), (a, b)])
    assert got[0] == got[4] == median_ratio_interval(a, b) and got[0]["low"] < 1.1 < got[0]["high"]
    assert got[1]["reason"] == "no samples on one side" and got[1]["low"] is None
    assert got[2] == median_ratio_interval(b, a)
    assert got[3]["low"] is None and "0" in got[3]["reason"]
    assert median_ratio_intervals([]) == []
