"""A distributed model's group from its events (pure): the ranks' facts and timelines, the
communication pass per rank, bytes per token, and the group's ceiling beside rank 0's measured
decode (docs/design.md "The ceiling of a group")."""

from __future__ import annotations

from typing import Any, Sequence

from macprof.measure import distributed as dm
from macprof.measure.kvmodel import kv_bytes_read, layout_from_shape
from macprof.measure.stats import median_known as median
from macprof.measure.stats import ratio
from macprof.measure.timeline import derive
from macprof.model import events as ev
from macprof.model.distributed import GroupResult
from macprof.model.log import Bandwidth

PAYLOAD_FORMULA = "2 x layers x hidden x e (two all_sum of one hidden vector per layer per token)"
WIRE_FORMULA = "2 (N - 1) / N x payload per rank (ring all_sum: reduce-scatter, then all-gather)"


def build_group(events: Sequence[ev.Event], shape: dict | None, spec: dict, context: float,
                decode: float | None, bw: Bandwidth | None) -> GroupResult:
    group = next((e.record() for e in events if isinstance(e, ev.RankGroup)), None)
    profile = next((e for e in reversed(events) if isinstance(e, ev.CommProfile)), None)
    hosts = tuple(group.hosts if group else spec.get("hosts", ()))
    comm = tuple(_rank_comm(r) for r in profile.ranks) if profile else ()
    element = _element_bytes(shape)
    bytes_per_token = _bytes(shape, len(hosts), element, comm)
    prediction, reason = _prediction(shape, spec, hosts, context, element, comm, bw)
    layout = spec.get("parallel", "tensor")
    predicted = (prediction or {}).get(layout, {}).get("tok_s")
    if profile is None:
        reason = "; ".join(filter(None, [reason, "no communication pass: the worker ended before it"]))
    return GroupResult(
        backend=spec.get("backend"), parallel=layout, hosts=hosts, size=len(hosts),
        ranks=group.ranks if group else (), timelines=_timelines(events),
        comm_method=profile.method if profile else None, comm=comm, bytes_per_token=bytes_per_token,
        prediction=prediction, decode_tok_s=decode, efficiency=ratio(decode, predicted), reason=reason or None)


def _timelines(events: Sequence[ev.Event]) -> tuple[dict[str, Any], ...]:
    """Each other rank's requests of each phase, with their figures and whether its tokens are
    rank 0's (they must be: every rank computes the same logits)."""
    mine: dict[tuple, list] = {(e.phase, e.index, e.kind): list(getattr(e, "tokens") or ()) for e in events
                               if isinstance(e, ev.Request)}
    out = []
    for e in events:
        if not isinstance(e, ev.RankTimeline):
            continue
        requests = []
        for r in e.requests:
            times = r.get("token_times") or []
            m = derive(r["t0"], r.get("t_tokenized") or r["t0"], times, 0) if r.get("t0") is not None else None
            requests.append({**r, "ttft_s": m.ttft_s if m else None, "decode_tok_s": m.decode_tok_s if m else None,
                             "tokens_match_rank0": list(r.get("tokens") or ()) == mine.get((r.get("phase"), r.get("index"), r.get("kind")))})
        out.append({"rank": e.rank, "phase": e.phase, "requests": requests})
    return tuple(out)


def _rank_comm(rank: dict) -> dict[str, Any]:
    steps = rank.get("steps") or []
    step = median([s["step_ns"] / 1e9 for s in steps])
    comm = median([s["comm_ns"] / 1e9 for s in steps])
    return {"rank": rank.get("rank"), "steps": len(steps), "step_s": step, "comm_s": comm,
            "compute_s": step - comm if step is not None and comm is not None else None,
            "comm_share": ratio(sum(s["comm_ns"] for s in steps), sum(s["step_ns"] for s in steps)),
            "collectives_per_token": median([s["collectives"] for s in steps]),
            "payload_bytes_per_token": median([s["payload_bytes"] for s in steps]),
            "prefill": rank.get("prefill")}


def _element_bytes(shape: dict | None) -> float:
    """Activation bytes: f32 for a float32 model; f16 / bf16 otherwise (a quantized MLX model
    computes in its scales' dtype)."""
    return 4.0 if (shape or {}).get("quant") in ("float32", "F32") else 2.0


def _bytes(shape: dict | None, size: int, element: float, comm: tuple[dict, ...]) -> dict[str, Any] | None:
    if not shape or not shape.get("n_layers") or not shape.get("hidden"):
        return None
    payload = dm.tensor_payload_bytes(shape["n_layers"], shape["hidden"], element)
    return {"payload_formula": PAYLOAD_FORMULA, "wire_formula": WIRE_FORMULA, "element_bytes": element,
            "payload": payload, "wire_per_rank": dm.ring_wire_bytes(payload, size),
            "measured_payload": comm[0]["payload_bytes_per_token"] if comm else None}


def _prediction(shape: dict | None, spec: dict, hosts: tuple[str, ...], context: float, element: float,
                comm: tuple[dict, ...], bw: Bandwidth | None) -> tuple[dict | None, str | None]:
    if not shape or not shape.get("weight_bytes_per_token") or not shape.get("n_layers") or not shape.get("hidden"):
        return None, "model shape unknown: no prediction"
    host_bw, bw_source = _host_bandwidth(bw)
    if host_bw is None:
        return None, "no bandwidth figure for this machine: no prediction"
    link, latency, link_source = _link(spec, comm)
    if link is None and latency is None:
        return None, "no link figure: give link_gbs, or the communication pass did not run"
    kv = kv_bytes_read(layout_from_shape(shape), context) or 0.0
    g = dm.Group(weight_bytes=shape["weight_bytes_per_token"], layers=shape["n_layers"], hidden=shape["hidden"],
                 element_bytes=element, rank_bandwidth=dm.rank_bandwidths(hosts, host_bw * 1e9),
                 link=link or float("inf"), kv_bytes=kv, latency=latency or 0.0)
    return {**dm.predict(g), "context_tokens": context, "bandwidth_source": bw_source, "link_source": link_source}, None


def _host_bandwidth(bw: Bandwidth | None) -> tuple[float | None, str]:
    """Rank 0's machine: the measured bandwidth where there is one, else the published one (all
    ranks are taken to be alike; the ranks' own facts are in the log to check that)."""
    if bw and bw.measured and bw.measured.gbs:
        return bw.measured.gbs, "measured (rank 0's machine)"
    if bw and bw.spec and bw.spec.gbs:
        return bw.spec.gbs, "spec (rank 0's machine)"
    return None, ""


def _link(spec: dict, comm: tuple[dict, ...]) -> tuple[float | None, float | None, str]:
    """(link bytes/s, seconds per collective, where they come from). A given link_gbs is a pure
    bandwidth model, as `estimate` has it. Without one, the pass's time per collective on rank
    0 is taken as the latency of every collective and the link as unbounded: a decode step's
    payloads are kilobytes, so on a real link their time is latency, not bytes."""
    if spec.get("link_gbs"):
        return spec["link_gbs"] * 1e9, None, "link_gbs setting (bandwidth only; latency not modelled)"
    if comm and comm[0].get("comm_s") and comm[0].get("collectives_per_token"):
        return None, comm[0]["comm_s"] / comm[0]["collectives_per_token"], (
            "measured: rank 0's time inside the collectives per token / collectives per token in the diagnostic "
            "pass, taken as each collective's latency (waiting for the other ranks included); link unbounded")
    return None, None, ""
