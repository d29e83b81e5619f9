"""The conversation phase in text: compare's columns, the end-of-run table, and `macprof show`'s
turn by turn lines. Pure functions of the run log's figures."""

from __future__ import annotations

from macprof.analyse.conversation import FIGURES
from macprof.model.conversation import ConversationPhase
from macprof.model.log import ModelResult, RunLog
from macprof.render.exporters import Column, Table, cell
from macprof.render.report import Charted, PhaseReport, Section, setting
from macprof.render.text import fmt_of, fmt_s, fmt_share
from macprof.sanitise import clean

NOTE = ("conversation: reuse = prompt tokens the engine reused from its cache as the previous request left it, "
        "over the prompt's tokens (turns after each app's first); ideal = what a cache of the app's own last "
        "prompt and reply would allow; TTFT saved = emptied-cache TTFT minus natural-cache TTFT, median per turn")


def _reuse(r: dict) -> str:
    if r.get("reuse_rate_p50") is None:
        return "-"
    return f"{fmt_share(r['reuse_rate_p50'])} (p10 {fmt_share(r['reuse_rate_p10'])})"


def _hits(r: dict) -> str:
    return "-" if r.get("hit_rate") is None else f"{fmt_share(r['hit_rate'])} of {fmt_share(r['ideal_hit_rate'])}"


COLUMNS = (Column("reuse p50 (p10)", _reuse), Column("hit rate of ideal", _hits),
           Column("TTFT saved/turn", cell("ttft_saved_s", fmt_s)))


def conversation_table(log: RunLog) -> Section | None:
    from macprof.analyse.conversation import figures

    rows = []
    for m in log.models:
        ph = m.phases.conversation
        if ph is None:
            continue
        s = ph.summary
        rows.append({**figures(m), "model": m.identity.name, "apps": ph.apps, "turns": len(ph.turns),
                     "template": ph.template_source or "?", "natural": s.ttft_natural_s.median,
                     "emptied": s.ttft_emptied_s.median, "growth_n": s.ttft_growth_natural_s_per_kt,
                     "growth_e": s.ttft_growth_emptied_s_per_kt,
                     "stops": ", ".join(f"{k} {n}" for k, n in s.stops.items()) or "-",
                     "checks": f"{fmt_of(s.identical, len(ph.turns))} identical, {s.near_ties} near-ties, {s.failed_checks} failed",
                     "stopped": ph.stop_reasons, "unchecked": s.unchecked_reports, "holds": ph.holds,
                     "unreported": s.unreported, "not_emptied": s.not_emptied,
                     "why_not_emptied": next((t.not_emptied for t in ph.turns if t.not_emptied), None),
                     "why_unreported": next((t.reuse_unreported for t in ph.turns if t.reuse_unreported), None)})
    if not rows:
        return None
    columns = (Column("model", cell("model")), Column("apps", cell("apps")), Column("turns", cell("turns")),
               Column("template", cell("template")), *COLUMNS,
               Column("TTFT natural p50", cell("natural", fmt_s)), Column("TTFT emptied p50", cell("emptied", fmt_s)),
               Column("TTFT growth /1k tok", lambda r: f"{fmt_s(r['growth_n'])} vs {fmt_s(r['growth_e'])}"),
               Column("reuse stopped", cell("stops")), Column("outputs", cell("checks")))
    notes = [f"{r['model']}: {why}" for r in rows for why in r["stopped"]]
    notes += [f"{r['model']}: in {r['unchecked']} turns the engine reported another reuse than the ids it held allow"
              for r in rows if r["unchecked"]]
    notes += [f"{r['model']}: {r['holds']}" for r in rows if r["holds"]]
    notes += [f"{r['model']}: reuse unknown in {r['unreported']} turns: {r['why_unreported']}"
              for r in rows if r["unreported"]]
    notes += [f"{r['model']}: in {r['not_emptied']} turns {r['why_not_emptied']}" for r in rows if r["not_emptied"]]
    return Section("Conversation (cache as the previous request left it)",
                   Table("conversation", columns, tuple(rows), (), (), {}), tuple(notes))


def _check(t) -> str:
    if not t.check:
        return "?"
    return "identical" if t.check.first_divergence is None else "near-tie" if t.check.near_tie else "DIFFERS"


def _turn_row(t) -> dict:
    """A turn as a row of the turns table: its raw figures."""
    return {"app": t.app, "turn": t.turn, "prompt_tokens": t.prompt_tokens, "held_tokens": t.held_tokens,
            "held_by": t.held_by, "reused_tokens": t.reused_tokens, "reuse_rate": t.reuse_rate,
            "ideal_reuse": t.ideal_reuse, "stop_kind": t.stop_kind, "stop_reason": t.stop_reason,
            "reply_tokens": t.reply_tokens, "reply_end": t.reply_end,
            "ttft_natural_s": t.natural.ttft_s if t.natural else None,
            "ttft_emptied_s": t.emptied.ttft_s if t.emptied else None, "output": _check(t)}


TURN_COLUMNS = (
    Column("app", cell("app")), Column("turn", cell("turn")), Column("prompt", cell("prompt_tokens")),
    Column("held (whose)", lambda r: "-" if r["held_by"] is None else f"{r['held_tokens']} (app {r['held_by']})"),
    Column("reused", lambda r: "unknown" if r["reused_tokens"] is None else
           f"{r['reused_tokens']} ({fmt_share(r['reuse_rate'])})"),
    Column("ideal", lambda r: "?" if r["ideal_reuse"] is None else str(r["ideal_reuse"])),
    Column("stop", cell("stop_kind")),
    # the natural request's reply: its tokens and how it ended (a server's: not known here)
    Column("reply (end)", lambda r: "?" if r["reply_tokens"] is None else f"{r['reply_tokens']} ({r['reply_end']})"),
    Column("TTFT natural", cell("ttft_natural_s", fmt_s)), Column("TTFT emptied", cell("ttft_emptied_s", fmt_s)),
    Column("output", cell("output")), Column("where reuse stopped", lambda r: r["stop_reason"] or "-"))


def turns_tables(log: RunLog) -> list[Section]:
    """`macprof show --format markdown`: each model's conversation turn by turn (what `show`'s
    text gives as lines), a table a model, after the phase's summary rows."""
    out = []
    for m in log.models:
        ph = m.phases.conversation
        if ph is None or not ph.turns:
            continue
        notes = tuple(x for x in (ph.generation and f"replies: {ph.generation}", ph.holds, *ph.stop_reasons) if x)
        out.append(Section(f"Conversation turns: {m.identity.name}",
                           Table("turns", TURN_COLUMNS, tuple(_turn_row(t) for t in ph.turns), (), (), {}), notes))
    return out


def conversation_lines(ph: ConversationPhase) -> list[str]:
    """`macprof show`: the template, then a line per turn."""
    s = ph.summary
    lines = [f"   conversation: {len(ph.turns)} turns of {ph.apps} app(s), {ph.app_order}; template {ph.template_source}"
             + (f" ({clean(ph.template_path)})" if ph.template_path else "") + f", sha256 {(ph.template_sha256 or '?')[:12]}",
             f"   reuse p50 {fmt_share(s.reuse_rate.median)}, p10 {fmt_share(s.reuse_rate_p10)}; hit rate {fmt_share(s.hit_rate)} "
             f"(ideal {fmt_share(s.ideal_hit_rate)}); TTFT natural {fmt_s(s.ttft_natural_s.median)} vs emptied "
             f"{fmt_s(s.ttft_emptied_s.median)}, saved {fmt_s(s.ttft_saved_s.median)} per turn"]
    if ph.generation:
        lines.append(f"   replies: {clean(ph.generation)}")
    if ph.holds:
        lines.append(f"   {clean(ph.holds)}")
    for t in ph.turns:
        nat = t.natural.ttft_s if t.natural else None
        emp = t.emptied.ttft_s if t.emptied else None
        reused = "unknown" if t.reused_tokens is None else str(t.reused_tokens)
        bound = f", at most {t.reuse_bound}" if t.reuse_bound is not None else ""
        ideal = "?" if t.ideal_reuse is None else t.ideal_reuse
        reply = f"; reply {t.reply_tokens} tokens, ended at {t.reply_end}" if t.reply_tokens is not None else ""
        lines.append(f"   app {t.app} turn {t.turn}: prompt {t.prompt_tokens}, reused {reused} "
                     f"({fmt_share(t.reuse_rate)}{bound}; ideal {ideal}), TTFT {fmt_s(nat)} vs {fmt_s(emp)} emptied; "
                     f"{t.stop_kind}: {clean(t.stop_reason)}; output {_check(t)}{reply}"
                     + (f"; {clean(t.not_emptied)}" if t.not_emptied else ""))
    lines += [f"   stopped: {clean(why)}" for why in ph.stop_reasons]
    return lines


def conversation_series(m: ModelResult) -> dict | None:
    """What the conversation panel draws of one model: per turn, in the order the turns ran (the
    apps interleaved), TTFT with the natural cache and with it emptied, and the reuse rate (None
    where the engine reported no reuse: not drawn, never taken for 0). None: no conversation."""
    ph = m.phases.conversation
    if ph is None or not ph.turns:
        return None

    def ttft(r) -> float | None:
        return r.ttft_s if r is not None and r.status == "ok" else None

    return {"turns": [f"app {t.app} turn {t.turn}" for t in ph.turns],
            "natural": [ttft(t.natural) for t in ph.turns], "emptied": [ttft(t.emptied) for t in ph.turns],
            "reuse": [t.reuse_rate for t in ph.turns],
            "unreported": sum(1 for t in ph.turns if t.reused_tokens is None)}


def _conversation(ax, models) -> None:
    """TTFT per turn, natural (solid) vs emptied (dashed), one colour per model; the reuse rate
    per turn on the right axis (dotted, squares). A gap where a figure is unknown."""
    nan = float("nan")
    rate = ax.twinx()
    notes = []
    for k, (label, m) in enumerate(models):
        series = conversation_series(m)
        if series is None:
            continue
        color, x = f"C{k % 10}", list(range(len(series["turns"])))
        ax.plot(x, [nan if v is None else v for v in series["natural"]], "-", marker="o", color=color,
                label=f"{label} TTFT natural cache")
        ax.plot(x, [nan if v is None else v for v in series["emptied"]], "--", marker="o", color=color,
                label=f"{label} TTFT cache emptied")
        rate.plot(x, [nan if v is None else 100 * v for v in series["reuse"]], ":", marker="s", color=color,
                  label=f"{label} reuse rate")
        if series["unreported"]:
            notes.append(f"{label}: reuse not reported in {series['unreported']} turns")
    ax.set_yscale("log")
    ax.set_xlabel("turn, in the order run (apps interleaved)")
    ax.set_ylabel("TTFT, seconds (log scale)")
    rate.set_ylabel("prompt tokens reused from the cache, %")
    rate.set_ylim(0, 105)
    ax.set_title("Conversation: TTFT per turn, natural cache vs emptied" + (f"\n{'; '.join(notes)}" if notes else ""),
                 fontsize=9)
    lines = ax.get_legend_handles_labels()
    more = rate.get_legend_handles_labels()
    # below the axes: over them it hides the curves of either axis (loc="best" sees only one)
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))


def conversation_panel(charted: Charted):
    """`macprof plot`'s panel of the phase, where a model has a turn."""
    if not any(m.phases.conversation and m.phases.conversation.turns for _, m in charted.models):
        return None
    return lambda ax: _conversation(ax, charted.models)


def parameters(s) -> str:
    """The plot caption's words for the phase's settings."""
    tool = f" / tool {setting(s, 'tool_tokens')}" if getattr(s, "tool_tokens", None) else ""
    return (f"{setting(s, 'apps')} app(s) x {setting(s, 'turns')} turns, system {setting(s, 'system_tokens')} / user "
            f"{setting(s, 'turn_tokens')}{tool} tokens, replies to EOS or {setting(s, 'gen_tokens')} tokens")


REPORT = PhaseReport(present="has_conversation", columns=COLUMNS, fields=FIGURES, note=NOTE, section=conversation_table,
                     detail=conversation_lines, tables=turns_tables,
                     panel=conversation_panel, parameters=parameters)
