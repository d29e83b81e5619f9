"""Tables of the sweep phases: grid, depth, batch and the batching trade-off line."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from macprof.model.log import ModelResult, RunLog
from macprof.model.phases import Sweep, SweepCase, TradeoffRow
from macprof.render.exporters import Table, text_table, to_text
from macprof.render.text import ceiling_text, clean, fmt_of, fmt_rate, fmt_s, fmt_x


def _case_status(c: SweepCase) -> str:
    if c.status == "ok":
        return "refilled: the cache cannot be cut back (see warnings)" if c.reuse_not_possible else ""
    return f"{c.status.upper()}: {c.reason}" if c.reason else c.status.upper()


def grid_table(cases: Sequence[SweepCase]) -> Table:
    headers = ["case", "prompt", "gen", "TTFT p50", "prefill tok/s", "decode tok/s p50", "e2e tok/s",
               "ITL p99", "= of ceiling at c", ""]
    rows = [[c.id, str(c.prompt_tokens), str(c.gen_tokens), fmt_s(c.summary.ttft_s.median),
             fmt_rate(c.summary.prefill_tok_s.median), fmt_rate(c.summary.decode_tok_s.median),
             fmt_rate(c.summary.e2e_tok_s.median), fmt_s(c.summary.itl_s.p99),
             ceiling_text(c.roofline), _case_status(c)] for c in cases]
    return text_table(headers, rows)


def depth_table(cases: Sequence[SweepCase]) -> Table:
    headers = ["depth", "context c", "fill (once)", "decode tok/s p50", "ITL p50", "ITL p99", "= of ceiling at c", ""]
    rows = [[str(c.depth), f"{c.context_tokens:.0f}", fmt_s(c.fill.fill_s if c.fill else None),
             fmt_rate(c.summary.decode_tok_s.median), fmt_s(c.summary.itl_s.median),
             fmt_s(c.summary.itl_s.p99), ceiling_text(c.roofline), _case_status(c)] for c in cases]
    return text_table(headers, rows)


def batch_table(phase: Sweep) -> Table:
    trade = {r.batch: r for r in phase.tradeoff or ()}
    headers = ["B", "aggregate tok/s p50", "vs B=1", "ITL p50", "vs B=1", "ITL p99", "predicted aggregate", "vs B=1",
               "predicted ITL", "vs B=1", "measured / predicted", "same tokens as B=1", ""]
    rows = []
    for c in phase.cases:
        t = (trade.get(c.batch) if c.batch is not None else None) or TradeoffRow()
        chk = c.check
        same = "-" if not chk else fmt_of(chk.identical, chk.n) + (f" ({chk.near_ties} near-tie)" if chk.near_ties else "") \
            + (f" {chk.failed} FAILED" if chk.failed else "")
        rows.append([str(c.batch), fmt_rate(t.aggregate_tok_s), fmt_x(t.aggregate_vs_b1), fmt_s(t.itl_p50_s),
                     fmt_x(t.itl_p50_vs_b1), fmt_s(t.itl_p99_s), fmt_rate(t.predicted_aggregate_tok_s),
                     fmt_x(t.predicted_aggregate_vs_b1), fmt_s(t.predicted_itl_s), fmt_x(t.predicted_itl_vs_b1),
                     f"{fmt_x(t.measured_over_predicted_aggregate)} agg, {fmt_x(t.measured_over_predicted_itl)} ITL"
                     if c.batch in trade else "-",
                     same, _case_status(c)])
    return text_table(headers, rows)


def tradeoff_line(phase: Sweep) -> str | None:
    """'B=8: aggregate x6.10, each user's ITL x1.24 (predicted x7.93, x1.01)' for the largest B."""
    rows = [r for r in phase.tradeoff or () if r.batch > 1 and r.aggregate_vs_b1]
    if not rows:
        return None
    r = rows[-1]
    pred = f" (predicted {fmt_x(r.predicted_aggregate_vs_b1)}, {fmt_x(r.predicted_itl_vs_b1)}, " \
           f"{r.predicted_with} bandwidth and FLOP/s, bound: {r.bound})" if r.predicted_aggregate_vs_b1 else ""
    return f"B={r.batch}: aggregate {fmt_x(r.aggregate_vs_b1)}, each user's ITL {fmt_x(r.itl_p50_vs_b1)}{pred}"


def bench_table(m: ModelResult) -> Table:
    """llama-bench's tests as it prints them (t/s: mean ± sample deviation over the repetitions, by
    its definitions: analyse/llamabench.py), beside macprof's own median of the same requests."""
    from macprof.analyse.llamabench import bench_tests

    found = {t.source: t for t in bench_tests(m)[0]}
    headers = ["test", "t/s (llama-bench)", "reps", "macprof p50", ""]
    rows = []
    for c in m.phases.bench.cases if m.phases.bench else ():
        t = found.get(f"bench {c.id}")
        own = (f"prefill {fmt_rate(c.summary.prefill_tok_s.median)} tok/s" if c.test == "pp" else
               f"decode {fmt_rate(c.summary.decode_tok_s.median)} tok/s (n - 1 after the first)")
        rows.append([c.id, f"{t.figures.avg_ts:.2f} ± {t.figures.stddev_ts:.2f}" if t else "-",
                     str(len(t.figures.samples_ns)) if t else "-", own, _case_status(c)])
    return text_table(headers, rows)


def sweep_sections(log: RunLog) -> list[tuple[Table, str | None]]:
    """Per model and sweep phase: its table, titled, and the line under it (the batching trade-off)."""
    out: list[tuple[Table, str | None]] = []
    for m in log.models:
        name, s, ph = m.identity.name, m.settings, m.phases
        if ph.grid:
            out.append((replace(grid_table(ph.grid.cases), title=f"{name}: grid (warm protocol per case, "
                                f"{s.reps} reps; c = prompt + gen/2)"), None))
        if ph.depth:
            out.append((replace(depth_table(ph.depth.cases), title=f"{name}: decode after d tokens already in "
                                f"the KV cache (gen {s.gen_tokens}, {s.reps} reps)"), None))
        if ph.batch:
            out.append((replace(batch_table(ph.batch), title=f"{name}: batched decoding, prompt "
                                f"{s.prompt_tokens} / gen {s.gen_tokens} per sequence, {s.reps} reps"),
                        tradeoff_line(ph.batch)))
        if ph.bench:
            out.append((replace(bench_table(m), title=f"{name}: llama-bench's tests, each from an empty cache "
                                f"({s.reps} reps)"), None))
        if ph.concurrency:
            from macprof.render.serving import concurrency_table, slo_text

            out.append((replace(concurrency_table(ph.concurrency), title=f"{name}: server load, prompt "
                                f"{s.prompt_tokens} / gen {s.gen_tokens} per request; goodput: {slo_text(ph.concurrency)}"),
                        None))
    return out


def sweep_tables(log: RunLog) -> str:
    return "\n\n".join(f"{clean(table.title)}\n{to_text(table)}" + (f"\n  {clean(line)}" if line else "")
                       for table, line in sweep_sections(log))
