"""The speculative phase in text: compare's columns, the end-of-run table (a row per target,
draft and k), and `macprof show`'s round breakdown. Pure functions of the run log's figures."""

from __future__ import annotations

from macprof.analyse.speculative import FIGURES, per_round
from macprof.model.log import ModelResult, RunLog
from macprof.model.speculative import SpeculativeCase, SpeculativePhase
from macprof.render.exporters import Column, Table, cell
from macprof.render.report import Charted, PhaseReport, Section, chart_text, setting, speed_parameters
from macprof.model.bounds import INVALID, share_ok
from macprof.render.text import fmt_bytes, fmt_of, fmt_rate, fmt_s, fmt_x

NOTE = ("speculative: speed-up = decode tok/s drafting k tokens a round over plain greedy decoding of the same target "
        "on the same prompts (ratio of medians, bootstrap interval), at the k where it is highest; α = accepted / "
        "drafted; predicted = the roofline's round at the per-token acceptance (docs/design.md)")
TABLE_NOTE = ("speed-up: speculative decode tok/s over the phase's plain greedy requests on the same prompts, ratio of "
              "medians [bootstrap 95 % interval]; drafts/round and tokens/round: over the rounds free to draft k (a lookup draft "
              "drafts fewer than k where its context has no match); predicted: the roofline's round time and tokens per "
              "round over the rounds as they drafted, at α/token "
              "(accepted / drafts the target judged, up to the first rejection; α = accepted / drafted); outputs: "
              "token by token against the plain ones, a divergence passed only at a near-tie (its logit margin)")


def fmt_ratio(x: float | None) -> str:
    """An acceptance (α, α per token): a proportion, INVALID outside 0..1."""
    return "-" if x is None else f"{x:.3f}" if share_ok(x) else INVALID


def _best(r: dict) -> str:
    if r.get("speculative_speedup") is None:
        status = r.get("speculative_status")
        return "-" if status in (None, "ok") else status
    low, high = r.get("speculative_speedup_low"), r.get("speculative_speedup_high")
    interval = f" [{fmt_x(low)}..{fmt_x(high)}]" if low is not None and high is not None else ""
    return (f"{fmt_x(r['speculative_speedup'])}{interval} at k={r['speculative_best_k']} "
            f"(predicted {fmt_x(r.get('speculative_predicted_speedup'))})")


def _alpha(r: dict) -> str:
    if r.get("speculative_acceptance") is None:
        return "-"
    return (f"{fmt_ratio(r['speculative_acceptance'])}, {_per_round(r['speculative_tokens_per_round'])} tok/round, "
            f"{_per_round(r.get('speculative_drafts_per_round'))} drafts/round")


COLUMNS = (Column("speculative best", _best), Column("α (best k)", _alpha),
           Column("spec. outputs", lambda r: "-" if r.get("speculative_checked") is None
                  else f"{fmt_of(r['speculative_identical'], r['speculative_checked'])} identical"))


def outputs_text(c: SpeculativeCase) -> str:
    """n/N identical, with each divergence's kind: a near-tie with its logit margin, or DIFFERS."""
    checks = c.checks
    if checks is None or not checks.n:
        return "-"
    text = f"{fmt_of(checks.identical, checks.n)} identical"
    ties = [r.check for r in c.requests if r.check and r.check.first_divergence is not None and r.check.passed]
    if ties:
        text += ", " + ", ".join(f"near-tie at token {t.first_divergence} (margin {t.margin:.3g})"
                                 if t.margin is not None else f"near-tie at token {t.first_divergence}" for t in ties)
    if checks.failed:
        text += f", {checks.failed} DIFFER beyond a near-tie"
    return text


def _rows(m: ModelResult) -> list[dict]:
    """A row per k of macprof's loop, then per k of the engine's own path (--speculative-impl)."""
    ph = m.phases.speculative
    assert ph is not None
    loop = [(c, ph.draft or "?") for c in ph.cases]
    own = [(c, f"{ph.draft or '?'}, engine's own") for c in ph.native or ()]
    return [{"model": m.identity.name, "draft": draft, "k": c.k, "alpha": c.acceptance,
             "alpha_token": c.acceptance_per_token, "per_round": per_round(c)[0], "drafts": per_round(c)[1],
             "per_round_predicted": c.predicted_tokens_per_round, "decode": c.decode_tok_s,
             "plain": ph.plain_decode_tok_s, "speedup": c.speedup.value if c.speedup else None,
             "low": c.speedup.low if c.speedup else None, "high": c.speedup.high if c.speedup else None,
             "predicted": c.predicted_speedup, "reason": c.prediction_reason, "outputs": outputs_text(c)}
            for c, draft in loop + own]


def _speedup(r: dict) -> str:
    if r["speedup"] is None:
        return "-"
    return fmt_x(r["speedup"]) + (f" [{fmt_x(r['low'])}..{fmt_x(r['high'])}]" if r["low"] is not None else "")


def _tokens(r: dict) -> str:
    if r["per_round"] is None:
        return "-"
    return f"{r['per_round']:.2f}" + (f" ({r['per_round_predicted']:.2f})" if r["per_round_predicted"] is not None else "")


TABLE_COLUMNS = (
    Column("target", cell("model")), Column("draft", cell("draft")), Column("k", cell("k")),
    Column("α", cell("alpha", fmt_ratio)), Column("α/token", cell("alpha_token", fmt_ratio)),
    Column("drafts/round", lambda r: _per_round(r["drafts"])), Column("tokens/round (pred.)", _tokens),
    Column("decode tok/s vs plain", lambda r: f"{fmt_rate(r['decode'])} vs {fmt_rate(r['plain'])}"),
    Column("speed-up [95% CI]", _speedup),
    Column("predicted", lambda r: fmt_x(r["predicted"]) if r["predicted"] is not None else "- (unknown)"),
    Column("outputs", cell("outputs")))


def draft_lines(m: ModelResult) -> list[str]:
    """The draft's load and what it adds to memory, and the cold start it adds to."""
    ph = m.phases.speculative
    if ph is None:
        return []
    name = f"{m.identity.name} + {ph.draft or '?'}"
    if ph.draft_status not in (None, "ok"):
        return [f"{name}: draft {ph.draft_status}: {ph.draft_reason}"]
    if ph.draft == "ngram":
        return [f"{name}: prompt lookup, no draft model to load"]
    dm = ph.draft_memory
    memory = f"{name}: draft ({ph.draft_engine or '?'}) loaded in {fmt_s(ph.draft_load_s)}"
    if dm:
        foot = dm.has("load_footprint_bytes") and dm.load_footprint_bytes
        memory += (f", +{fmt_bytes(dm.load_footprint_bytes if foot else dm.load_rss_bytes)} {'footprint' if foot else 'RSS'} "
                   f"({fmt_bytes(dm.file_bytes)} file, weights {dm.weights_held or '?'}), K/V {fmt_bytes(dm.kv_cache_bytes)} "
                   f"measured at the end ({fmt_bytes(dm.kv_computed_bytes)} computed)")
    if ph.memory and ph.memory.peak_rss_bytes:
        memory += f"; phase peak RSS {fmt_bytes(ph.memory.peak_rss_bytes)}, both models"
    lines = [memory]
    cold = m.phases.cold.summary.ready_s.median if m.phases.cold else None
    if cold is not None and ph.draft_load_s is not None:
        lines.append(f"{name}: cold start with the draft: ready {fmt_s(cold)} + draft load {fmt_s(ph.draft_load_s)} = "
                     f"{fmt_s(cold + ph.draft_load_s)} (the draft's load as timed in the phase's worker, its file's "
                     f"residency as it was)")
    return lines


def speculative_table(log: RunLog) -> Section | None:
    models = [m for m in log.models if m.phases.speculative is not None]
    if not models:
        return None
    rows = tuple(r for m in models for r in _rows(m))
    lines = [line for m in models for line in draft_lines(m)]
    lines += [f"{m.identity.name}: the engine's own speculative decoding not measured: {ph.native_reason}"
              for m in models if (ph := m.phases.speculative) is not None and ph.native_reason]
    reasons = sorted({f"{r['model']} k={r['k']}: no prediction: {r['reason']}" for r in rows if r["reason"]})
    return Section("Speculative decoding (draft k tokens, verify in one pass)",
                   Table("speculative", TABLE_COLUMNS, rows, (), (), {}) if rows else None,
                   tuple(lines + reasons + ([TABLE_NOTE] if rows else [])))


def speculative_lines(ph: SpeculativePhase) -> list[str]:
    """`macprof show`: the draft, then per k the round breakdown, then each divergence."""
    plain_n = len([r for r in ph.plain if r.kind == "measured" and r.status == "ok"])
    lines = [f"   speculative: draft {ph.draft} ({ph.draft_engine or 'no model'}, {ph.draft_status or '?'})"
             + (f": {ph.draft_reason}" if ph.draft_reason else "")
             + (f", loaded in {fmt_s(ph.draft_load_s)}" if ph.draft_load_s is not None else "")
             + f"; plain decode {fmt_rate(ph.plain_decode_tok_s)} tok/s over {plain_n} requests"]
    dm = ph.draft_memory
    if dm:
        lines.append(f"   speculative memory: phase peak RSS {fmt_bytes(ph.memory.peak_rss_bytes if ph.memory else None)}; "
                     f"draft file {fmt_bytes(dm.file_bytes)}, its load +{fmt_bytes(dm.load_rss_bytes)} RSS"
                     + (f" (+{fmt_bytes(dm.load_footprint_bytes)} footprint)" if dm.has("load_footprint_bytes") else "")
                     + f", K/V {fmt_bytes(dm.kv_cache_bytes)} measured ({fmt_bytes(dm.kv_computed_bytes)} computed)"
                     + f", weights {dm.weights_held or '?'}")
    for c in ph.cases:
        tokens, drafts = per_round(c)
        lines.append(f"   speculative k={c.k}: {c.rounds} rounds, drafted {c.drafted}, accepted {c.accepted} "
                     f"(α {fmt_ratio(c.acceptance)}, per token {fmt_ratio(c.acceptance_per_token)}); "
                     f"{_per_round(drafts)} drafts/round, {_per_round(tokens)} tokens/round (predicted "
                     f"{_per_round(c.predicted_tokens_per_round)})")
        lines.append(f"     per round: draft {fmt_s(c.draft_s_per_round)} + verify {fmt_s(c.verify_s_per_round)} + rewind "
                     f"{fmt_s(c.rewind_s_per_round)}; round {fmt_s(c.round_s_per_round)} (predicted "
                     f"{fmt_s(c.predicted_round_s)}); medians")
        interval = f" [{fmt_x(c.speedup.low)}..{fmt_x(c.speedup.high)}]" if c.speedup and c.speedup.low is not None else ""
        lines.append(f"     decode {fmt_rate(c.decode_tok_s)} tok/s, speed-up {fmt_x(c.speedup.value if c.speedup else None)}"
                     f"{interval} (predicted {fmt_x(c.predicted_speedup)}"
                     + (f": {c.prediction_reason}" if c.prediction_reason else "") + f"); outputs {outputs_text(c)}")
    for c in ph.native or ():
        told = f"α {fmt_ratio(c.acceptance)}, " if c.acceptance is not None else ""
        tokens, drafts = per_round(c)
        told += f"{_per_round(drafts)} drafts/round, " if drafts is not None else ""
        lines.append(f"   speculative, the engine's own, k={c.k}: {c.impl or '?'}: {told}{_per_round(tokens)} "
                     f"tokens/round; decode {fmt_rate(c.decode_tok_s)} tok/s, speed-up "
                     f"{fmt_x(c.speedup.value if c.speedup else None)}; outputs {outputs_text(c)}"
                     + (f"; unknown: {c.unknown}" if c.unknown else ""))
    if ph.native_reason:
        lines.append(f"   speculative, the engine's own: not measured: {ph.native_reason}")
    for f in ph.failures:
        lines.append(f"   speculative FAILURE: {f.status}: {f.reason}")
    return lines


def _per_round(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def speculative_series(models) -> list[dict]:
    """Per model with speculative cases: its draft, and per k the measured speed-up with its
    interval and the roofline's prediction at that k's measured acceptance (what the panel draws)."""
    out = []
    for label, m in models:
        ph = m.phases.speculative
        cases = [c for c in (ph.cases if ph else ()) if c.speedup and c.speedup.value is not None]
        if cases:
            out.append({"label": label, "draft": ph.draft, "k": [c.k for c in cases],
                        "speedup": [c.speedup.value for c in cases], "low": [c.speedup.low for c in cases],
                        "high": [c.speedup.high for c in cases], "predicted": [c.predicted_speedup for c in cases]})
    return out


def _speculative(ax, series: list[dict]) -> None:
    """Measured speed-up against k with its interval, the predicted curve dashed, break-even at 1."""
    from matplotlib.ticker import NullLocator


    for s in series:
        lows = [v - lo if lo is not None else 0.0 for v, lo in zip(s["speedup"], s["low"])]
        highs = [hi - v if hi is not None else 0.0 for v, hi in zip(s["speedup"], s["high"])]
        line = ax.errorbar(s["k"], s["speedup"], yerr=[lows, highs], marker="o", capsize=3,
                           label=chart_text(f"{s['label']} + {s['draft']} measured (95% CI)"))
        at = [(k, p) for k, p in zip(s["k"], s["predicted"]) if p is not None]
        if at:
            ax.plot(*zip(*at), "--", marker="x", color=line.lines[0].get_color(),
                    label=chart_text(f"{s['label']} roofline at the measured acceptance"))
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":", label="plain decoding")
    ax.set_xscale("log", base=2)
    ks = sorted({k for s in series for k in s["k"]})
    ax.set_xticks(ks, [str(k) for k in ks])  # the k's measured, as numbers (not 2^n at powers of two alone)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("draft tokens per round k")
    ax.set_ylabel("decode speed-up over plain greedy decoding")
    ax.set_title("Speculative decoding: speed-up vs k (dashed: predicted)")
    # below the axes, as the conversation panel's: inside, it covered the points, the break-even line and ticks
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))


def speculative_panel(charted: Charted):
    """`macprof plot`'s panel of the phase, where a model has a speed-up measured."""
    series = speculative_series(charted.models)
    return (lambda ax: _speculative(ax, series)) if series else None


def parameters(s) -> str:
    """The plot caption's words for the phase's settings."""

    return f"draft {setting(s, 'draft')}, k {setting(s, 'draft_tokens')}, {speed_parameters(s)}"


REPORT = PhaseReport(present="has_speculative", columns=COLUMNS, fields=FIGURES, note=NOTE, section=speculative_table,
                     detail=speculative_lines, panel=speculative_panel,
                     parameters=parameters)
