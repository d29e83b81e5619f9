"""`macprof plot`: decode tok/s against the ceiling, and cold / warm / prefix TTFT, per model.
matplotlib is imported here only (Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path

from macprof.errors import MacprofError
from macprof.runlog import dig

FORMATS = (".png", ".svg", ".html")


def _label(row: dict, many_logs: bool) -> str:
    return f"{row['model']}\n[{row['source']}]" if many_logs else row["model"]


def plot(logs: list[tuple[str, dict]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from macprof.compare import rows_from

    if out.suffix not in FORMATS:
        raise MacprofError(f"{out}: the chart must be {', '.join(FORMATS)}")
    rows, ceilings = [], []
    for source, log in logs:
        for row, m in zip(rows_from(log, source), log.get("models", [])):
            rows.append(row)
            roof = dig(m, "phases", "warm", "roofline") or {}
            ceilings.append((dig(roof, "spec", "ceiling_tok_s"), dig(roof, "measured", "ceiling_tok_s")))
    if not rows:
        raise MacprofError("plot: the run logs hold no models")
    many = len(logs) > 1
    labels = [_label(r, many) for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 1.6 * len(rows) + 4), 5.5))
    x = range(len(rows))
    ax1.bar(x, [r["decode_tok_s"] or 0 for r in rows], color="#4C72B0", label="decode tok/s (p50)")
    for i, (spec, meas) in enumerate(ceilings):
        if meas:
            ax1.hlines(meas, i - 0.4, i + 0.4, colors="#C44E52", linewidth=2.5,
                       label="ceiling (measured bandwidth)" if i == 0 or not any(c[1] for c in ceilings[:i]) else None)
        if spec:
            ax1.hlines(spec, i - 0.4, i + 0.4, colors="#55A868", linestyles="dashed", linewidth=2,
                       label="ceiling (published bandwidth)" if not any(c[0] for c in ceilings[:i]) else None)
        eff = rows[i]["efficiency"]
        if eff is not None and rows[i]["decode_tok_s"]:
            ax1.annotate(f"{eff:.0%}", (i, rows[i]["decode_tok_s"]), ha="center", va="bottom", fontsize=8)
    ax1.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("tokens / s")
    ax1.set_title("Decode vs the bandwidth ceiling")
    ax1.legend(fontsize=8)
    width = 0.27
    for k, (key, name, color) in enumerate((("cold_ttft_s", "cold (first token of a fresh process)", "#8172B2"),
                                             ("warm_ttft_s", "warm", "#4C72B0"),
                                             ("prefix_ttft_s", "prefix cached", "#55A868"))):
        ax2.bar([i + (k - 1) * width for i in x], [r[key] or 0 for r in rows], width, label=name, color=color)
    ax2.set_yscale("log")
    ax2.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax2.set_ylabel("TTFT, seconds (log scale)")
    ax2.set_title("Time to first token")
    ax2.legend(fontsize=8)
    fig.text(0.01, 0.01, _caption(logs), fontsize=7, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
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


def _caption(logs: list[tuple[str, dict]]) -> str:
    parts = []
    for source, log in logs:
        mach = log.get("machine") or {}
        s = (log.get("models") or [{}])[0].get("settings") or {}
        parts.append(f"{source}: {mach.get('chip') or mach.get('cpu_model')}, {mach.get('os')} {mach.get('os_version')}, "
                     f"prompt {s.get('prompt_tokens')} / gen {s.get('gen_tokens')} tokens, reps {s.get('reps')}, "
                     f"macprof {log.get('tool_version')}, {log.get('started_utc')}")
    return "\n".join(parts)
