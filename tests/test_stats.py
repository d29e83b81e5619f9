import statistics

import numpy as np
import pytest

from macprof.measure.stats import median_known, percentile, relative_spread, summarize


def test_percentile_matches_numpy_linear():
    xs = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3])
    for q in (0, 50, 95, 99, 100):
        assert percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_summary():
    s = summarize([1.0, 2.0, 3.0, None], failures=2)
    assert s["n"] == 3 and s["dropped"] == 1 and s["failures"] == 2
    assert s["median"] == 2.0 and s["mean"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0
    assert s["stdev"] == pytest.approx(statistics.stdev([1.0, 2.0, 3.0]))
    assert relative_spread(s) == pytest.approx(0.5)


def test_empty_and_single():
    assert summarize([])["median"] is None
    one = summarize([5.0])
    assert one["median"] == 5.0 and one["stdev"] is None and relative_spread(one) is None


def test_median_known_skips_unknowns_and_is_unknown_with_none():
    xs = [4.0, None, 1.0, 9.0, None, 2.0]
    assert median_known(xs) == pytest.approx(np.median([4.0, 1.0, 9.0, 2.0]))
    assert median_known(x for x in xs) == median_known(xs)  # any iterable, read once
    assert median_known([]) is None and median_known([None, None]) is None
