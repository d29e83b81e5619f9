"""`macprof plot`: decode tok/s against the ceiling and cold / warm / prefix TTFT per model; and,
where the logs hold sweeps, TTFT across the grid, decode vs KV depth with the ceiling curve,
and aggregate tok/s and per-user ITL vs batch size beside the roofline's prediction; then each
phase's own panel, as its report declares it (render/report.py ``panel``: the quality-speed
frontier, speculative decoding's speed-up against k, a conversation's TTFT per turn, time per
correct answer). matplotlib is imported by ``plot`` only (Agg backend, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from macprof.errors import MacprofError
from macprof.analyse.compare import rows_from
from macprof.model.log import Machine, ModelResult, RunLog
from macprof.model.phases import Ceiling, SweepCase
from macprof.render.report import (Charted, chart_text, label as row_label, parameters_of, panels as phase_panels, setting,
                                    speed_parameters)

FORMATS = (".png", ".svg", ".html")
MEASURED, SPEC = "#C44E52", "#55A868"
# Beyond this many logs a bar per model per log is unreadable (50 default runs: 300 bars, each
# with a two-line label, on a figure 58,000 px wide that took 25 s to draw): the bar charts then
# show one bar per model (and machine), the median across the logs, each log's figure a dot on it.
MANY_LOGS = 8
EACH_LOG = "each log (a bar: their median)"
# the figures the bar charts draw, which a bar of many logs takes the median of
BAR_KEYS = ("decode_tok_s", "cold_ttft_s", "warm_ttft_s", "prefix_ttft_s", "decode_j_per_token", "prefill_j_per_token")


def _models(logs: list[tuple[str, RunLog]]):
    """(series label, model) for every model of every log."""
    many = len(logs) > 1
    for source, log in logs:
        for m in log.models:
            name = m.identity.name
            yield chart_text(f"{name} [{source}]" if many else name), m


def _ceiling(roof: Ceiling | None, which: str) -> float | None:
    side = (roof.spec if which == "spec" else roof.measured) if roof else None
    return side.ceiling_tok_s if side else None


def plot(logs: list[tuple[str, RunLog]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if out.suffix not in FORMATS:
        raise MacprofError(f"{out}: the chart must be {', '.join(FORMATS)}")
    rows, ceilings = [], []
    for source, log in logs:
        for row, m in zip(rows_from(log, source), log.models):
            rows.append(row)
            roof = m.phases.warm.roofline if m.phases.warm else None
            ceilings.append((_ceiling(roof, "spec"), _ceiling(roof, "measured")))
    if not rows:
        raise MacprofError("plot: the run logs hold no models")
    models = list(_models(logs))
    bars, bar_ceilings = (_across_logs(rows, ceilings) if len(logs) > MANY_LOGS else (rows, ceilings))
    panels = []
    if any(r[k] for r in rows for k in ("decode_tok_s", "cold_ttft_s", "warm_ttft_s", "prefix_ttft_s")):
        panels += [lambda ax: _decode_bars(ax, bars, bar_ceilings, len(logs) > 1),
                   lambda ax: _ttft_bars(ax, bars, len(logs) > 1)]
    if any(r.get(k) is not None for r in rows for k in ("decode_j_per_token", "prefill_j_per_token")):
        panels.append(lambda ax: _energy_bars(ax, bars, len(logs) > 1))
    if any(m.phases.grid for _, m in models):
        panels.append(lambda ax: _grid(ax, models))
    if any(m.phases.depth for _, m in models):
        panels.append(lambda ax: _depth(ax, models))
    if any(m.phases.batch for _, m in models):
        panels += [lambda ax: _batch(ax, models, "aggregate"), lambda ax: _batch(ax, models, "itl")]
    panels += phase_panels(Charted(rows, models, len(logs) > 1))  # each phase's own (render/report.py)
    if not panels:
        raise MacprofError("plot: the run logs hold no measured phase to draw")
    nrows, ncols, width = layout(len(panels), len(bars))
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 5.5 * nrows), squeeze=False)
    flat = [ax for line in axes for ax in line]
    for draw, ax in zip(panels, flat):
        draw(ax)
    for ax in flat[len(panels):]:
        ax.axis("off")
    fig.text(0.01, 0.005, _caption(logs), fontsize=7, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.06 / nrows + 0.03, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".html":
        import io

        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        out.write_text("<!doctype html><meta charset='utf-8'><title>macprof</title>\n" + buf.getvalue())
    else:
        fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _across_logs(rows: list[dict], ceilings: list[tuple]) -> tuple[list[dict], list[tuple]]:
    """One bar row per model (per machine, where the logs come from several): each figure of
    BAR_KEYS the median of the logs that have it, their values kept under ``spread`` for the dots;
    efficiency and the ceilings the median likewise. The label's source says how many logs."""
    from macprof.measure import stats

    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row["model"], row["conditions"]["machine"]), []).append(i)
    machines = {key[1] for key in groups}

    median = stats.median_known  # the median every figure uses, of the known values
    out, out_ceilings = [], []
    for (model, machine), members in groups.items():
        picked = [rows[i] for i in members]
        n_logs = len({r["source"] for r in picked})
        where = f", {machine if isinstance(machine, str) else ' '.join(str(m) for m in machine if m)}" \
            if len(machines) > 1 else ""
        row = {"model": model, "source": f"{n_logs} logs{where}",
               "efficiency": median(r["efficiency"] for r in picked),
               "spread": {k: [r[k] for r in picked if r.get(k)] for k in BAR_KEYS}}
        row.update({k: median(r.get(k) for r in picked) for k in BAR_KEYS})
        out.append(row)
        out_ceilings.append(tuple(median(ceilings[i][k] for i in members) for k in (0, 1)))
    return out, out_ceilings


def _dots(ax, rows, key: str, offset: float = 0.0) -> None:
    """Each log's own figure on a bar of many logs (one scatter for all the bars)."""
    at = [(i + offset, v) for i, r in enumerate(rows) for v in (r.get("spread") or {}).get(key, ())]
    if at:
        labelled = any(c.get_label() == EACH_LOG for c in ax.collections)
        ax.scatter([x for x, _ in at], [y for _, y in at], s=6, color="black", alpha=0.5, zorder=3, linewidths=0,
                   label=None if labelled else EACH_LOG)
def _energy_bars(ax, rows, many: bool) -> None:
    """J/token of the warm phase, prefill and decode side by side, the idle baseline subtracted;
    a model whose energy is unknown gets no bar (its reason is in the log and the summary)."""
    x, width = range(len(rows)), 0.4
    for k, (key, name, color) in enumerate((("prefill_j_per_token", "prefill J / prompt token", "#55A868"),
                                           ("decode_j_per_token", "decode J / generated token", "#C44E52"))):
        ax.bar([i + (k - 0.5) * width for i in x], [r.get(key) or 0 for r in rows], width, label=name, color=color)
        _dots(ax, rows, key, (k - 0.5) * width)
    ax.set_xticks(list(x), [row_label(r, many) for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("joules per token (idle baseline subtracted)")
    ax.set_title("Energy per token (warm)")
    ax.legend(fontsize=8)


def _decode_bars(ax, rows, ceilings, many: bool) -> None:
    x = range(len(rows))
    ax.bar(x, [r["decode_tok_s"] or 0 for r in rows], color="#4C72B0", label="decode tok/s (p50)")
    _dots(ax, rows, "decode_tok_s")
    # one hlines call per kind of ceiling, not one per bar: 600 collections for 50 logs cost a
    # second to make and to draw. A bar's two ceilings never reach its neighbour's (0.2 apart),
    # and measured ones are drawn before published ones, as when each bar drew its own pair.
    for k, (color, style, width, name) in ((1, (MEASURED, "solid", 2.5, "ceiling (measured bandwidth)")),
                                           (0, (SPEC, "dashed", 2, "ceiling (published bandwidth)"))):
        at = [(i, c[k]) for i, c in enumerate(ceilings) if c[k]]
        if at:
            ax.hlines([y for _, y in at], [i - 0.4 for i, _ in at], [i + 0.4 for i, _ in at], colors=color,
                      linestyles=style, linewidth=width, label=name)
    for i in range(len(rows)):
        eff = rows[i]["efficiency"]
        if eff is not None and rows[i]["decode_tok_s"]:
            ax.annotate(f"{eff:.0%}", (i, rows[i]["decode_tok_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [row_label(r, many) for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("tokens / s")
    ax.set_title("Decode vs the bandwidth ceiling")
    ax.legend(fontsize=8)


def _ttft_bars(ax, rows, many: bool) -> None:
    x = range(len(rows))
    width = 0.27
    for k, (key, name, color) in enumerate((("cold_ttft_s", "cold (first token of a fresh process)", "#8172B2"),
                                             ("warm_ttft_s", "warm", "#4C72B0"),
                                             ("prefix_ttft_s", "prefix cached", "#55A868"))):
        ax.bar([i + (k - 1) * width for i in x], [r[key] or 0 for r in rows], width, label=name, color=color)
        _dots(ax, rows, key, (k - 1) * width)
    ax.set_yscale("log")
    ax.set_xticks(list(x), [row_label(r, many) for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("TTFT, seconds (log scale)")
    ax.set_title("Time to first token")
    ax.legend(fontsize=8)


def _ok_cases(m: ModelResult, phase: str) -> list[SweepCase]:
    sweep = m.phases.sweep(phase)
    return [c for c in (sweep.cases if sweep else ()) if c.status == "ok"]


def _grid(ax, models) -> None:
    styles = ("-", "--", ":", "-.")
    for k, (label, m) in enumerate(models):
        cases = _ok_cases(m, "grid")
        color = f"C{k % 10}"  # one colour per model, one line style per output length
        for j, gen in enumerate(sorted({c.gen_tokens for c in cases})):
            pts = sorted((c.prompt_tokens, c.summary.ttft_s.median) for c in cases if c.gen_tokens == gen)
            pts = [(p, t) for p, t in pts if t]
            if pts:
                ax.plot(*zip(*pts), styles[j % len(styles)], marker="o", color=color, label=f"{label}, gen {gen}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("TTFT p50, seconds")
    ax.set_title("Grid: time to first token vs prompt length")
    ax.legend(fontsize=7)


def _depth(ax, models) -> None:
    for label, m in models:
        cases = _ok_cases(m, "depth")
        if not cases:
            continue
        depth = [c.depth for c in cases]
        line, = ax.plot(depth, [c.summary.decode_tok_s.median or 0 for c in cases], marker="o",
                        label=f"{label} decode p50")
        for which, style in (("measured", "--"), ("spec", ":")):
            ceiling = [_ceiling(c.roofline, which) for c in cases]
            if all(ceiling):
                ax.plot(depth, ceiling, style, color=line.get_color(), label=f"{label} ceiling ({which} bandwidth)")
        for c in cases:
            roof = c.roofline
            eff = ((roof.measured.efficiency if roof.measured else None)
                   or (roof.spec.efficiency if roof.spec else None)) if roof else None
            if eff is not None:
                ax.annotate(f"{eff:.0%}", (c.depth, c.summary.decode_tok_s.median),
                            ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("tokens already in the KV cache (depth)")
    ax.set_ylabel("decode tokens / s (log scale)")
    ax.set_title("Decode vs KV depth (dashed: ceiling at that depth)")
    ax.legend(fontsize=7)


def _batch(ax, models, what: str) -> None:
    for label, m in models:
        rows = (m.phases.batch.tradeoff if m.phases.batch else None) or ()
        if not rows:
            continue
        b = [r.batch for r in rows]
        measured = [r.aggregate_tok_s if what == "aggregate" else r.itl_p50_s for r in rows]
        predicted = [r.predicted_aggregate_tok_s if what == "aggregate" else r.predicted_itl_s for r in rows]
        line, = ax.plot(b, [v or 0 for v in measured], marker="o", label=f"{label} measured")
        if all(predicted):
            ax.plot(b, predicted, "--", color=line.get_color(),
                    label=f"{label} roofline ({rows[0].predicted_with} bandwidth & FLOP/s)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size B (sequences decoded together)")
    if what == "aggregate":
        ax.set_ylabel("aggregate decode tokens / s")
        ax.set_title("Batching: aggregate throughput")
    else:
        ax.set_ylabel("per-user inter-token latency p50, s")
        ax.set_title("Batching: each user's ITL")
    ax.legend(fontsize=7)


def layout(panels: int, bars: int) -> tuple[int, int, float]:
    """(rows, columns, width in inches) of the figure: two columns up to four panels, three
    beyond; a lone panel spans the figure (in a grid of two it filled half, the other half blank);
    two columns widen with the bars drawn."""
    ncols = min(panels, 2 if panels <= 4 else 3)
    return math.ceil(panels / ncols), ncols, max(10, 1.6 * bars + 4) if ncols <= 2 else 17


def _caption(logs: list[tuple[str, RunLog]]) -> str:
    """A line per log; beyond MANY_LOGS, a line per distinct description (machine, settings,
    version) with how many logs share it, their first and last file and start time."""
    lines = [_describe(log) for _, log in logs]
    if len(logs) <= MANY_LOGS:
        return "\n".join(chart_text(f"{source}: {what}, {log.started_utc}")
                         for (source, log), what in zip(logs, lines))
    alike: dict[str, list[tuple[str, RunLog]]] = {}
    for pair, what in zip(logs, lines):
        alike.setdefault(what, []).append(pair)
    return "\n".join(chart_text(f"{len(same)} logs ({same[0][0]} .. {same[-1][0]}): {what}, "
                                 f"{same[0][1].started_utc} .. {same[-1][1].started_utc}")
                      for what, same in alike.items())


def _describe(log: RunLog) -> str:
    """The machine, each measured phase's own parameters (the first model's settings), and
    macprof's version."""
    mach = log.machine or Machine()
    s = log.models[0].settings if log.models else None
    phases = "; ".join(filter(None, (phase_parameters(s, name) for name in s.phases))) if s else ""
    return f"{mach.chip or mach.cpu_model}, {mach.os} {mach.os_version}, " + (f"{phases}, " if phases else "") + \
        f"macprof {log.tool_version}"


def phase_parameters(s, phase: str) -> str:
    """What shaped one phase's figures, in words: its lengths and repetitions (a speed phase's
    prompt / gen and reps, a sweep's grid...; a phase with a report says its own, its
    ``parameters``). A setting a log lacks (older logs) reads "?"."""
    def v(name: str):
        return setting(s, name)

    speed = speed_parameters(s)
    words = {
        "cold": f"{v('cold_trials')} trials of prompt {v('prompt_tokens')} / gen {v('gen_tokens')} tokens",
        "warm": speed,
        "prefix": f"{v('prefix_tokens')} shared of {speed}",
        "grid": ", ".join(f"{name} {v(name)}" for name in ("prompt_grid", "gen_grid", "shapes") if getattr(s, name, None))
        + f", reps {v('reps')}",
        "depth": f"depths {v('depths')}, gen {v('gen_tokens')} tokens, reps {v('reps')}",
        "batch": f"batches {v('batches')} of {speed}",
        "concurrency": ", ".join(f"{name} {v(name)}" for name in ("concurrency", "rates") if getattr(s, name, None))
        + f", {v('load_requests')} requests",
    }
    said = words.get(phase) or parameters_of(s, phase)
    return f"{phase} {said}" if said else phase


