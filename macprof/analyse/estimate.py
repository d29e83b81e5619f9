"""`macprof estimate`: the roofline from a model file or from numbers, no model run."""

from __future__ import annotations

from pathlib import Path

from macprof.errors import MacprofError
from macprof.measure.roofline import Roofline, kv_bytes_per_token


def _weights(model: Path | None, params: float | None, active_params: float | None, bits: float | None,
             bytes_per_param: float | None, file_size_gb: float | None) -> tuple[float, str, dict]:
    """Weight bytes read per token, how they were found, and what a model file told (its
    shape fills the inputs the user left out)."""
    if model is not None:
        from macprof.collect import modelinfo

        info = modelinfo.inspect(model)
        shape = {"file_bytes": info.file_bytes, "params": info.n_params, "active_params": info.active_params,
                 "layers": info.n_layers, "kv_heads": info.n_kv_heads, "head_dim": info.head_dim}
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
    from macprof.collect import chips

    source = "--bandwidth"
    if bandwidth_gbs is None:
        if chip is None:
            raise MacprofError("estimate: give --bandwidth GB/s or --chip (e.g. --chip 'M5 Pro')")
        spec = chips.chip_from_cli(chip, gpu_cores)
        bandwidth_gbs, source = spec["bandwidth_gbs"], spec["source"]
        tflops = tflops or spec["tflops"]
    if bandwidth_gbs <= 0:
        raise MacprofError("estimate: --bandwidth must be positive")
    return bandwidth_gbs, source, tflops


def estimate(model: Path | None = None, params: float | None = None, active_params: float | None = None,
             bits: float | None = None, bytes_per_param: float | None = None, file_size_gb: float | None = None,
             bandwidth_gbs: float | None = None, chip: str | None = None, gpu_cores: int | None = None,
             tflops: float | None = None, layers: int | None = None, kv_heads: int | None = None,
             head_dim: int | None = None, kv_bits: float = 16, context: int = 0, batches: list[int] | None = None) -> dict:
    weights, weights_how, shape = _weights(model, params, active_params, bits, bytes_per_param, file_size_gb)
    file_bytes = shape.get("file_bytes")
    params = params or shape.get("params")
    active_params = active_params or shape.get("active_params")
    layers, kv_heads = layers or shape.get("layers"), kv_heads or shape.get("kv_heads")
    head_dim = head_dim or shape.get("head_dim")
    if weights <= 0:
        raise MacprofError("estimate: the weights read per token must be positive")
    bandwidth_gbs, source, tflops = _bandwidth(bandwidth_gbs, chip, gpu_cores, tflops)
    kv = kv_bytes_per_token(layers, kv_heads, head_dim, kv_bits / 8) if layers and kv_heads and head_dim else 0.0
    compute_params = active_params or params
    r = Roofline(weights, bandwidth_gbs * 1e9, compute_params, tflops * 1e12 if tflops else None, kv)
    read_s, compute_s = r.read_s(), r.compute_s()
    rows = [r.batch_row(b, context) for b in (batches or [1])]
    base = r.batch_row(1, context)["aggregate_tok_s"]
    for row in rows:
        row["aggregate_vs_batch1"] = row["aggregate_tok_s"] / base
    return {
        "inputs": {"model": str(model) if model else None, "params": params, "active_params": active_params,
                   "bits": bits, "bytes_per_param": bytes_per_param, "file_size_gb": file_size_gb, "chip": chip,
                   "gpu_cores": gpu_cores, "layers": layers, "kv_heads": kv_heads, "head_dim": head_dim,
                   "kv_bits": kv_bits, "context": context},
        "weight_bytes_per_token": weights, "weights_from": weights_how, "file_bytes": file_bytes,
        "bandwidth_gbs": bandwidth_gbs, "bandwidth_source": source, "tflops": tflops,
        "weight_read_s": read_s, "compute_s": compute_s,
        "read_over_compute": read_s / compute_s if compute_s else None,
        "bound": r.bound(context),
        "ceiling_tok_s": r.ceiling_tok_s(context),
        "ceiling_tok_s_no_context": r.ceiling_tok_s(0),
        "file_size_ceiling_tok_s": bandwidth_gbs * 1e9 / file_bytes if file_bytes else None,
        "kv_bytes_per_token": kv or None,
        "kv_bytes_at_context": kv * context if kv else None,
        "prefill_ceiling_tok_s": r.prefill_ceiling_tok_s(),
        "batch": rows,
    }


