"""Wilson intervals and the exact McNemar test against values worked out by hand and published."""

import math

import pytest

from macprof.measure import proportions as p


def test_wilson_known_values():
    # Wilson (1927) / Newcombe (1998) Table I: 81 of 263 -> 0.2553 .. 0.3662
    lo, hi = p.wilson(81, 263)
    assert lo == pytest.approx(0.2553, abs=5e-5) and hi == pytest.approx(0.3662, abs=5e-5)
    # Newcombe's 15 of 148 -> 0.0624 .. 0.1605; 0 of 20 -> 0 .. 0.1611
    assert p.wilson(15, 148) == pytest.approx((0.0624, 0.1605), abs=5e-5)
    assert p.wilson(0, 20) == pytest.approx((0.0, 0.1611), abs=5e-5)
    assert p.wilson(20, 20) == pytest.approx((1 - 0.1611, 1.0), abs=5e-5)
    assert p.wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        p.wilson(3, 2)


def test_exact_binomial_and_mcnemar():
    # 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11/1024
    assert p.binomial_two_sided(1, 10) == pytest.approx(22 / 1024)
    assert p.binomial_two_sided(9, 10) == pytest.approx(22 / 1024)
    assert p.binomial_two_sided(5, 10) == 1.0
    assert p.mcnemar_exact(0, 0) == 1.0
    assert p.mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 0.0625: five pairs one way are not enough
    assert p.mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert p.mcnemar_exact(7, 1) == pytest.approx(2 * 9 / 256)
    assert p.smallest_significant_pairs() == 6
    # symmetric in its arguments, and a p-value
    for b in range(8):
        for c in range(8):
            assert p.mcnemar_exact(b, c) == p.mcnemar_exact(c, b) and 0 < p.mcnemar_exact(b, c) <= 1
    assert not math.isnan(p.mcnemar_exact(200, 180))
