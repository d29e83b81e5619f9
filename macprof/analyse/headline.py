"""The figures a model is known by, shared by the summary table and `compare`."""

from __future__ import annotations

from macprof.model.access import dig


def peak_rss(model: dict) -> int | None:
    peaks = [dig(p, "memory", "peak_rss_bytes") for p in model.get("phases", {}).values()]
    peaks = [p for p in peaks if p]
    return max(peaks) if peaks else None


def headline(m: dict) -> dict:
    """The figures a model is known by, shared by the summary table and `compare`."""
    ph = m.get("phases", {})
    return {
        "model": m["identity"]["name"],
        "engine": m["identity"]["engine"],
        "quant": m["identity"].get("quant_declared") or m["identity"].get("quant_label"),
        "file_bytes": m["identity"].get("total_bytes"),
        "cold_ttft_s": dig(ph, "cold", "summary", "time_to_first_token_s", "median"),
        "warm_ttft_s": dig(ph, "warm", "summary", "ttft_s", "median"),
        "prefix_ttft_s": dig(ph, "prefix", "summary", "reuse", "ttft_s", "median"),
        "decode_tok_s": dig(ph, "warm", "summary", "decode_tok_s", "median"),
        "efficiency": dig(ph, "warm", "roofline", "measured", "efficiency"),
        "peak_rss_bytes": peak_rss(m),
    }
