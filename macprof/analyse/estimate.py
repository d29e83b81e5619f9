"""`macprof estimate`: the roofline from a model file's shape or from numbers, no model run.
Pure: the caller reads the model file (collect/modelinfo.py inspect) and hands its shape in as a
``ModelFile``; the chip's published figures are model/chips.py's table."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from macprof.errors import MacprofError
from macprof.measure.kvmodel import KV_TYPES, KvLayout, kv_bytes_read
from macprof.measure.roofline import Roofline, kv_bytes_per_token
from macprof.model.chips import chip_from_cli

if TYPE_CHECKING:
    from macprof.collect.modelinfo import ModelInfo

# input -> (its option, integer?, lowest, highest). Numbers must be finite; the bounds lie far
# outside any real model or machine (1 MB/s to 1 PB/s...) and keep every figure finite and readable.
LIMITS: dict[str, tuple[str, bool, float, float]] = {
    "params": ("--params", False, 1, 1e15), "active_params": ("--active-params", False, 1, 1e15),
    "bits": ("--bits", False, 0.01, 64), "bytes_per_param": ("--bytes-per-param", False, 0.001, 8),
    "file_size_gb": ("--file-size", False, 1e-9, 1e6), "bandwidth_gbs": ("--bandwidth", False, 1e-3, 1e6),
    "tflops": ("--tflops", False, 1e-6, 1e6), "kv_bits": ("--kv-bits", False, 0.01, 64),
    "gpu_cores": ("--gpu-cores", True, 1, 1024), "layers": ("--layers", True, 1, 1e6),
    "kv_heads": ("--kv-heads", True, 1, 1e6), "head_dim": ("--head-dim", True, 1, 1e6),
    "context": ("--context", False, 0, 1e9),  # a mean decode context (prompt + gen / 2) can be fractional
    "batches": ("--batch", True, 1, 1e6),
    "acceptance": ("--acceptance", False, 0, 1), "draft_tokens": ("--draft-tokens", True, 1, 1024),
}
NGRAM = "ngram"  # --draft ngram: prompt lookup, a draft that reads no weights


class ModelFile(NamedTuple):
    """A model file as its caller read it: where it is (the result's input) and its shape, read
    from its metadata at the estimate's K/V cache type (collect/modelinfo.py ``inspect(path, kv_type)``)."""

    path: Path
    info: ModelInfo


def check_inputs(**values) -> None:
    """One line naming the option for a value that would make the arithmetic meaningless
    (NaN, inf, zero, negative, 1e308): never "nan tok/s" or a ZeroDivisionError."""
    for key, value in values.items():
        option, integer, low, high = LIMITS[key]
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is None:
                continue
            number = isinstance(v, int) if integer else isinstance(v, (int, float)) and math.isfinite(v)
            if isinstance(v, bool) or not number or not low <= v <= high:
                what = "an integer" if integer else "a number"
                raise MacprofError(f"estimate: {option} must be {what} from {low:g} to {high:g}, not {v!r}")


def _all_finite(result: dict) -> bool:
    numbers = [v for v in result.values() if isinstance(v, float)]
    numbers += [v for row in result["batch"] for v in row.values() if isinstance(v, float)]
    numbers += [v for row in (result.get("speculative") or {}).get("rounds", ()) for v in row.values()
                if isinstance(v, float)]
    return all(math.isfinite(v) for v in numbers)


def _weights(model: ModelFile | None, params: float | None, active_params: float | None, bits: float | None,
             bytes_per_param: float | None, file_size_gb: float | None) -> tuple[float, str, dict]:
    """Weight bytes read per token, how they were found, and what a model file told (its
    shape fills the inputs the user left out)."""
    if model is not None:
        info = model.info
        shape = {"file_bytes": info.file_bytes, "params": info.n_params, "active_params": info.active_params,
                 "layers": info.n_layers, "kv_heads": info.n_kv_heads, "head_dim": info.head_dim,
                 "kv_layout": info.kv_layout, "hidden": info.hidden}
        return info.weight_bytes_per_token, "model metadata: weight bytes read per token", shape
    if file_size_gb is not None:
        return file_size_gb * 1e9, "--file-size", {}
    if params is not None and (bits is not None or bytes_per_param is not None):
        per = bytes_per_param if bytes_per_param is not None else bits / 8  # type: ignore[operator]
        return (active_params or params) * per, f"{'active ' if active_params else ''}parameters x {per:g} bytes", {}
    raise MacprofError("estimate: give a MODEL file, or --file-size GB, or --params with --bits / --bytes-per-param")


def _bandwidth(bandwidth_gbs: float | None, chip: str | None, gpu_cores: int | None,
               tflops: float | None) -> tuple[float, str, float | None]:
    """GB/s, where it comes from, and TFLOP/s (the chip's published figure unless given)."""
    source = "--bandwidth"
    if bandwidth_gbs is None:
        if chip is None:
            raise MacprofError("estimate: give --bandwidth GB/s or --chip (e.g. --chip 'M5 Pro')")
        spec = chip_from_cli(chip, gpu_cores)
        bandwidth_gbs, source = spec["bandwidth_gbs"], spec["source"]
        tflops = tflops or spec["tflops"]
    if bandwidth_gbs <= 0:
        raise MacprofError("estimate: --bandwidth must be positive")
    return bandwidth_gbs, source, tflops


def estimate(model: ModelFile | None = None, params: float | None = None, active_params: float | None = None,
             bits: float | None = None, bytes_per_param: float | None = None, file_size_gb: float | None = None,
             bandwidth_gbs: float | None = None, chip: str | None = None, gpu_cores: int | None = None,
             tflops: float | None = None, layers: int | None = None, kv_heads: int | None = None,
             head_dim: int | None = None, kv_bits: float = 16, context: int = 0, batches: list[int] | None = None,
             kv_type: str = "f16", draft: ModelFile | str | None = None, acceptance: float | None = None,
             draft_tokens: list[int] | None = None) -> dict:
    check_inputs(params=params, active_params=active_params, bits=bits, bytes_per_param=bytes_per_param,
                 file_size_gb=file_size_gb, bandwidth_gbs=bandwidth_gbs, tflops=tflops, kv_bits=kv_bits,
                 gpu_cores=gpu_cores, layers=layers, kv_heads=kv_heads, head_dim=head_dim, context=context,
                 batches=batches, acceptance=acceptance, draft_tokens=draft_tokens)
    if (draft is None) != (acceptance is None):
        raise MacprofError("estimate: --draft MODEL|ngram and --acceptance A (0 to 1) go together")
    if draft_tokens and draft is None:
        raise MacprofError("estimate: --draft-tokens needs --draft MODEL|ngram and --acceptance A")
    if kv_type not in KV_TYPES:
        raise MacprofError(f"estimate: --kv-type must be one of {', '.join(KV_TYPES)}, not {kv_type!r}")
    weights, weights_how, shape = _weights(model, params, active_params, bits, bytes_per_param, file_size_gb)
    file_bytes = shape.get("file_bytes")
    params = params or shape.get("params")
    active_params = active_params or shape.get("active_params")
    layout = _kv_layout(shape, layers, kv_heads, head_dim, kv_bits, context)
    layers, kv_heads = layers or shape.get("layers"), kv_heads or shape.get("kv_heads")
    head_dim = head_dim or shape.get("head_dim")
    if weights <= 0:
        raise MacprofError("estimate: the weights read per token must be positive")
    bandwidth_gbs, source, tflops = _bandwidth(bandwidth_gbs, chip, gpu_cores, tflops)
    compute_params = active_params or params
    r = Roofline(weights, bandwidth_gbs * 1e9, compute_params, tflops * 1e12 if tflops else None, kv=layout)
    read_s, compute_s = r.read_s(), r.compute_s()
    rows = [r.batch_row(b, context) for b in (batches or [1])]
    base = r.batch_row(1, context)["aggregate_tok_s"]
    for row in rows:
        row["aggregate_vs_batch1"] = row["aggregate_tok_s"] / base
    result = {
        "inputs": {"model": str(model.path) if model else None, "params": params, "active_params": active_params,
                   "bits": bits, "bytes_per_param": bytes_per_param, "file_size_gb": file_size_gb, "chip": chip,
                   "gpu_cores": gpu_cores, "layers": layers, "kv_heads": kv_heads, "head_dim": head_dim,
                   "kv_bits": kv_bits, "kv_type": kv_type, "context": context, "hidden": shape.get("hidden")},
        "weight_bytes_per_token": weights, "weights_from": weights_how, "file_bytes": file_bytes,
        "bandwidth_gbs": bandwidth_gbs, "bandwidth_source": source, "tflops": tflops,
        "weight_read_s": read_s, "compute_s": compute_s,
        "read_over_compute": read_s / compute_s if compute_s else None,
        "bound": r.bound(context),
        "ceiling_tok_s": r.ceiling_tok_s(context),
        "ceiling_tok_s_no_context": r.ceiling_tok_s(0),
        "file_size_ceiling_tok_s": bandwidth_gbs * 1e9 / file_bytes if file_bytes else None,
        "kv_bytes_per_token": layout.linear_per_token or None,
        "kv_bytes_at_context": kv_bytes_read(layout, context) if layout.groups else None,
        "kv_layout": layout.to_json(),
        "prefill_ceiling_tok_s": r.prefill_ceiling_tok_s(),
        "batch": rows,
    }
    if draft is not None:
        assert acceptance is not None
        from macprof.config.settings import DEFAULTS  # --draft-tokens' default: `run`'s

        result["speculative"] = speculative(r, draft, acceptance, list(draft_tokens or DEFAULTS["draft_tokens"]), context,
                                            bandwidth_gbs, tflops)
    if not _all_finite(result):  # every input in range, yet extremes together overflow
        raise MacprofError("estimate: these inputs give an infinite or undefined result; check their magnitudes "
                           f"(weights {weights:g} bytes per token at {bandwidth_gbs:g} GB/s)")
    return result



def speculative(target: Roofline, draft: ModelFile | str, acceptance: float, ks: list[int], context: float,
                bandwidth_gbs: float, tflops: float | None) -> dict:
    """The roofline's speculative rounds (measure/speculative.py ``predicted_round``, the one a
    run's prediction uses) for each k: the draft's weights as its model file's shape says, read at
    the target's bandwidth and FLOP/s (``ngram``: no draft read), tokens per round at ``acceptance``."""
    from macprof.measure.speculative import predicted_round

    d_roof, how = None, "prompt lookup: no weights read"
    shape: dict = {}
    if isinstance(draft, str) and draft != NGRAM:
        raise ValueError(f"a draft is a ModelFile or {NGRAM!r}, not {draft!r}")  # the caller reads the file
    if not isinstance(draft, str):
        weights, how, shape = _weights(draft, None, None, None, None, None)
        layout = shape.get("kv_layout")
        if layout is not None and not layout.known and context:
            raise MacprofError(f"estimate: --draft {draft.path}: its K/V bytes are unknown ({layout.reason}); "
                               "give --context 0")
        d_roof = Roofline(weights, bandwidth_gbs * 1e9, shape.get("active_params") or shape.get("params"),
                          tflops * 1e12 if tflops else None, kv=layout if layout is not None and layout.known else None)
    rows = [predicted_round(target, d_roof, k, acceptance, context) for k in ks]
    return {"draft": draft if isinstance(draft, str) else str(draft.path), "draft_weight_bytes_per_token": d_roof.weight_bytes if d_roof else 0.0,
            "draft_weights_from": how, "draft_file_bytes": shape.get("file_bytes"), "acceptance": acceptance,
            "context": context, "rounds": rows}


def _kv_layout(shape: dict, layers: int | None, kv_heads: int | None, head_dim: int | None,
               kv_bits: float, context: float) -> KvLayout:
    """The model file's layout, unless --layers/--kv-heads/--head-dim (each filled from the
    model where left out) describe full attention by hand at --kv-bits; no K/V term where
    nothing says."""
    from_model: KvLayout | None = shape.get("kv_layout")
    if from_model is None or layers or kv_heads or head_dim:
        layers, kv_heads = layers or shape.get("layers"), kv_heads or shape.get("kv_heads")
        head_dim = head_dim or shape.get("head_dim")
        if not (layers and kv_heads and head_dim):
            return KvLayout()
        return KvLayout.linear(kv_bytes_per_token(layers, kv_heads, head_dim, kv_bits / 8), layers)
    if kv_bits != 16:
        raise MacprofError("estimate: with a MODEL, give the K/V cache type as --kv-type (f16, q8_0, q4_0); "
                           "--kv-bits applies to --layers/--kv-heads/--head-dim")
    if not from_model.known and context:
        raise MacprofError(f"estimate: the K/V bytes of this model are unknown ({from_model.reason}); "
                           "give --layers, --kv-heads and --head-dim, or --context 0")
    return from_model if from_model.known else KvLayout()
