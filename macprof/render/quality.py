"""The quality phase in text: compare's columns, the end-of-run quality table, and the detail
lines of `macprof show`. Pure functions of the run log's figures."""

from __future__ import annotations

from macprof.model.bounds import INVALID, share_ok
from macprof.model.log import RunLog
from macprof.model.quality import QualityPhase
from macprof.render.exporters import Column, Table
from macprof.render.report import Charted, PhaseReport, Section, label, setting
from macprof.render.text import fmt_bytes, fmt_rate
from macprof.sanitise import clean

QUALITY_FIELDS = ("ppl", "kld_mean", "kld_ci_low", "kld_ci_high", "kld_p99", "same_top", "reference", "quality_reason")
QUALITY_NOTE = ("quality: perplexity, mean KLD (95 % CI) and top-1 agreement against the reference model, "
                "on the same token ids, scored as llama-perplexity scores them (the second half of each chunk)")


def fmt_kld(x: float | None) -> str:
    return "-" if x is None else f"{x:.6f}" if abs(x) < 0.01 else f"{x:.4f}"


def _kld(r: dict) -> str:
    if r.get("kld_mean") is None:
        return "-" if not r.get("quality_reason") else "n/a"
    return f"{fmt_kld(r['kld_mean'])} ({fmt_kld(r['kld_ci_low'])}..{fmt_kld(r['kld_ci_high'])})"


def _ppl(r: dict) -> str:
    return "-" if r.get("ppl") is None else f"{r['ppl']:.4g}"


def _top(r: dict) -> str:
    return "-" if r.get("same_top") is None else f"{100 * r['same_top']:.2f} %" if share_ok(r["same_top"]) else INVALID


QUALITY_COLUMNS = (Column("PPL", _ppl), Column("KLD mean (95% CI)", _kld), Column("same top", _top),
                   Column("vs", lambda r: r.get("reference") or "-"))


def quality_table(log: RunLog) -> Section | None:
    """One row per model with the quality phase: what the decision needs side by side."""
    from macprof.analyse.headline import headline
    from macprof.analyse.quality import quality_figures

    rows = []
    for m in log.models:
        if m.phases.quality is None:
            continue
        ph, h = m.phases.quality, headline(m)
        k = ph.kld
        rows.append({**quality_figures(m), "model": m.identity.name, "quant": h["quant"], "file_bytes": h["file_bytes"],
                     "decode_tok_s": h["decode_tok_s"], "peak_rss_bytes": h["peak_rss_bytes"],
                     "kld_median": k.median if k else None, "kld_max": k.max if k else None,
                     "score_tok_s": ph.score_tok_s, "scored_tokens": ph.scored_tokens})
    if not rows:
        return None
    columns = (Column("model", lambda r: r["model"]), Column("quant", lambda r: r["quant"] or "-"),
               Column("size", lambda r: fmt_bytes(r["file_bytes"])), Column("decode tok/s", lambda r: fmt_rate(r["decode_tok_s"])),
               Column("peak RSS", lambda r: fmt_bytes(r["peak_rss_bytes"])), *QUALITY_COLUMNS[:2],
               Column("KLD median", lambda r: fmt_kld(r["kld_median"])), Column("KLD p99", lambda r: fmt_kld(r["kld_p99"])),
               Column("KLD max", lambda r: fmt_kld(r["kld_max"])), *QUALITY_COLUMNS[2:],
               Column("scored", lambda r: str(r["scored_tokens"])), Column("score tok/s", lambda r: fmt_rate(r["score_tok_s"])))
    notes = tuple(f"{r['model']}: no KLD: {r['quality_reason']}" for r in rows if r["quality_reason"])
    return Section("Quality (against the reference)", Table("quality", columns, tuple(rows), (), (), {}), notes)


def quality_lines(ph: QualityPhase) -> list[str]:
    """`macprof show`: the phase in a few lines."""
    t = ph.text
    lines = [f"   quality: {ph.scored_tokens} tokens scored in {len(ph.chunks)}/{ph.chunks_planned} chunks of {ph.n_ctx}; "
             f"text {clean(t.source) if t else '?'} ({t.tokens if t else '?'} tokens, sha256 {(t.sha256 or '?')[:12] if t else '?'}); "
             f"token ids sha256 {(ph.tokens_sha256 or '?')[:12]}"]
    ppl = "-" if ph.ppl is None else f"{ph.ppl:.6g} ± {ph.ppl_unc:.3g}"
    lines.append(f"   PPL {ppl}; scoring {fmt_rate(ph.score_tok_s)} tok/s")
    if ph.kld is not None and ph.kld.mean is not None:
        k = ph.kld
        who = "itself (the reference)" if ph.is_reference else clean(ph.reference)
        lines.append(f"   against {who}: KLD mean {fmt_kld(k.mean)} ± {fmt_kld(k.unc)}, median {fmt_kld(k.median)}, "
                     f"p99 {fmt_kld(k.p99)}, max {fmt_kld(k.max)}; same top "
                     + (f"{100 * (ph.same_top or 0):.3f} ± {100 * (ph.same_top_unc or 0):.3f} %"
                        if share_ok(ph.same_top) else INVALID))
    elif ph.reference_reason:
        lines.append(f"   no KLD: {clean(ph.reference_reason)}")
    return lines


def frontier(charted: Charted):
    """`macprof plot`'s panel of the phase: the quality-speed frontier (render/frontier.py), where a
    model has a KLD to the reference."""
    if not any(r.get("kld_mean") is not None for r in charted.rows):
        return None

    def draw(ax) -> None:
        from macprof.render.frontier import frontier_panel

        frontier_panel(ax, charted.rows, lambda r: label(r, charted.many))

    return draw


def parameters(s) -> str:
    """The plot caption's words for the phase's settings."""
    return f"{setting(s, 'quality_tokens')} tokens in chunks of {setting(s, 'quality_ctx')}"


REPORT = PhaseReport(present="has_quality", columns=QUALITY_COLUMNS, fields=QUALITY_FIELDS, note=QUALITY_NOTE,
                     section=quality_table, detail=quality_lines, panel=frontier,
                     parameters=parameters)
