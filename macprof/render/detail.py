"""`macprof show`: every phase of every model in detail."""

from __future__ import annotations

from macprof.model.log import Machine, ModelResult, RunLog
from macprof.model.resolved import word
from macprof.model.phases import Metrics, PhaseMemory, PrefixPhase, PrefixSummary, WarmPhase
from macprof.render.energy import cold_energy, phase_energy
from macprof.render.distributed import group_lines
from macprof.render.report import detail_lines
from macprof.render.serving import server_lines
from macprof.render.text import ceiling_text, clean, fmt_bytes, fmt_of, fmt_rate, fmt_s, fmt_signed_s


def _settings_lines(m: ModelResult) -> list[str]:
    """The engine's settings as it resolved them, what was asked beside each one that differs,
    and each unknown one with why (models[].engine_settings; absent from older logs)."""
    if not m.engine_settings:
        return []
    parts, unknown = [], []
    for name, r in m.engine_settings.items():
        if r.value is None:
            unknown.append(f"{name} ({r.unknown})")
        else:
            asked = f" (asked {word(r.asked)})" if r.asked is not None and r.asked != r.value else ""
            parts.append(f"{name} {word(r.value)}{asked}")
    out = ["   engine settings as resolved: " + ", ".join(parts)]
    return out + (["   engine settings unknown: " + "; ".join(unknown)] if unknown else [])


def render_detail(log: RunLog) -> str:
    """Per-phase detail for `macprof show`."""
    lines = []
    mach = log.machine or Machine()
    lines.append(f"macprof {log.tool_version} run of {log.started_utc} "
                 f"({'complete' if log.complete else 'INCOMPLETE'}) on {mach.chip or mach.cpu_model}, "
                 f"{mach.os} {mach.os_version}, {fmt_bytes(mach.memory_bytes)}")
    for m in log.models:
        ident = m.identity
        lines.append("")
        lines.append(f"== {ident.name}  ({ident.engine}, {ident.quant}, "
                     f"{fmt_bytes(ident.total_bytes)}, {ident.n_params or '?'} parameters)")
        s = m.settings
        lines.append(f"   prompt {s.prompt_tokens} / gen {s.gen_tokens} / prefix {s.prefix_tokens} tokens, "
                     f"reps {s.reps}, cold trials {s.cold_trials}, threads {s.threads or 'engine default'}")
        lines += _settings_lines(m)
        lines += server_lines(m)  # a server's: which, whose memory, its timings beside the client's
        lines += _cold_lines(m.phases.cold)
        for phase, ph in (("warm", m.phases.warm), ("prefix", m.phases.prefix)):
            if not ph:
                continue
            summ = ph.summary
            if isinstance(summ, PrefixSummary):  # the prefix phase: with reuse, then without
                lines.append(f"   {phase}: " + _metrics_line(summ.reuse))
                lines.append("   prefix without reuse: " + _metrics_line(summ.noreuse))
                c = summ.checks
                sp, refused = summ.ttft_speedup, getattr(ph, "reuse_not_possible", None)
                lines.append(f"   prefix TTFT speed-up x{sp:.2f}; reused tokens p50 {_reused(summ.reused_tokens.median)}; "
                             f"output checks: {fmt_of(c.identical, c.n)} identical, {c.near_ties} near-ties, {c.failed} failed"
                             if sp else "   prefix: no speed-up figure ("
                             + (f"reuse not possible: {refused})" if refused else "missing samples)"))
            else:
                lines.append(f"   {phase}: " + _metrics_line(summ))
            roof = ph.roofline
            if roof and not roof.reason:
                bound = (roof.measured.bound if roof.measured else None) or (roof.spec.bound if roof.spec else None)
                lines.append(f"   {phase} ceiling at {roof.context_tokens:.0f} tokens of context: decode "
                             f"{fmt_rate(roof.decode_tok_s)} tok/s = {ceiling_text(roof)}; bound: {bound}")
            lines += _conditions(phase, ph)
        lines += detail_lines(m.phases)  # each phase's own lines (render/report.py)
        kv = m.memory.kv_cache
        lines.append(f"   KV cache: {fmt_bytes(kv.bytes_per_token)}/token, {fmt_bytes(kv.computed_bytes)} computed "
                     f"at {kv.context_tokens} tokens, {fmt_bytes(kv.measured_bytes)} measured")
        if m.distributed:
            lines += group_lines(m.distributed)
        for f in m.failures:
            lines.append(f"   FAILURE {f.phase}{f' {f.case}' if f.case else ''}: {f.status}: {f.reason}")  # a case, a task
    return "\n".join(clean(line) for line in lines)  # each one line: a name's "\n" adds none


def _cold_lines(cold) -> list[str]:
    """One line per cold trial: its start-up split into its parts, its first request, its energy."""
    lines: list[str] = []
    for t in cold.trials if cold else ():
        if t.status != "ok":
            lines.append(f"   cold trial {t.index + 1}: {'interrupted (the run ended during it)' if t.status == 'interrupted' else 'FAILED'}")
            continue
        label = t.residency.label if t.residency else None
        lines.append(
            f"   cold trial {t.index + 1} [{label}]: ready {fmt_s(t.ready_s)} = "
            f"interpreter {fmt_s(t.interpreter_s)} + import {fmt_s(t.import_s)} + load "
            f"{fmt_s(t.model_load_s)} + tokenizer {fmt_s(t.tokenizer_load_s)}; first request "
            f"{fmt_signed_s(t.first_request_extra_s)} over a warm one; first token at {fmt_s(t.time_to_first_token_s)}"
            + (f" (macprof's own start-up, {fmt_s(t.harness_s)}, not counted)" if t.harness_s else "")
            + cold_energy(t.energy))
    return lines


def _reused(n) -> str:
    return "not reported" if n is None else str(n)


def _metrics_line(summ: Metrics) -> str:
    def p(metric, fmt):
        return f"{fmt(metric.median)} (p95 {fmt(metric.p95)})"

    return (f"TTFT {p(summ.ttft_s, fmt_s)}, prefill {p(summ.prefill_tok_s, fmt_rate)} tok/s, decode "
            f"{p(summ.decode_tok_s, fmt_rate)} tok/s, e2e {p(summ.e2e_tok_s, fmt_rate)} tok/s, ITL p50 "
            f"{fmt_s(summ.itl_s.median)} p99 {fmt_s(summ.itl_s.p99)} max "
            f"{fmt_s(summ.itl_s.max)}; n={summ.ttft_s.n}, failures {summ.ttft_s.failures}")


def _conditions(phase: str, ph: WarmPhase | PrefixPhase) -> list[str]:
    """The phase's memory, its energy (where the log has telemetry) and its thermal state at
    its boundaries (macOS)."""
    mem = ph.memory
    lines = [f"   {phase} memory: {_peak(mem)}" + (f", engine {_engine_mem(mem.engine)}" if mem and mem.engine else "")]
    if ph.has("telemetry"):  # logs from before telemetry: no line
        lines.append(f"   {phase} energy: {phase_energy(ph.telemetry)}")
    if ph.has("thermal_state_start") or ph.has("thermal_state_end"):  # macOS workers only
        lines.append(f"   {phase} thermal state (NSProcessInfo): {ph.thermal_state_start or '?'} at the start, "
                     f"{ph.thermal_state_end or '?'} at the end")
    return lines


def _peak(mem: PhaseMemory | None) -> str:
    """The footprint first where the log has one (macOS: it counts the GPU's buffers, RSS does not)."""
    rss = f"peak RSS {fmt_bytes(mem.peak_rss_bytes if mem else None)}"
    held = f", weights {mem.weights_held}" if mem is not None and mem.has("weights_held") else ""
    if mem is None or not mem.has("peak_footprint_bytes"):
        return rss + held
    if mem.has("weights_held") and mem.weights_held == "mapped":
        # the mapped weights' clean file pages are outside the footprint: added (analyse/headline.py)
        mapped = mem.mapped_resident_bytes if mem.has("mapped_resident_bytes") else None
        total = fmt_bytes(mem.peak_footprint_bytes + mapped) if mem.peak_footprint_bytes and mapped is not None else "?"
        return (f"peak footprint+mapped {total} = footprint {fmt_bytes(mem.peak_footprint_bytes)} + mapped weights "
                f"{fmt_bytes(mapped) if mapped is not None else 'unknown (not measured)'} resident ({rss})")
    return f"peak footprint {fmt_bytes(mem.peak_footprint_bytes)} ({rss}{held})"


def _engine_mem(mem: dict) -> str:
    return ", ".join(f"{k.removeprefix('mlx_').removesuffix('_bytes')} {fmt_bytes(v)}" for k, v in mem.items())
