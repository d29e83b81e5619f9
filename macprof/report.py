"""Rendering a run log for people: the summary table, per-phase detail, stability warnings.
Pure functions of the run log; no measurement, no I/O."""

from __future__ import annotations

from macprof.cases import SWEEP_PHASES
from macprof.measure.stats import relative_spread
from macprof.runlog import dig

SPREAD_WARN = 0.10  # stdev over 10% of the median
FIRST_SLOW = 1.5  # first measured request this much slower than the median of the others


def fmt_s(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 1e-3:
        return f"{x * 1e6:.0f} µs"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def fmt_pct(x: float | None) -> str:
    """93%, 4.2%, 0.11%: two significant digits below 10%, so a tiny share never reads 0%."""
    if x is None:
        return "-"
    return f"{x:.0%}" if x >= 0.1 else f"{100 * x:.2g}%"


def _x(ratio: float | None) -> str:
    """A ratio as x1.24."""
    return "-" if ratio is None else f"x{ratio:.2f}"


def fmt_bytes(x: int | None) -> str:
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return "-"


def peak_rss(model: dict) -> int | None:
    peaks = [dig(p, "memory", "peak_rss_bytes") for p in model.get("phases", {}).values()]
    peaks = [p for p in peaks if p]
    return max(peaks) if peaks else None


def ceiling_text(roof: dict | None) -> str:
    """'93% of 62.4 (spec) / 97% of 60.0 (measured)', with '-' where a ceiling is unknown."""
    if not roof or roof.get("reason"):
        return "-"
    parts = []
    for which in ("spec", "measured"):
        r = roof.get(which) or {}
        if r.get("ceiling_tok_s") is None:
            parts.append(f"? ({which})")
        elif r.get("efficiency") is None:
            parts.append(f"{r['ceiling_tok_s']:.1f} ({which})")
        else:
            parts.append(f"{fmt_pct(r['efficiency'])} of {r['ceiling_tok_s']:.1f} ({which})")
    return " / ".join(parts)


def headline(m: dict) -> dict:
    """The figures a model is known by, shared by the summary table and `compare`."""
    ph = m.get("phases", {})
    return {
        "model": m["identity"]["name"],
        "engine": m["identity"]["engine"],
        "quant": m["identity"].get("quant_declared") or m["identity"].get("quant_label"),
        "file_bytes": m["identity"].get("total_bytes"),
        "cold_ttft_s": dig(ph, "cold", "summary", "time_to_first_token_s", "median"),
        "warm_ttft_s": dig(ph, "warm", "summary", "ttft_s", "median"),
        "prefix_ttft_s": dig(ph, "prefix", "summary", "reuse", "ttft_s", "median"),
        "decode_tok_s": dig(ph, "warm", "summary", "decode_tok_s", "median"),
        "efficiency": dig(ph, "warm", "roofline", "measured", "efficiency"),
        "peak_rss_bytes": peak_rss(m),
    }


def summary_rows(log: dict) -> list[dict]:
    rows = []
    for m in log.get("models", []):
        ph = m.get("phases", {})
        trials = [t for t in dig(ph, "cold", "trials") or [] if t.get("status") == "ok"]
        states = sorted({t["residency"]["label"].split(" ")[0] for t in trials if t.get("residency")})
        rows.append({
            **headline(m),
            "cold_state": "/".join(states) or None,
            "prefix_speedup": dig(ph, "prefix", "summary", "ttft_speedup"),
            "itl_p99_s": dig(ph, "warm", "summary", "itl_s", "p99"),
            "ceiling": ceiling_text(dig(ph, "warm", "roofline")),
            "failures": len(m.get("failures", [])),
        })
    return rows


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def summary_table(log: dict) -> str:
    headers = ["model", "engine", "quant", "cold start", "warm TTFT p50", "prefix TTFT p50",
               "decode tok/s p50", "= of ceiling", "ITL p99", "peak RSS", "failures"]
    rows = []
    for r in summary_rows(log):
        cold = "-" if r["cold_ttft_s"] is None else f"{fmt_s(r['cold_ttft_s'])} ({r['cold_state']})"
        prefix = fmt_s(r["prefix_ttft_s"])
        if r["prefix_speedup"]:
            prefix += f" (x{r['prefix_speedup']:.1f})"
        rows.append([r["model"], r["engine"], r["quant"] or "-", cold, fmt_s(r["warm_ttft_s"]), prefix,
                     fmt_rate(r["decode_tok_s"]), r["ceiling"], fmt_s(r["itl_p99_s"]), fmt_bytes(r["peak_rss_bytes"]),
                     str(r["failures"])])
    return render_table(headers, rows)


def warnings(log: dict) -> list[str]:
    """Where the numbers should not be trusted as they stand, pyperf / hyperfine style."""
    out = []
    mach = log.get("machine") or {}
    if mach.get("power_source") == "battery":
        out.append("the machine ran on battery: performance may be capped; plug in for comparable figures")
    if mach.get("low_power_mode"):
        out.append("low-power mode was on: figures are not comparable with a normal run")
    if mach.get("thermal_state") not in (None, "nominal"):
        out.append(f"thermal state was {mach['thermal_state']}: the chip may have been throttled")
    start, end = dig(log, "memory", "start", "swap_used_bytes"), dig(log, "memory", "end", "swap_used_bytes")
    if start is not None and end is not None and end - start > 64 * 2**20:
        out.append(f"swap grew by {fmt_bytes(end - start)} during the run: memory pressure distorts timings")
    if not log.get("complete"):
        out.append("the run is incomplete (interrupted or crashed): some models or phases are missing")
    for m in log.get("models", []):
        name = m["identity"]["name"]
        for phase, label in (("warm", "warm"), ("prefix", "prefix (reuse)")):
            summ = dig(m, "phases", phase, "summary")
            if phase == "prefix":
                summ = dig(summ, "reuse")
            if not summ:
                continue
            for metric, what in (("decode_tok_s", "decode tok/s"), ("ttft_s", "TTFT")):
                spread = relative_spread(summ.get(metric) or {})
                if spread is not None and spread > SPREAD_WARN:
                    out.append(f"{name}: {label} {what} varies by {spread:.0%} of its median (stdev/median > "
                               f"{SPREAD_WARN:.0%}): close other programs, add --reps or --delay")
        for phase in SWEEP_PHASES:
            noisy = [c["id"] for c in dig(m, "phases", phase, "cases") or []
                     if (relative_spread(dig(c, "summary", "decode_tok_s") or {}) or 0) > SPREAD_WARN]
            if noisy:
                out.append(f"{name}: {phase} decode tok/s varies by more than {SPREAD_WARN:.0%} of its median in "
                           f"{', '.join(noisy)}: close other programs, add --reps or --delay")
            checks = [c["id"] for c in dig(m, "phases", phase, "cases") or [] if dig(c, "check", "failed")]
            if checks:
                out.append(f"{name}: batched decoding changed the output beyond a near-tie in {', '.join(checks)}")
        reqs = [r for r in dig(m, "phases", "warm", "requests") or [] if r["kind"] == "measured" and r["status"] == "ok"]
        if len(reqs) >= 3:
            rest = sorted(r["total_s"] for r in reqs[1:])
            med = rest[len(rest) // 2]
            if med and reqs[0]["total_s"] > FIRST_SLOW * med:
                out.append(f"{name}: the first measured warm request was {reqs[0]['total_s'] / med:.1f}x slower "
                           f"than the others: warm-up did not fully warm")
        drops = [t["drop_cache"] for t in dig(m, "phases", "cold", "trials") or [] if t.get("drop_cache")]
        if any(not d["dropped"] for d in drops):
            out.append(f"{name}: --drop-cache could not evict the model from the page cache ({drops[0]['reason']}): "
                       f"cold trials are labelled by their measured residency instead")
        checks = dig(m, "phases", "prefix", "summary", "checks") or {}
        if checks.get("failed"):
            out.append(f"{name}: prefix reuse changed the output in {checks['failed']} of {checks['n']} requests "
                       f"beyond a floating-point near-tie: the cached path is not equivalent")
        for f in m.get("failures", []):
            out.append(f"{name}: {f.get('phase') or 'load'} failed ({f.get('status')}): {f.get('reason')}")
    return out


def _case_status(c: dict) -> str:
    if c["status"] == "ok":
        return ""
    return f"{c['status'].upper()}: {c['reason']}" if c.get("reason") else c["status"].upper()


def grid_table(cases: list[dict]) -> str:
    headers = ["case", "prompt", "gen", "TTFT p50", "prefill tok/s", "decode tok/s p50", "e2e tok/s",
               "ITL p99", "= of ceiling at c", ""]
    rows = [[c["id"], str(c["prompt_tokens"]), str(c["gen_tokens"]), fmt_s(dig(c, "summary", "ttft_s", "median")),
             fmt_rate(dig(c, "summary", "prefill_tok_s", "median")), fmt_rate(dig(c, "summary", "decode_tok_s", "median")),
             fmt_rate(dig(c, "summary", "e2e_tok_s", "median")), fmt_s(dig(c, "summary", "itl_s", "p99")),
             ceiling_text(c.get("roofline")), _case_status(c)] for c in cases]
    return render_table(headers, rows)


def depth_table(cases: list[dict]) -> str:
    headers = ["depth", "context c", "fill (once)", "decode tok/s p50", "ITL p50", "ITL p99", "= of ceiling at c", ""]
    rows = [[str(c["depth"]), f"{c['context_tokens']:.0f}", fmt_s(dig(c, "fill", "fill_s")),
             fmt_rate(dig(c, "summary", "decode_tok_s", "median")), fmt_s(dig(c, "summary", "itl_s", "median")),
             fmt_s(dig(c, "summary", "itl_s", "p99")), ceiling_text(c.get("roofline")), _case_status(c)] for c in cases]
    return render_table(headers, rows)


def batch_table(phase: dict) -> str:
    trade = {r["batch"]: r for r in phase.get("tradeoff") or []}
    headers = ["B", "aggregate tok/s p50", "vs B=1", "ITL p50", "vs B=1", "ITL p99", "predicted aggregate", "vs B=1",
               "predicted ITL", "vs B=1", "measured / predicted", "same tokens as B=1", ""]
    rows = []
    for c in phase["cases"]:
        t = trade.get(c["batch"]) or {}
        chk = c.get("check") or {}
        same = "-" if not chk else f"{chk['identical']}/{chk['n']}" + (f" ({chk['near_ties']} near-tie)" if chk["near_ties"] else "") \
            + (f" {chk['failed']} FAILED" if chk["failed"] else "")
        rows.append([str(c["batch"]), fmt_rate(t.get("aggregate_tok_s")), _x(t.get("aggregate_vs_b1")), fmt_s(t.get("itl_p50_s")),
                     _x(t.get("itl_p50_vs_b1")), fmt_s(t.get("itl_p99_s")), fmt_rate(t.get("predicted_aggregate_tok_s")),
                     _x(t.get("predicted_aggregate_vs_b1")), fmt_s(t.get("predicted_itl_s")), _x(t.get("predicted_itl_vs_b1")),
                     f"{_x(t.get('measured_over_predicted_aggregate'))} agg, {_x(t.get('measured_over_predicted_itl'))} ITL" if t else "-",
                     same, _case_status(c)])
    return render_table(headers, rows)


def tradeoff_line(phase: dict) -> str | None:
    """'B=8: aggregate x6.10, each user's ITL x1.24 (predicted x7.93, x1.01)' for the largest B."""
    rows = [r for r in phase.get("tradeoff") or [] if r["batch"] > 1 and r.get("aggregate_vs_b1")]
    if not rows:
        return None
    r = rows[-1]
    pred = f" (predicted {_x(r['predicted_aggregate_vs_b1'])}, {_x(r['predicted_itl_vs_b1'])}, " \
           f"{r['predicted_with']} bandwidth and FLOP/s, bound: {r['bound']})" if r.get("predicted_aggregate_vs_b1") else ""
    return f"B={r['batch']}: aggregate {_x(r['aggregate_vs_b1'])}, each user's ITL {_x(r['itl_p50_vs_b1'])}{pred}"


def sweep_tables(log: dict) -> str:
    parts = []
    for m in log.get("models", []):
        name, s = m["identity"]["name"], m["settings"]
        ph = m.get("phases", {})
        if ph.get("grid"):
            parts.append(f"{name}: grid (warm protocol per case, {s['reps']} reps; c = prompt + gen/2)\n"
                         + grid_table(ph["grid"]["cases"]))
        if ph.get("depth"):
            parts.append(f"{name}: decode after d tokens already in the KV cache (gen {s['gen_tokens']}, {s['reps']} reps)\n"
                         + depth_table(ph["depth"]["cases"]))
        if ph.get("batch"):
            line = tradeoff_line(ph["batch"])
            parts.append(f"{name}: batched decoding, prompt {s['prompt_tokens']} / gen {s['gen_tokens']} per sequence, "
                         f"{s['reps']} reps\n" + batch_table(ph["batch"]) + (f"\n  {line}" if line else ""))
    return "\n\n".join(parts)


def render_summary(log: dict, path: str | None = None) -> str:
    parts = [summary_table(log)]
    sweeps = sweep_tables(log)
    if sweeps:
        parts.append("\n" + sweeps)
    warns = warnings(log)
    if warns:
        parts.append("\nWarnings:\n" + "\n".join(f"  ! {w}" for w in warns))
    if path:
        parts.append(f"\nrun log: {path}")
    return safe_lines("\n".join(parts))


def safe_lines(text: str) -> str:
    """Everything printed from a log goes through here: no escape sequence reaches the terminal."""
    return "\n".join(clean(line) for line in text.split("\n"))


def render_detail(log: dict) -> str:
    """Per-phase detail for `macprof show`."""
    lines = []
    mach = log.get("machine") or {}
    lines.append(f"macprof {log.get('tool_version')} run of {log.get('started_utc')} "
                 f"({'complete' if log.get('complete') else 'INCOMPLETE'}) on {mach.get('chip') or mach.get('cpu_model')}, "
                 f"{mach.get('os')} {mach.get('os_version')}, {fmt_bytes(mach.get('memory_bytes'))}")
    for m in log.get("models", []):
        ident = m["identity"]
        lines.append("")
        lines.append(f"== {ident['name']}  ({ident['engine']}, {ident.get('quant_declared') or ident.get('quant_label')}, "
                     f"{fmt_bytes(ident.get('total_bytes'))}, {ident.get('n_params') or '?'} parameters)")
        s = m["settings"]
        lines.append(f"   prompt {s['prompt_tokens']} / gen {s['gen_tokens']} / prefix {s['prefix_tokens']} tokens, "
                     f"reps {s['reps']}, cold trials {s['cold_trials']}, threads {s['threads'] or 'engine default'}")
        cold = dig(m, "phases", "cold")
        if cold:
            for t in cold["trials"]:
                if t["status"] != "ok":
                    lines.append(f"   cold trial {t['index'] + 1}: FAILED")
                    continue
                lines.append(
                    f"   cold trial {t['index'] + 1} [{t['residency']['label']}]: ready {fmt_s(t['ready_s'])} = "
                    f"interpreter {fmt_s(t['interpreter_s'])} + import {fmt_s(t['import_s'])} + load "
                    f"{fmt_s(t['model_load_s'])} + tokenizer {fmt_s(t['tokenizer_load_s'])}; first request "
                    f"+{fmt_s(t['first_request_extra_s'])} over a warm one; first token at {fmt_s(t['time_to_first_token_s'])}")
        for phase in ("warm", "prefix"):
            ph = dig(m, "phases", phase)
            if not ph:
                continue
            summ = ph["summary"] if phase == "warm" else ph["summary"]["reuse"]
            lines.append(f"   {phase}: " + _metrics_line(summ))
            if phase == "prefix":
                lines.append(f"   prefix without reuse: " + _metrics_line(ph["summary"]["noreuse"]))
                c = ph["summary"]["checks"]
                sp = ph["summary"]["ttft_speedup"]
                lines.append(f"   prefix TTFT speed-up x{sp:.2f}; reused tokens p50 {ph['summary']['reused_tokens']['median']}; "
                             f"output checks: {c['identical']}/{c['n']} identical, {c['near_ties']} near-ties, {c['failed']} failed"
                             if sp else "   prefix: no speed-up figure (missing samples)")
            roof = ph.get("roofline") or {}
            if roof and not roof.get("reason"):
                bound = (roof.get("measured") or {}).get("bound") or (roof.get("spec") or {}).get("bound")
                lines.append(f"   {phase} ceiling at {roof['context_tokens']:.0f} tokens of context: decode "
                             f"{fmt_rate(roof['decode_tok_s'])} tok/s = {ceiling_text(roof)}; bound: {bound}")
            mem = ph.get("memory") or {}
            lines.append(f"   {phase} memory: peak RSS {fmt_bytes(mem.get('peak_rss_bytes'))}"
                         + (f", engine {_engine_mem(mem['engine'])}" if mem.get("engine") else ""))
        kv = m["memory"]["kv_cache"]
        lines.append(f"   KV cache: {fmt_bytes(kv['bytes_per_token'])}/token, {fmt_bytes(kv['computed_bytes'])} computed "
                     f"at {kv['context_tokens']} tokens, {fmt_bytes(kv['measured_bytes'])} measured")
        for f in m.get("failures", []):
            lines.append(f"   FAILURE {f.get('phase')}: {f.get('status')}: {f.get('reason')}")
    return safe_lines("\n".join(lines))


def _metrics_line(summ: dict) -> str:
    def p(metric, fmt):
        d = summ.get(metric) or {}
        return f"{fmt(d.get('median'))} (p95 {fmt(d.get('p95'))})"

    return (f"TTFT {p('ttft_s', fmt_s)}, prefill {p('prefill_tok_s', fmt_rate)} tok/s, decode "
            f"{p('decode_tok_s', fmt_rate)} tok/s, e2e {p('e2e_tok_s', fmt_rate)} tok/s, ITL p50 "
            f"{fmt_s(dig(summ, 'itl_s', 'median'))} p99 {fmt_s(dig(summ, 'itl_s', 'p99'))} max "
            f"{fmt_s(dig(summ, 'itl_s', 'max'))}; n={dig(summ, 'ttft_s', 'n')}, failures {dig(summ, 'ttft_s', 'failures')}")


def _engine_mem(mem: dict) -> str:
    return ", ".join(f"{k.removeprefix('mlx_').removesuffix('_bytes')} {fmt_bytes(v)}" for k, v in mem.items())


# -- compare -------------------------------------------------------------------------------
def clean(text) -> str:
    """Strip control characters (terminal escape sequences) from text that came from a log."""
    return "".join(ch for ch in str(text) if ch.isprintable())


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
        dec = "baseline" if r["baseline"] else f"{_x(r['ratios']['decode'])} {calls['decode']['call']}"
        ttft = "baseline" if r["baseline"] else f"{_x(r['ratios']['ttft'])} {calls['ttft']['call']}"
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
