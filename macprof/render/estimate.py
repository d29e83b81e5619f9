"""`macprof estimate` as text."""

from __future__ import annotations

from macprof.render.text import fmt_bytes, fmt_s, render_table
from macprof.sanitise import clean


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
    at, kv_type = e["kv_bytes_at_context"], e["inputs"]["kv_type"]
    if e["kv_bytes_per_token"]:
        lines.append(f"KV cache ({kv_type})         : {fmt_bytes(e['kv_bytes_per_token'])} per token"
                     + (f"; {fmt_bytes(at)} ({at / 1e9:.2f} GB) read per token at {ctx} tokens" if ctx else ""))
    elif at is not None:  # windows or recurrent state: not linear in the context
        kinds = ", ".join(f"{g['layers']} {g['kind']}" + (f" (window {g['window']})" if g.get("window") else "")
                          for g in e["kv_layout"]["groups"])
        lines.append(f"KV cache ({kv_type})         : {fmt_bytes(at)} ({at / 1e9:.3f} GB) read per token at {ctx} tokens"
                     f" [{kinds} layers]")
    rows = [[str(r["batch"]), f"{r['itl_s'] * 1e3:.1f} ms", f"{r['aggregate_tok_s']:.1f}",
             f"x{r['aggregate_vs_batch1']:.2f}", r["bound"]] for r in e["batch"]]
    lines += ["", render_table(["batch", "per-user ITL", "aggregate tok/s", "vs batch 1", "bound"], rows)]
    if e.get("speculative"):
        lines += ["", render_speculative(e["speculative"])]
    if e.get("group"):
        lines += ["", render_group(e["group"])]
    return "\n".join(lines)


def render_speculative(sp: dict) -> str:
    """Per k the roofline's round beside one plain step, and the speed-up at the acceptance."""
    head = (f"speculative, draft {clean(sp['draft'])}: {fmt_bytes(sp['draft_weight_bytes_per_token'])} read per "
            f"draft token ({clean(sp['draft_weights_from'])}); per-token acceptance {sp['acceptance']:g}, tokens per "
            f"round (1 - a^(k+1)) / (1 - a)")
    rows = [[str(r["k"]), fmt_s(r["draft_s"]), fmt_s(r["verify_s"]), fmt_s(r["round_s"]), f"{r['tokens_per_round']:.2f}",
             f"{r['tok_s']:.1f}", f"{r['plain_tok_s']:.1f}", f"x{r['speedup']:.2f}"] for r in sp["rounds"]]
    return "\n".join([head, render_table(["k", "draft", "verify (k+1 tokens)", "round", "tokens/round", "tok/s",
                                          "plain tok/s", "speed-up"], rows),
                      "a verify of k + 1 tokens reads the target's weights once; the draft's k steps each read its own"])


def kv_rows(layout: dict, read_at: dict) -> list[list[str]]:
    """`macprof inspect`'s rows for the attention memory: each layer kind, then the bytes one
    token reads at a few contexts (or why they are unknown)."""
    if layout.get("reason"):
        return [["kv layout", f"unknown: {clean(layout['reason'])}"]]
    rows = []
    for g in layout["groups"]:
        what = (f"{fmt_bytes(g['state_bytes'])} state per layer" if g["kind"] == "state"
                else f"{fmt_bytes(g['per_token'])} per token per layer" + (f", window {g['window']}" if g.get("window") else ""))
        rows.append([f"kv layers: {g['kind']}", f"{g['layers']} x {what} ({layout['kv_type']})"])
    rows += [[f"kv bytes read per token at c={c}", f"{fmt_bytes(b)} ({b:.0f} B)"] for c, b in read_at.items()]
    return rows


def render_group(g: dict) -> str:
    """The group's two layouts beside one machine (measure/distributed.py)."""
    rows = [[layout, f"{g[layout]['tok_s']:.1f}", f"x{g[layout]['vs_one_machine']:.2f}",
             f"{g[layout]['read_s'] * 1e3:.2f} ms", f"{g[layout]['comm_s'] * 1e3:.3f} ms",
             f"{g[layout]['comm_share']:.0%}", fmt_bytes(g[layout]['wire_bytes_per_token'])]
            for layout in ("tensor", "pipeline")]
    head = (f"{g['size']} machines, link {g['link_gbs']:g} GB/s, latency {g['latency_s'] * 1e6:g} us per collective "
            f"(one machine: {g['one_machine_tok_s']:.1f} tok/s)")
    return "\n".join([head, render_table(["parallel", "decode tok/s", "vs one", "read", "comm", "comm share",
                                          "wire per token"], rows), f"model: {g['model']}"])
