"""`macprof estimate --hosts N --link-gbs X`: the ceiling of N machines sharing one model
(measure/distributed.py), from the one-machine estimate's weights, layers and bandwidth. Each
host is one rank with the bandwidth given for one machine; activations are f16 (2 bytes)."""

from __future__ import annotations

import math

from macprof.errors import MacprofError
from macprof.measure import distributed as dm


def group(result: dict, hosts: int, link_gbs: float | None, hidden: int | None, latency_us: float) -> dict:
    if hosts < 2:
        raise MacprofError(f"estimate: --hosts must be 2 or more, not {hosts}")
    if link_gbs is None or not math.isfinite(link_gbs) or link_gbs <= 0:
        raise MacprofError("estimate: --hosts needs --link-gbs, the link's bandwidth in GB/s (e.g. 10 for 80 Gb/s Thunderbolt 5)")
    if not math.isfinite(latency_us) or latency_us < 0:
        raise MacprofError(f"estimate: --latency-us must be 0 or more, not {latency_us}")
    layers, hidden = result["inputs"].get("layers"), hidden or result["inputs"].get("hidden")
    if not layers or not hidden or hidden <= 0:
        raise MacprofError("estimate: --hosts needs the model's --layers and --hidden (or a MODEL that has them)")
    g = dm.Group(weight_bytes=result["weight_bytes_per_token"], layers=layers, hidden=hidden, element_bytes=2.0,
                 rank_bandwidth=(result["bandwidth_gbs"] * 1e9,) * hosts, link=link_gbs * 1e9,
                 kv_bytes=result.get("kv_bytes_at_context") or 0.0, latency=latency_us * 1e-6)
    out = dm.predict(g)
    out["one_machine_tok_s"] = result["ceiling_tok_s"]
    for layout in dm.PARALLEL:
        out[layout]["vs_one_machine"] = out[layout]["tok_s"] / result["ceiling_tok_s"] if out[layout]["tok_s"] else None
    return out
