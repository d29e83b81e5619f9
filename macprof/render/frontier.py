"""The quality-speed frontier panel of `macprof plot`: decode tok/s against mean KLD (to the
reference), point area by peak memory; the models no other model beats on both (lower KLD
and faster) are ringed and joined. A model without one of the two figures is left out, and
the caption says which."""

from __future__ import annotations

from macprof.measure.quality import frontier
from macprof.render.text import fmt_bytes


def frontier_panel(ax, rows: list[dict], label) -> None:
    placed = [r for r in rows if r.get("kld_mean") is not None and r.get("decode_tok_s")]
    left_out = [r for r in rows if r not in placed and r.get("has_quality")]
    on = frontier([(r["kld_mean"], r["decode_tok_s"]) for r in placed])
    mem = [r.get("peak_rss_bytes") or 0 for r in placed]
    top = max(mem) or 1
    sizes = [60 + 900 * m / top for m in mem]
    ax.scatter([r["kld_mean"] for r in placed], [r["decode_tok_s"] for r in placed], s=sizes, alpha=0.5,
               color=["#C44E52" if f else "#4C72B0" for f in on], edgecolors="black", linewidths=0.6)
    for r, f in zip(placed, on):
        ax.annotate(f"{label(r)}\n{fmt_bytes(r.get('peak_rss_bytes'))}" + (" *" if f else ""),
                    (r["kld_mean"], r["decode_tok_s"]), fontsize=7, xytext=(6, 4), textcoords="offset points")
    best = sorted((r["kld_mean"], r["decode_tok_s"]) for r, f in zip(placed, on) if f)
    if len(best) > 1:
        ax.plot([b[0] for b in best], [b[1] for b in best], color="#C44E52", linewidth=1, linestyle="--",
                label="frontier: no other model is both faster and closer to the reference (*)")
    ax.set_xscale("symlog", linthresh=1e-4)  # the reference sits at KLD 0
    ax.set_xlabel("mean KL divergence to the reference (nats/token; lower is closer)")
    ax.set_ylabel("decode tok/s (p50)")
    ax.set_title("Quality vs speed (point area = peak RSS)")
    if left_out:
        ax.text(0.01, 0.01, "not placed (no KLD or no decode figure): " + ", ".join(label(r).replace("\n", " ")
                                                                               for r in left_out),
                transform=ax.transAxes, fontsize=6, va="bottom")
    ax.margins(x=0.2, y=0.15)  # room for the labels beside the outer points
    if len(best) > 1:
        ax.legend(fontsize=7, loc="best")
