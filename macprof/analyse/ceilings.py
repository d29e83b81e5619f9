"""Ceilings (pure): the roofline at each phase's or case's context, the batching prediction and
its trade-off table, with the published and the measured bandwidth both."""

from __future__ import annotations

from typing import Sequence

from macprof.measure.kvmodel import kv_bytes_read, layout_from_shape
from macprof.measure.roofline import Roofline, efficiency
from macprof.measure.stats import ratio
from macprof.model.log import Bandwidth
from macprof.model.phases import Ceiling, CeilingSide, Metrics, Prediction, PredictionSide, SweepCase, TradeoffRow


SPECULATIVE_DEFINITION = (
    "round_s(k) = k x step_draft(c) + verify_s, verify_s = max((W_target + kv_bytes_read(c)) / bandwidth, "
    "(k + 1) x 2 x active_params / flops): a verify of k + 1 tokens reads the target's weights once; step_draft = the "
    "draft's one-token step (0 for ngram); tokens/round = (1 - α^(k+1)) / (1 - α) at the per-token acceptance α = "
    "accepted / the drafts the target judged (those up to and including the first rejection); speed-up = tokens/round x "
    "step_target(c) / round_s(k); the measured bandwidth where the probe gave one, else the published")
ROOFLINE_DEFINITIONS = {
    "ceiling_tok_s": "1 / max(read_s, compute_s) per token: read_s = (weight_bytes_per_token + kv_bytes_read(c)) / bandwidth, kv_bytes_read(c) = the K/V bytes one token reads at context c, per layer kind: full attention c x per-token bytes, sliding window min(c, window) x per-token bytes, MLA c x (kv_lora_rank + rope dims) x element bytes, recurrent layers their constant state (kv_bytes_per_token x c where a log has only that); unknown (no ceiling, with the reason) where macprof cannot size the model's attention memory, compute_s = 2 x active_params / flops (0 where no FLOP figure is known, so the ceiling is then bandwidth-only); c = mean context during decode = prompt_tokens + gen_tokens / 2 (a depth case's prompt is its d cached tokens + 1)",
    "batch_prediction": "step(B) = max((W + B kv_bytes_read(c)) / bandwidth, B x 2 x active_params / flops); per-user ITL = step(B), aggregate = B / step(B); spec: published bandwidth and FLOP/s (Apple chips only), measured: the bandwidth probe and the matmul probe (an upper bound: quantized kernels may reach less)",
    "aggregate_decode_tok_s": "B x decode_tok_s of the batch: every step yields one token of each sequence",
    "efficiency": "decode_tok_s (median) / ceiling_tok_s",
    "kv_element_bytes": "f16 2; llama.cpp q8_0 34 and q4_0 18 bytes per 32 elements; MLX kv_bits / 8 plus an f16 scale and bias per group of 64 (recurrent state stays f32)",
    "weight_bytes_per_token": "tensor bytes, less the embedding table but one row (unless tied to the output head), less inactive experts",
    "file_size_convention": "bandwidth / model file bytes, the simple figure people quote",
    "speculative_prediction": SPECULATIVE_DEFINITION,
}


def _roofline(shape: dict, bw: Bandwidth | None, which: str) -> tuple[Roofline | None, str | None]:
    """(Roofline, None) for the spec or measured bandwidth, or (None, reason)."""
    side = (bw.spec if which == "spec" else bw.measured) if bw else None
    if bw is None or not side or not side.gbs:
        return None, (side.reason if side else None) or "unknown"
    # compute: Apple's published figure beside the published bandwidth; the matmul probe's
    # beside the measured one (absent from logs before it existed: compute unknown)
    tflops = bw.tflops if which == "spec" else bw.measured.tflops if bw.measured else None
    return Roofline(shape["weight_bytes_per_token"], side.gbs * 1e9, shape.get("active_params"),
                    tflops * 1e12 if tflops else None, kv=layout_from_shape(shape)), None


def roofline_for(summary: Metrics, shape: dict | None, context: float, bw: Bandwidth | None, file_bytes: int) -> Ceiling:
    """Ceilings for one phase's (or case's) decode figure at ``context`` tokens, with spec and
    measured bandwidth both."""
    if not shape or not shape.get("weight_bytes_per_token"):
        return Ceiling(reason="model shape unknown")
    layout = layout_from_shape(shape)
    if not layout.known:  # measured anyway; no ceiling rather than one that leaves the K/V out
        return Ceiling(reason=f"KV cache bytes unknown: {layout.reason}", context_tokens=context,
                       weight_bytes_per_token=shape["weight_bytes_per_token"], kv_type=layout.kv_type,
                       decode_tok_s=summary.decode_tok_s.median)
    decode, prefill = summary.decode_tok_s.median, summary.prefill_tok_s.median

    def side(which: str) -> CeilingSide:
        r, reason = _roofline(shape, bw, which)
        if r is None:
            return CeilingSide(bandwidth_gbs=None, reason=reason)
        gbs = r.bandwidth / 1e9
        ceiling = r.ceiling_tok_s(context)
        pre = r.prefill_ceiling_tok_s()
        return CeilingSide(
            bandwidth_gbs=gbs, ceiling_tok_s=ceiling, efficiency=efficiency(decode, ceiling), bound=r.bound(context),
            file_size_ceiling_tok_s=gbs * 1e9 / file_bytes if file_bytes else None,
            prefill_compute_ceiling_tok_s=pre, prefill_efficiency=efficiency(prefill, pre),
            prefill_reason=None if pre else ("no published peak FLOP figure for this chip" if which == "spec"
                                             else "no measured matmul throughput in this log"))

    return Ceiling(context_tokens=context, weight_bytes_per_token=shape["weight_bytes_per_token"],
                   kv_bytes_per_token=shape.get("kv_bytes_per_token"), kv_bytes_read=kv_bytes_read(layout, context),
                   kv_type=layout.kv_type, decode_tok_s=decode,
                   spec=side("spec"), measured=side("measured"))


def batch_prediction(shape: dict | None, context: float, batch: int, bw: Bandwidth | None) -> Prediction:
    """The roofline's batching model for B sequences at ``context`` tokens each (docs/design.md):
    per-user ITL = step(B), aggregate = B / step(B), for spec and measured bandwidth."""
    if not shape or not shape.get("weight_bytes_per_token"):
        return Prediction(reason="model shape unknown")
    layout = layout_from_shape(shape)
    if not layout.known:
        return Prediction(reason=f"KV cache bytes unknown: {layout.reason}")

    def side(which: str) -> PredictionSide:
        r, reason = _roofline(shape, bw, which)
        return PredictionSide(bandwidth_gbs=None, reason=reason) if r is None else \
            PredictionSide(bandwidth_gbs=r.bandwidth / 1e9, **r.batch_row(batch, context))

    return Prediction(spec=side("spec"), measured=side("measured"))


def batch_tradeoff(cases: Sequence[SweepCase]) -> tuple[TradeoffRow, ...]:
    """Per batch size: aggregate tok/s and per-user ITL, measured and predicted, each also as a
    ratio to batch 1 (the trade-off: "B=8: aggregate x6.1, each user's ITL x1.24")."""
    rows = [_measured_and_predicted(c) for c in cases if c.status == "ok"]
    base = next((r for r in rows if r.batch == 1), None) or TradeoffRow()
    return tuple(r.replace(
        measured_over_predicted_aggregate=ratio(r.aggregate_tok_s, r.predicted_aggregate_tok_s),
        measured_over_predicted_itl=ratio(r.itl_p50_s, r.predicted_itl_s),
        aggregate_vs_b1=ratio(r.aggregate_tok_s, base.aggregate_tok_s),
        itl_p50_vs_b1=ratio(r.itl_p50_s, base.itl_p50_s),
        predicted_aggregate_vs_b1=ratio(r.predicted_aggregate_tok_s, base.predicted_aggregate_tok_s),
        predicted_itl_vs_b1=ratio(r.predicted_itl_s, base.predicted_itl_s)) for r in rows)


def _measured_and_predicted(c: SweepCase) -> TradeoffRow:
    """A batch case's medians beside the prediction with measured bandwidth where known, else spec."""
    measured, spec = (c.prediction.measured, c.prediction.spec) if c.prediction else (None, None)
    which, pred = ("measured", measured) if measured and measured.itl_s else ("spec", spec)
    aggregate = c.summary.aggregate_decode_tok_s
    assert c.batch is not None, "a batch case has its batch size"
    return TradeoffRow(batch=c.batch, aggregate_tok_s=aggregate.median if aggregate else None,
                       itl_p50_s=c.summary.itl_s.median, itl_p99_s=c.summary.itl_s.p99,
                       predicted_with=which if pred and pred.itl_s else None,
                       predicted_aggregate_tok_s=pred.aggregate_tok_s if pred else None,
                       predicted_itl_s=pred.itl_s if pred else None, bound=pred.bound if pred else None)


def speculative_prediction(target: dict | None, draft: dict | None, k: int, alpha: float | None, context: float,
                           bw: Bandwidth | None, ngram: bool = False, drafts: Sequence[int] = ()) -> dict:
    """The roofline's speculative round (measure/speculative.py ``predicted_round``, the one
    `macprof estimate --draft` uses) from the two models' shapes and the log's bandwidth: its
    predicted seconds and the speed-up at per-token acceptance ``alpha``; only ``reason``
    where a model's shape or the bandwidth is unknown. ``drafts``: each measured round's drafted
    count, the prediction then over the rounds as they drafted (``predicted_rounds``: a lookup
    draft drafts fewer than k where its context has no match), else k every round."""
    from macprof.measure.speculative import predicted_round, predicted_rounds

    if not target or not target.get("weight_bytes_per_token"):
        return {"reason": "target shape unknown"}
    if not ngram and (not draft or not draft.get("weight_bytes_per_token")):
        return {"reason": "draft shape unknown"}
    which = "measured" if bw and bw.measured and bw.measured.gbs else "spec"
    t_roof, reason = _roofline(target, bw, which)
    if t_roof is None:
        return {"reason": f"bandwidth unknown: {reason}"}
    for name, shape in (("target", target), ("draft", None if ngram else draft)):
        layout = layout_from_shape(shape) if shape else None
        if layout is not None and not layout.known:  # no prediction rather than one that leaves the K/V out
            return {"reason": f"{name}'s KV cache bytes unknown: {layout.reason}"}
    # the bandwidth side was found for the target: the draft's roofline is on the same side
    d_roof = None if ngram else _roofline(draft or {}, bw, which)[0]
    predicted = predicted_rounds(t_roof, d_roof, drafts, alpha, context) if drafts else \
        predicted_round(t_roof, d_roof, k, alpha, context)
    return {**predicted, "bandwidth": which}
