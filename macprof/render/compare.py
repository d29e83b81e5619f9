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
    level = f"{result['confidence']:.0%}"
    headers = ["model", "run", "engine", "quant", "size", "cold TTFT", "case TTFT" if case else "warm TTFT", "prefix TTFT",
               "decode tok/s", "of ceiling", "peak RSS", "decode vs base", f"decode {level} CI", "TTFT vs base",
               f"TTFT {level} CI", "flags"]
    rows = []
    for r in result["rows"]:
        dec, ttft = (_versus(r, key) for key in ("decode", "ttft"))
        rows.append([clean(r["model"]), clean(r["source"]), clean(r["engine"]), clean(r["quant"] or "-"),
                     fmt_bytes(r["file_bytes"]), fmt_s(r["cold_ttft_s"]), fmt_s(r["warm_ttft_s"]),
                     fmt_s(r["prefix_ttft_s"]), fmt_rate(r["decode_tok_s"]),
                     fmt_pct(r["efficiency"]), fmt_bytes(r["peak_rss_bytes"]),
                     *dec, *ttft, "NOT COMPARABLE: " + ", ".join(r["not_comparable"]) if r["not_comparable"] else ""])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(headers)
        w.writerows(rows)
        return buf.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines) + (f"\n\nBaseline: {result['baseline']}. Significance: {result['test']}. "
                                   f"CI: {result['interval']}") + case + "."
    return render_table(headers, rows) + (f"\n\nbaseline: {clean(result['baseline'])}; significance: {result['test']}; "
                                          f"CI: {result['interval']}") + case


def _versus(r: dict, key: str) -> tuple[str, str]:
    """The 'vs base' cell (ratio and the test's call, with why it cannot tell) and the CI cell."""
    if r["baseline"]:
        return "baseline", ""
    call, ci = r["calls"][key], r["intervals"][key]
    said = f"{call['call']}: {call['why']}" if call.get("why") else call["call"]
    shown = "-" if ci["low"] is None else f"{fmt_x(ci['low'])}..{fmt_x(ci['high'])}"
    return f"{fmt_x(r['ratios'][key])} {said}", shown
