"""`macprof estimate` as text."""

from __future__ import annotations

from macprof.render.text import fmt_bytes, render_table


def render(e: dict) -> str:
    lines = [f"weights read per token : {e['weight_bytes_per_token'] / 1e9:.2f} GB ({e['weights_from']})",
             f"bandwidth              : {e['bandwidth_gbs']:.1f} GB/s ({e['bandwidth_source']})",
             f"weight read time       : {e['weight_read_s'] * 1e3:.1f} ms per token"]
    if e["compute_s"] is not None:
        lines.append(f"compute time           : {e['compute_s'] * 1e3:.3g} ms per token (2 x active parameters at {e['tflops']:g} TFLOP/s)")
        lines.append(f"read / compute         : {e['read_over_compute']:.0f}x -> {e['bound']}-bound")
    else:
        lines.append("compute time           : unknown (give --tflops)")
    ctx = e["inputs"]["context"]
    lines.append(f"decode ceiling         : {e['ceiling_tok_s']:.1f} tok/s at {ctx} tokens of context"
                 + (f" ({e['ceiling_tok_s_no_context']:.1f} at 0)" if ctx else ""))
    if e["file_size_ceiling_tok_s"]:
        lines.append(f"file-size convention   : {e['file_size_ceiling_tok_s']:.1f} tok/s (bandwidth / file size)")
    if e["prefill_ceiling_tok_s"]:
        lines.append(f"prefill ceiling        : {e['prefill_ceiling_tok_s']:.0f} tok/s (compute-bound)")
    if e["kv_bytes_per_token"]:
        at = e["kv_bytes_at_context"]
        lines.append(f"KV cache               : {fmt_bytes(e['kv_bytes_per_token'])} per token"
                     + (f"; {fmt_bytes(at)} ({at / 1e9:.2f} GB) at {ctx} tokens" if ctx else ""))
    rows = [[str(r["batch"]), f"{r['itl_s'] * 1e3:.1f} ms", f"{r['aggregate_tok_s']:.1f}",
             f"x{r['aggregate_vs_batch1']:.2f}", r["bound"]] for r in e["batch"]]
    lines += ["", render_table(["batch", "per-user ITL", "aggregate tok/s", "vs batch 1", "bound"], rows)]
    return "\n".join(lines)
