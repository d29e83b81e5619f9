"""`macprof show`: every phase of every model in detail."""

from __future__ import annotations

from macprof.model.log import Machine, RunLog
from macprof.model.phases import Metrics, PrefixSummary
from macprof.render.serving import server_lines
from macprof.render.text import ceiling_text, clean, fmt_bytes, fmt_rate, fmt_s, fmt_signed_s


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
        lines.append(f"== {ident.name}  ({ident.engine}, {ident.quant_declared or ident.quant_label}, "
                     f"{fmt_bytes(ident.total_bytes)}, {ident.n_params or '?'} parameters)")
        s = m.settings
        lines.append(f"   prompt {s.prompt_tokens} / gen {s.gen_tokens} / prefix {s.prefix_tokens} tokens, "
                     f"reps {s.reps}, cold trials {s.cold_trials}, threads {s.threads or 'engine default'}")
        lines += server_lines(m)  # a server's: which, whose memory, its timings beside the client's
        cold = m.phases.cold
        if cold:
            for t in cold.trials:
                if t.status != "ok":
                    lines.append(f"   cold trial {t.index + 1}: FAILED")
                    continue
                label = t.residency.label if t.residency else None
                lines.append(
                    f"   cold trial {t.index + 1} [{label}]: ready {fmt_s(t.ready_s)} = "
                    f"interpreter {fmt_s(t.interpreter_s)} + import {fmt_s(t.import_s)} + load "
                    f"{fmt_s(t.model_load_s)} + tokenizer {fmt_s(t.tokenizer_load_s)}; first request "
                    f"{fmt_signed_s(t.first_request_extra_s)} over a warm one; first token at {fmt_s(t.time_to_first_token_s)}"
                    + (f" (macprof's own start-up, {fmt_s(t.harness_s)}, not counted)" if t.harness_s else ""))
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
                             f"output checks: {c.identical}/{c.n} identical, {c.near_ties} near-ties, {c.failed} failed"
                             if sp else "   prefix: no speed-up figure ("
                             + (f"reuse not possible: {refused})" if refused else "missing samples)"))
            else:
                lines.append(f"   {phase}: " + _metrics_line(summ))
            roof = ph.roofline
            if roof and not roof.reason:
                bound = (roof.measured.bound if roof.measured else None) or (roof.spec.bound if roof.spec else None)
                lines.append(f"   {phase} ceiling at {roof.context_tokens:.0f} tokens of context: decode "
                             f"{fmt_rate(roof.decode_tok_s)} tok/s = {ceiling_text(roof)}; bound: {bound}")
            mem = ph.memory
            lines.append(f"   {phase} memory: peak RSS {fmt_bytes(mem.peak_rss_bytes if mem else None)}"
                         + (f", engine {_engine_mem(mem.engine)}" if mem and mem.engine else ""))
        kv = m.memory.kv_cache
        lines.append(f"   KV cache: {fmt_bytes(kv.bytes_per_token)}/token, {fmt_bytes(kv.computed_bytes)} computed "
                     f"at {kv.context_tokens} tokens, {fmt_bytes(kv.measured_bytes)} measured")
        for f in m.failures:
            lines.append(f"   FAILURE {f.phase}: {f.status}: {f.reason}")
    return "\n".join(clean(line) for line in lines)  # each one line: a name's "\n" adds none


def _reused(n) -> str:
    return "not reported" if n is None else str(n)


def _metrics_line(summ: Metrics) -> str:
    def p(metric, fmt):
        return f"{fmt(metric.median)} (p95 {fmt(metric.p95)})"

    return (f"TTFT {p(summ.ttft_s, fmt_s)}, prefill {p(summ.prefill_tok_s, fmt_rate)} tok/s, decode "
            f"{p(summ.decode_tok_s, fmt_rate)} tok/s, e2e {p(summ.e2e_tok_s, fmt_rate)} tok/s, ITL p50 "
            f"{fmt_s(summ.itl_s.median)} p99 {fmt_s(summ.itl_s.p99)} max "
            f"{fmt_s(summ.itl_s.max)}; n={summ.ttft_s.n}, failures {summ.ttft_s.failures}")


def _engine_mem(mem: dict) -> str:
    return ", ".join(f"{k.removeprefix('mlx_').removesuffix('_bytes')} {fmt_bytes(v)}" for k, v in mem.items())
