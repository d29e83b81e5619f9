"""The comparison table (`macprof compare`) in every output format."""

from __future__ import annotations

from macprof.render.text import clean, fmt_bytes, fmt_pct, fmt_rate, fmt_s, fmt_x, render_table


def compare_table(result: dict, fmt: str = "table") -> str:
    import csv
    import io
    import json

    if fmt == "json":
        return json.dumps(result, indent=1)
    case = (f"; TTFT, decode and memory are those of the sweep case {clean(result['case'])} (decode per sequence "
            f"in a batch case)") if result.get("case") else ""
    headers = ["model", "run", "engine", "quant", "size", "cold TTFT", "case TTFT" if case else "warm TTFT", "prefix TTFT",
               "decode tok/s", "of ceiling", "peak RSS", "decode vs base", "TTFT vs base", "flags"]
    rows = []
    for r in result["rows"]:
        calls = r["calls"]
        dec = "baseline" if r["baseline"] else f"{fmt_x(r['ratios']['decode'])} {calls['decode']['call']}"
        ttft = "baseline" if r["baseline"] else f"{fmt_x(r['ratios']['ttft'])} {calls['ttft']['call']}"
        rows.append([clean(r["model"]), clean(r["source"]), clean(r["engine"]), clean(r["quant"] or "-"),
                     fmt_bytes(r["file_bytes"]), fmt_s(r["cold_ttft_s"]), fmt_s(r["warm_ttft_s"]),
                     fmt_s(r["prefix_ttft_s"]), fmt_rate(r["decode_tok_s"]),
                     fmt_pct(r["efficiency"]), fmt_bytes(r["peak_rss_bytes"]),
                     dec, ttft, "NOT COMPARABLE: " + ", ".join(r["not_comparable"]) if r["not_comparable"] else ""])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(headers)
        w.writerows(rows)
        return buf.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines) + f"\n\nBaseline: {result['baseline']}. Significance: {result['test']}" + case + "."
    return render_table(headers, rows) + f"\n\nbaseline: {clean(result['baseline'])}; significance: {result['test']}" + case
