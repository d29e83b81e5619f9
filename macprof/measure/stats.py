"""Summary statistics from raw samples (pure)."""

from __future__ import annotations

import math
from typing import Iterable



def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy.percentile's default."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    """The median every figure in macprof uses: the 50th percentile above (the mean of the two
    middle values of an even count), so a summary's median and a comparison's agree."""
    return percentile(sorted(values), 50)


def median_known(values: Iterable[float | None]) -> float | None:
    """The median of the known values (None skipped), or None (unknown) when there is none."""
    known = [v for v in values if v is not None]
    return median(known) if known else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None (unknown) when either side is unknown or b is 0: a zero denominator has
    no ratio. A zero numerator is a real 0.0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def summarize(values: Iterable[float | None], failures: int = 0) -> dict:
    """n, failures, median, p95, p99, mean, stdev (sample), min, max; None-valued samples
    are dropped and counted in ``dropped``."""
    raw = list(values)
    xs = sorted(float(v) for v in raw if v is not None)
    out: dict = {"n": len(xs), "failures": failures, "dropped": len(raw) - len(xs)}
    if not xs:
        out.update({k: None for k in ("median", "p95", "p99", "mean", "stdev", "min", "max")})
        return out
    mean = sum(xs) / len(xs)
    stdev = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    out.update({
        "median": percentile(xs, 50),
        "p95": percentile(xs, 95),
        "p99": percentile(xs, 99),
        "mean": mean,
        "stdev": stdev,
        "min": xs[0],
        "max": xs[-1],
    })
    return out


def relative_spread(summary: dict) -> float | None:
    """stdev / median: the stability figure warnings are based on."""
    if summary.get("stdev") is None or not summary.get("median"):
        return None
    return summary["stdev"] / summary["median"]


UNSTABLE = 0.10  # a relative spread above this: a figure too noisy to take as it stands


def unstable(summary: dict) -> bool:
    """Whether repetitions spread over ``UNSTABLE`` of their median (stdev / median)."""
    return (relative_spread(summary) or 0) > UNSTABLE
