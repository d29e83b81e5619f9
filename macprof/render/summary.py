"""The end-of-run summary: one row per model, the sweep tables, stability warnings.
Pure functions of the run log; no measurement, no I/O."""

from __future__ import annotations

from macprof.analyse.headline import headline
from macprof.cases import SWEEP_PHASES
from macprof.measure.stats import UNSTABLE, median_known, relative_spread
from macprof.model.log import Machine, RunLog
from macprof.model.phases import Summary
from macprof.render.sweeps import sweep_tables
from macprof.render.exporters import Column, Table, cell, to_text
from macprof.render.report import sections
from macprof.render.energy import ENERGY_FIELDS, energy_lines, fmt_j, throttle_warnings
from macprof.render.memory import MEMORY_FIELDS, memory_column
from macprof.render.serving import length_warnings
from macprof.render.text import ceiling_text, clean, fmt_bytes, fmt_rate, fmt_s, clean_lines

FIRST_SLOW = 1.5  # first measured request this much slower than the median of the others


def summary_rows(log: RunLog) -> list[dict]:
    rows = []
    for m in log.models:
        ph = m.phases
        trials = [t for t in (ph.cold.trials if ph.cold else ()) if t.status == "ok"]
        states = sorted({t.residency.label.split(" ")[0] for t in trials if t.residency})
        rows.append({
            **headline(m),
            "cold_state": "/".join(states) or None,
            "prefix_speedup": ph.prefix.summary.ttft_speedup if ph.prefix else None,
            "prefix_reuse_not_possible": ph.prefix.reuse_not_possible if ph.prefix else None,
            "itl_p99_s": ph.warm.summary.itl_s.p99 if ph.warm else None,
            "ceiling": ceiling_text(ph.warm.roofline if ph.warm else None),
            "ceiling_measured_tok_s": _ceiling(ph.warm.roofline.measured if ph.warm and ph.warm.roofline else None),
            "ceiling_spec_tok_s": _ceiling(ph.warm.roofline.spec if ph.warm and ph.warm.roofline else None),
            "failures": len(m.failures),
        })
    return rows


def _ceiling(side) -> float | None:
    return side.ceiling_tok_s if side else None


def _cold(r: dict) -> str:
    return "-" if r["cold_ttft_s"] is None else f"{fmt_s(r['cold_ttft_s'])} ({r['cold_state']})"


def _prefix(r: dict) -> str:
    if r.get("prefix_reuse_not_possible"):
        return fmt_s(r["prefix_ttft_s"]) + " (no reuse)"
    return fmt_s(r["prefix_ttft_s"]) + (f" (x{r['prefix_speedup']:.1f})" if r["prefix_speedup"] else "")


SUMMARY_COLUMNS = (
    Column("model", cell("model")), Column("engine", cell("engine")), Column("quant", lambda r: r["quant"] or "-"),
    Column("cold start", _cold), Column("warm TTFT p50", cell("warm_ttft_s", fmt_s)),
    Column("prefix TTFT p50", _prefix), Column("decode tok/s p50", cell("decode_tok_s", fmt_rate)),
    Column("= of ceiling", cell("ceiling")), Column("ITL p99", cell("itl_p99_s", fmt_s)),
    Column("peak RSS", cell("peak_rss_bytes", fmt_bytes)), Column("decode J/tok", cell("decode_j_per_token", fmt_j)),
    Column("failures", cell("failures")),
)
# what JSON and CSV carry: raw values, units in the names (the ceiling text is shown, its numbers carried)
SUMMARY_FIELDS = ("model", "engine", "quant", "file_bytes", "cold_ttft_s", "cold_state", "warm_ttft_s",
                  "prefix_ttft_s", "prefix_speedup", "decode_tok_s", "efficiency", "ceiling_measured_tok_s",
                  "ceiling_spec_tok_s", "itl_p99_s", "peak_rss_bytes", "failures", *ENERGY_FIELDS, *MEMORY_FIELDS)


def summary_table(log: RunLog) -> Table:
    rows = tuple(summary_rows(log))
    # a log from before telemetry has no energy to show: its table stays as it was
    columns = SUMMARY_COLUMNS if any(r["has_telemetry"] for r in rows) else \
        tuple(c for c in SUMMARY_COLUMNS if c.name != "decode J/tok")
    # the memory column is named after its figure: the footprint on macOS, RSS elsewhere
    columns = tuple(memory_column(rows) if c.name == "peak RSS" else c for c in columns)
    return Table("summary", columns, rows, SUMMARY_FIELDS)  # JSON and CSV always carry the energy fields


def _spread(s: Summary | None) -> float | None:
    return relative_spread(s.to_json()) if s else None


def _bandwidth_warnings(log: RunLog) -> list[str]:
    """The measured bandwidth every measured ceiling divides by: one that varied between its
    repetitions (a probe run while other work competed: the run's own, or one cached before such a
    probe stopped being kept), and the decode figures above it, which such a figure makes (or a
    model that fits the chip's caches)."""
    bw = log.bandwidth.measured if log.bandwidth else None
    if bw is None or not bw.gbs:
        return []
    when = f"measured {bw.utc}" + (", cached" if bw.cached else "") if bw.utc else "measured"
    out = []
    spread = relative_spread({"median": bw.gbs, "stdev": bw.stdev_gbs})
    if spread is not None and spread > UNSTABLE:
        out.append(f"the measured bandwidth {bw.gbs:.1f} GB/s ({when}) varied by {spread:.0%} between its "
                   f"repetitions: the measured ceilings are unsure; re-measure on a quiet machine (`macprof bandwidth`)")
    above = [m.identity.name for m in log.models
             if m.phases.warm and m.phases.warm.roofline and m.phases.warm.roofline.measured
             and (m.phases.warm.roofline.measured.efficiency or 0) > 1]
    if above:
        out.append(f"warm decode above the measured-bandwidth ceiling ({bw.gbs:.1f} GB/s, {when}) for "
                   f"{', '.join(above)}: a model small enough for the chip's caches, or a bandwidth measured low "
                   f"(re-measure on a quiet machine: `macprof bandwidth`)")
    return out


def warnings(log: RunLog) -> list[str]:
    """Where the numbers should not be trusted as they stand, pyperf / hyperfine style."""
    out = []
    mach = log.machine or Machine()
    if mach.power_source == "battery":
        out.append("the machine ran on battery: performance may be capped; plug in for comparable figures")
    if mach.low_power_mode:
        out.append("low-power mode was on: figures are not comparable with a normal run")
    if mach.thermal_state not in (None, "nominal"):
        out.append(f"thermal state was {mach.thermal_state}: the chip may have been throttled")
    start, end = log.memory.start, log.memory.end
    if start and end and start.swap_used_bytes is not None and end.swap_used_bytes is not None \
            and end.swap_used_bytes - start.swap_used_bytes > 64 * 2**20:
        out.append(f"swap grew by {fmt_bytes(end.swap_used_bytes - start.swap_used_bytes)} during the run: "
                   f"memory pressure distorts timings")
    if not log.complete:
        out.append("the run is incomplete (interrupted or crashed): some models or phases are missing")
    out += _bandwidth_warnings(log)
    for m in log.models:
        name, ph = m.identity.name, m.phases
        for label, summ in (("warm", ph.warm.summary if ph.warm else None),
                            ("prefix (reuse)", ph.prefix.summary.reuse if ph.prefix else None)):
            if not summ:
                continue
            for metric, what in ((summ.decode_tok_s, "decode tok/s"), (summ.ttft_s, "TTFT")):
                spread = _spread(metric)
                if spread is not None and spread > UNSTABLE:
                    out.append(f"{name}: {label} {what} varies by {spread:.0%} of its median (stdev/median > "
                               f"{UNSTABLE:.0%}): close other programs, add --reps or --delay")
        for phase in SWEEP_PHASES:
            sweep = ph.sweep(phase)
            cases = sweep.cases if sweep else ()
            noisy = [c.id for c in cases if (_spread(c.summary.decode_tok_s) or 0) > UNSTABLE]
            if noisy:
                out.append(f"{name}: {phase} decode tok/s varies by more than {UNSTABLE:.0%} of its median in "
                           f"{', '.join(noisy)}: close other programs, add --reps or --delay")
            checks = [c.id for c in cases if c.check and c.check.failed]
            if checks:
                out.append(f"{name}: batched decoding changed the output beyond a near-tie in {', '.join(checks)}")
        reqs = [r for r in (ph.warm.requests if ph.warm else ()) if r.kind == "measured" and r.status == "ok"]
        if len(reqs) >= 3:
            first, med = reqs[0].total_s, median_known(r.total_s for r in reqs[1:])
            if med and first is not None and first > FIRST_SLOW * med:
                out.append(f"{name}: the first measured warm request was {first / med:.1f}x slower "
                           f"than the others: warm-up did not fully warm")
        drops = [t.drop_cache for t in (ph.cold.trials if ph.cold else ()) if t.drop_cache]
        if any(not d.dropped for d in drops):
            out.append(f"{name}: --drop-cache could not evict the model from the page cache ({drops[0].reason}): "
                       f"cold trials are labelled by their measured residency instead")
        out += _reuse_warnings(name, ph)
        out += length_warnings(m)  # a server's requests of other lengths than asked (render/serving.py)
        prefix_checks = ph.prefix.summary.checks if ph.prefix else None
        if prefix_checks and prefix_checks.failed:
            out.append(f"{name}: prefix reuse changed the output in {prefix_checks.failed} of {prefix_checks.n} requests "
                       f"beyond a floating-point near-tie: the cached path is not equivalent")
        for r in ph.tasks.refusals if ph.tasks else ():  # the others ran: each refused task one line
            out.append(f"{name}: tasks: refused {r.reason}")
        for f in m.failures:
            case = f" {f.case}" if f.case else ""  # a sweep's case, a task: the phase went on after it
            out.append(f"{name}: {f.phase or 'load'}{case} failed ({f.status}): {f.reason}")
        out += throttle_warnings(m)
    return [clean(w) for w in out]  # one line each, whatever a name or an engine's message holds


def _reuse_warnings(name: str, ph) -> list[str]:
    """Where the engine's cache could not be cut back to a prefix (sliding-window, recurrent)."""
    out = []
    if ph.prefix and ph.prefix.reuse_not_possible:
        out.append(f"{name}: prefix reuse not possible for this model: {ph.prefix.reuse_not_possible}; "
                   f"its pairs were measured from an empty cache")
    for c in ph.depth.cases if ph.depth else ():
        if c.reuse_not_possible:
            out.append(f"{name}: depth {c.id}: the cache cannot be cut back to its fill: {c.reuse_not_possible}; "
                       f"the fill was recomputed, untimed, before each request")
    return out


def render_summary(log: RunLog, path: str | None = None) -> str:
    parts = [to_text(summary_table(log))]
    sweeps = sweep_tables(log)
    if sweeps:
        parts.append("\n" + sweeps)
    parts += ["\n" + sec.text() for sec in sections(log)]  # each phase's own table (render/report.py)
    from macprof.render.serving import overhead_lines

    overhead = overhead_lines(log)
    if overhead:
        parts.append("\nServer overhead:\n" + "\n".join(f"  {line}" for line in overhead))
    energy = energy_lines(log)
    if energy:
        parts.append("\n" + "\n".join(energy))
    warns = warnings(log)
    if warns:
        parts.append("\nWarnings:\n" + "\n".join(f"  ! {w}" for w in warns))
    if path:
        parts.append(f"\nrun log: {path}")
    return clean_lines("\n".join(parts))


