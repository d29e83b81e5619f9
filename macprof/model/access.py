"""Reading nested run-log dicts."""

from __future__ import annotations


def dig(d, *keys):
    """d[k1][k2]... or None where any level is missing (logs from other versions, failed phases)."""
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d
