"""Ceilings (pure): the roofline at each phase's or case's context, the batching prediction and
its trade-off table, with the published and the measured bandwidth both."""

from __future__ import annotations

from macprof.measure.roofline import Roofline, efficiency
from macprof.measure.stats import ratio
from macprof.model.access import dig


ROOFLINE_DEFINITIONS = {
    "ceiling_tok_s": "1 / max(read_s, compute_s) per token: read_s = (weight_bytes_per_token + c x kv_bytes_per_token) / bandwidth, compute_s = 2 x active_params / flops (0 where no FLOP figure is known, so the ceiling is then bandwidth-only); c = mean context during decode = prompt_tokens + gen_tokens / 2 (a depth case's prompt is its d cached tokens + 1)",
    "batch_prediction": "step(B) = max((W + B c kv) / bandwidth, B x 2 x active_params / flops); per-user ITL = step(B), aggregate = B / step(B); spec: published bandwidth and FLOP/s (Apple chips only), measured: the bandwidth probe and the matmul probe (an upper bound: quantized kernels may reach less)",
    "aggregate_decode_tok_s": "B x decode_tok_s of the batch: every step yields one token of each sequence",
    "efficiency": "decode_tok_s (median) / ceiling_tok_s",
    "weight_bytes_per_token": "tensor bytes, less the embedding table but one row (unless tied to the output head), less inactive experts",
    "file_size_convention": "bandwidth / model file bytes, the simple figure people quote",
}


def _roofline(shape: dict, bw: dict | None, which: str):
    """(Roofline, None) for the spec or measured bandwidth, or (None, reason)."""
    gbs = dig(bw, which, "gbs")
    if not gbs:
        return None, dig(bw, which, "reason") or "unknown"
    # compute: Apple's published figure beside the published bandwidth; the matmul probe's
    # beside the measured one (absent from logs before it existed: compute unknown)
    tflops = (bw or {}).get("tflops") if which == "spec" else dig(bw, "measured", "tflops")
    return Roofline(shape["weight_bytes_per_token"], gbs * 1e9, shape.get("active_params"),
                    tflops * 1e12 if tflops else None, shape.get("kv_bytes_per_token") or 0), None


def roofline_for(summary: dict, shape: dict | None, context: float, bw: dict | None, file_bytes: int) -> dict:
    """Ceilings for one phase's (or case's) decode figure at ``context`` tokens, with spec and
    measured bandwidth both."""
    if not shape or not shape.get("weight_bytes_per_token"):
        return {"reason": "model shape unknown"}
    decode = dig(summary, "decode_tok_s", "median")
    prefill = dig(summary, "prefill_tok_s", "median")
    out = {"context_tokens": context, "weight_bytes_per_token": shape["weight_bytes_per_token"],
           "kv_bytes_per_token": shape.get("kv_bytes_per_token"), "decode_tok_s": decode}
    for which in ("spec", "measured"):
        r, reason = _roofline(shape, bw, which)
        if r is None:
            out[which] = {"bandwidth_gbs": None, "reason": reason}
            continue
        gbs = r.bandwidth / 1e9
        ceiling = r.ceiling_tok_s(context)
        pre = r.prefill_ceiling_tok_s()
        out[which] = {"bandwidth_gbs": gbs, "ceiling_tok_s": ceiling, "efficiency": efficiency(decode, ceiling),
                      "bound": r.bound(context), "file_size_ceiling_tok_s": gbs * 1e9 / file_bytes if file_bytes else None,
                      "prefill_compute_ceiling_tok_s": pre, "prefill_efficiency": efficiency(prefill, pre),
                      "prefill_reason": None if pre else ("no published peak FLOP figure for this chip" if which == "spec"
                                                          else "no measured matmul throughput in this log")}
    return out


def batch_prediction(shape: dict | None, context: float, batch: int, bw: dict | None) -> dict:
    """The roofline's batching model for B sequences at ``context`` tokens each (docs/design.md):
    per-user ITL = step(B), aggregate = B / step(B), for spec and measured bandwidth."""
    if not shape or not shape.get("weight_bytes_per_token"):
        return {"reason": "model shape unknown"}
    out = {}
    for which in ("spec", "measured"):
        r, reason = _roofline(shape, bw, which)
        out[which] = {"bandwidth_gbs": None, "reason": reason} if r is None else \
            {"bandwidth_gbs": r.bandwidth / 1e9, **r.batch_row(batch, context)}
    return out


def batch_tradeoff(cases: list[dict]) -> list[dict]:
    """Per batch size: aggregate tok/s and per-user ITL, measured and predicted, each also as a
    ratio to batch 1 (the trade-off: "B=8: aggregate x6.1, each user's ITL x1.24")."""
    rows = []
    for c in cases:
        if c["status"] != "ok":
            continue
        which = "measured" if dig(c, "prediction", "measured", "itl_s") else "spec"
        pred = dig(c, "prediction", which) or {}
        rows.append({"batch": c["batch"], "aggregate_tok_s": dig(c, "summary", "aggregate_decode_tok_s", "median"),
                     "itl_p50_s": dig(c, "summary", "itl_s", "median"), "itl_p99_s": dig(c, "summary", "itl_s", "p99"),
                     "predicted_with": which if pred.get("itl_s") else None,
                     "predicted_aggregate_tok_s": pred.get("aggregate_tok_s"), "predicted_itl_s": pred.get("itl_s"),
                     "bound": pred.get("bound")})
    base = next((r for r in rows if r["batch"] == 1), None)
    for r in rows:
        r["measured_over_predicted_aggregate"] = ratio(r["aggregate_tok_s"], r["predicted_aggregate_tok_s"])
        r["measured_over_predicted_itl"] = ratio(r["itl_p50_s"], r["predicted_itl_s"])
        for key in ("aggregate_tok_s", "itl_p50_s", "predicted_aggregate_tok_s", "predicted_itl_s"):
            r[f"{key.removesuffix('_s').removesuffix('_tok')}_vs_b1"] = ratio(r[key], base and base[key])
    return rows
