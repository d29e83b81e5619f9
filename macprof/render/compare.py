"""The comparison table (`macprof compare`): its content; each format is an exporter's
(macprof/render/exporters.py)."""

from __future__ import annotations

from macprof.model.bounds import INVALID, share_ok
from macprof.render.energy import ENERGY_FIELDS, fmt_j
from macprof.render.exporters import Column, Table, cell, export
from macprof.render.memory import MEMORY_FIELDS, memory_column
from macprof.render.report import columns_of, fields_of, notes_of
from macprof.render.text import fmt_bytes, fmt_pct, fmt_rate, fmt_s, fmt_x


def compare_rows(result: dict) -> list[dict]:
    """One flat row of raw values per compared model; field names carry their units."""
    ttft = _ttft_field(result)
    rows = []
    for r in result["rows"]:
        row = {"model": r["model"], "run": r["source"], "engine": r["engine"], "quant": r["quant"],
               "file_bytes": r["file_bytes"], "cold_ttft_s": r["cold_ttft_s"], ttft: r["warm_ttft_s"],
               "prefix_ttft_s": r["prefix_ttft_s"], "decode_tok_s": r["decode_tok_s"], "efficiency": r["efficiency"],
               "peak_rss_bytes": r["peak_rss_bytes"], "baseline": r["baseline"],
               "same_model_baseline": r.get("same_model_baseline"),
               "memory_vs_base": r["ratios"]["memory"], "not_comparable": r["not_comparable"],
               **{k: r.get(k) for k in ENERGY_FIELDS}, **{k: r.get(k) for k in MEMORY_FIELDS},
               **{k: r.get(k) for k in fields_of()},
               "time_per_correct_vs_base": r["ratios"].get("time_per_correct")}
        acc = r["calls"].get("accuracy") or {}
        row.update({"accuracy_vs_base": r["ratios"].get("accuracy"), "accuracy_call": acc.get("call"),
                    "accuracy_why": acc.get("why"), "accuracy_p": acc.get("p"), "accuracy_pairs": acc.get("pairs"),
                    "accuracy_only_base": acc.get("only_base"), "accuracy_only_this": acc.get("only_this")})
        for metric in ("decode", "ttft"):
            call = r["calls"].get(metric) or {}
            ci = (r.get("intervals") or {}).get(metric) or {}
            row.update({f"{metric}_vs_base": r["ratios"][metric], f"{metric}_call": call.get("call"),
                        f"{metric}_why": call.get("why"), f"{metric}_p": call.get("p"),
                        f"{metric}_sizes": call.get("sizes"), f"{metric}_min_reps_per_side": call.get("min_reps_per_side"),
                        f"{metric}_ci_low": ci.get("low"), f"{metric}_ci_high": ci.get("high")})
        rows.append(row)
    return rows


def _ttft_field(result: dict) -> str:
    """With --case, the TTFT is that sweep case's, not the warm phase's: named so."""
    return "case_ttft_s" if result.get("case") else "warm_ttft_s"


def _against_base(metric: str):
    """The ratio and the test's call, with why it cannot tell when the sizes cannot reach alpha."""
    def show(r: dict) -> str:
        if r["baseline"]:
            return "baseline"
        why = r[f"{metric}_why"]
        return f"{fmt_x(r[f'{metric}_vs_base'])} {r[f'{metric}_call']}" + (f": {why}" if why else "")
    return show


def _interval(metric: str):
    def show(r: dict) -> str:
        low, high = r[f"{metric}_ci_low"], r[f"{metric}_ci_high"]
        return "" if r["baseline"] else "-" if low is None else f"{fmt_x(low)}..{fmt_x(high)}"
    return show


def _accuracy_against_base(r: dict) -> str:
    if r["baseline"]:
        return "baseline"
    if r["accuracy_call"] is None:
        return "-"
    diff, mine = r["accuracy_vs_base"], r.get("accuracy")
    # a difference of two accuracies, each a proportion (the base's is this row's less the difference)
    possible = diff is None or (mine is not None and share_ok(mine) and share_ok(mine - diff))
    head = "" if diff is None else f"{100 * diff:+.0f} pts " if possible else f"{INVALID} "
    tail = f"p={r['accuracy_p']:.2g}, {r['accuracy_only_base']} vs {r['accuracy_only_this']} of {r['accuracy_pairs']}"
    why = r["accuracy_why"]
    return f"{head}{r['accuracy_call']} ({why or tail})"


def _flags(r: dict) -> str:
    return "NOT COMPARABLE: " + ", ".join(r["not_comparable"]) if r["not_comparable"] else ""


def comparison(result: dict) -> Table:
    case, ttft = result.get("case"), _ttft_field(result)
    energy = any(r.get("has_telemetry") for r in result["rows"])  # logs from before telemetry: as they were
    tasks = any(r.get("has_tasks") for r in result["rows"])
    level = f"{result['confidence']:.0%}"
    rows = tuple(compare_rows(result))
    columns = (
        Column("model", cell("model")), Column("run", cell("run")), Column("engine", cell("engine")),
        Column("quant", lambda r: r["quant"] or "-"), Column("size", cell("file_bytes", fmt_bytes)),
        Column("cold TTFT", cell("cold_ttft_s", fmt_s)), Column("case TTFT" if case else "warm TTFT", cell(ttft, fmt_s)),
        Column("prefix TTFT", cell("prefix_ttft_s", fmt_s)), Column("decode tok/s", cell("decode_tok_s", fmt_rate)),
        Column("of ceiling", cell("efficiency", fmt_pct)), memory_column(rows),
        *([Column("decode J/tok", cell("decode_j_per_token", fmt_j))] if energy else []),
        *columns_of(result["rows"]),  # each phase's own (render/report.py); none where no row has the phase
        *((Column("accuracy vs base", _accuracy_against_base),) if tasks else ()),
        Column("decode vs base", _against_base("decode")), Column(f"decode {level} CI", _interval("decode")),
        Column("TTFT vs base", _against_base("ttft")), Column(f"TTFT {level} CI", _interval("ttft")),
        Column("flags", _flags),
    )
    fields = ("model", "run", "engine", "quant", "file_bytes", "cold_ttft_s", ttft, "prefix_ttft_s", "decode_tok_s",
              "efficiency", "peak_rss_bytes", "baseline", "decode_vs_base", "decode_call", "decode_why", "decode_p",
              "decode_sizes", "decode_min_reps_per_side", "decode_ci_low", "decode_ci_high", "ttft_vs_base", "ttft_call",
              "ttft_why", "ttft_p", "ttft_sizes", "ttft_min_reps_per_side", "ttft_ci_low", "ttft_ci_high", "memory_vs_base",
              "same_model_baseline", "not_comparable", *ENERGY_FIELDS, *MEMORY_FIELDS, *fields_of(),
              "time_per_correct_vs_base", "accuracy_vs_base", "accuracy_call", "accuracy_why", "accuracy_p",
              "accuracy_pairs", "accuracy_only_base", "accuracy_only_this")
    notes: tuple[str, ...] = (f"baseline: {result['baseline']}", f"significance: {result['test']}", f"CI: {result['interval']}")
    notes += notes_of(result["rows"])
    if tasks:
        notes += (result.get("accuracy_test") or "",)
    if case:
        notes += (f"TTFT, decode and memory are those of the sweep case {case} (decode per sequence in a batch case)",)
    return Table("macprof compare", columns, rows, fields, notes,
                 {"baseline": result["baseline"], "test": result["test"], "interval": result["interval"],
                  "confidence": result["confidence"], "min_reps_per_side": result.get("min_reps_per_side"), "case": case})


def compare_table(result: dict, fmt: str = "table") -> str:
    return export(comparison(result), fmt)
