"""What a run log gives the results database (store/database.py, `macprof collect`): its
machine, each model's files, the run's conditions, and one row per model and phase or sweep case
with its lengths, figures and the conditions it ran under. Pure: a RunLog in, plain dicts keyed by
the database's column names out; every figure is one the log already holds (the summaries'
medians, the ceilings, the headline's memory and energy), never computed again here.

Which phases give rows: each case of a sweep (grid, depth, batch, and bench's llama-bench tests:
a pp test its prefill, a tg test its decode against the ceiling at its context), and each phase
``ROWS`` names: cold (its time to first token from launch), warm, prefix (the reuse half, which
its ceiling is computed on), each k of speculative (macprof's loop, and the engine's own as
``native-k<k>``), quality and tasks. ``NO_ROWS`` names the others and why: a phase of the
registry is in one or the other (tests/test_results_db.py holds it so).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from macprof.analyse.compare import thermal_state_of
from macprof.analyse.headline import case_energy, energy_figures, engine_version, memory_figures
from macprof.analyse.quality import quality_figures
from macprof.analyse.tasks import tasks_figures
from macprof.model.log import Machine, ModelResult, RunLog
from macprof.model.phases import Ceiling, ColdPhase, Metrics, PhaseMemory, PrefixPhase, SweepCase, WarmPhase
from macprof.model.quality import QualityPhase
from macprof.model.speculative import SpeculativeCase, SpeculativePhase
from macprof.model.tasks import TasksPhase
from macprof.model.telemetry import PhaseTelemetry
from macprof.phases import NAMES, SWEEPS

MACHINE_FACTS = ("chip", "gpu_cores", "cpu_model", "arch", "cores_logical", "cores_physical", "cores_performance",
                 "cores_efficiency", "memory_bytes", "os", "os_version")


def machine_row(log: RunLog) -> dict:
    """The machine as the log describes it. Two logs' machines are one where every fact agrees:
    the host id is left out (`share` removes it), so two Macs of one configuration are one
    machine (the log's host id still tells them apart)."""
    mach = log.machine or Machine()
    facts = {k: getattr(mach, k) for k in MACHINE_FACTS}
    return {"key": json.dumps(list(facts.values())), **facts}


def model_row(m: ModelResult) -> dict:
    """A model's files: one model wherever the same files ran, whatever a log named it."""
    ident = m.identity
    files = sorted(ident.files, key=lambda f: f.name)
    if len(files) == 1:
        sha: str | None = files[0].sha256
    elif files:
        manifest = "".join(f"{f.sha256}  {f.name}\n" for f in files)
        sha = hashlib.sha256(manifest.encode()).hexdigest()
    else:
        sha = None
    return {"key": sha if sha else f"served:{ident.name}",
            "file_name": max(files, key=lambda f: f.bytes).name if files else None,
            "sha256": sha, "files": len(files), "total_bytes": ident.total_bytes,
            "quant": ident.quant, "architecture": ident.architecture,
            "n_params": ident.n_params}


def log_row(log: RunLog) -> dict:
    """The run's own columns: when, which macprof, the conditions at its start, its bandwidth."""
    mach = log.machine or Machine()
    bw = log.bandwidth
    spec, measured = (bw.spec, bw.measured) if bw else (None, None)
    return {"host_id": mach.host_id, "started_utc": log.started_utc, "ended_utc": log.ended_utc,
            "complete": log.complete, "tool_version": log.tool_version,
            "log_schema_version": log.migrated_from or log.schema_version,
            "power_source": mach.power_source, "low_power_mode": mach.low_power_mode, "power_mode": mach.power_mode,
            "thermal_state": mach.thermal_state, "spec_bandwidth_gbs": spec.gbs if spec else None,
            "measured_bandwidth_gbs": measured.gbs if measured else None,
            "measured_tflops": measured.tflops if measured else None}


def result_rows(log: RunLog) -> list[dict]:
    """One row per model and phase or case, in run order; ``model_index`` says which model."""
    out = []
    for index, m in enumerate(log.models):
        common = _model_common(index, m, log)
        for row in _phase_rows(m, log):
            out.append({**_BLANK, **common, **row})
    return out


# every figure a row may lack, and the conditions: a phase's row fills in those it has
_BLANK = dict.fromkeys((
    "prompt_tokens", "gen_tokens", "depth_tokens", "batch", "requests", "failures", "ttft_s", "prefill_tok_s",
    "decode_tok_s", "aggregate_tok_s", "spec_ceiling_tok_s", "spec_efficiency", "measured_ceiling_tok_s",
    "measured_efficiency", "bound", "ceiling_reason", "peak_memory_bytes", "memory_figure", "prefill_j_per_token",
    "decode_j_per_token", "avg_w", "energy_reason", "accuracy", "accuracy_first", "kld_mean", "ppl", "speedup",
    "power_source", "thermal_pressure", "thermal_state", "throttled"))


def _model_common(index: int, m: ModelResult, log: RunLog) -> dict:
    threads = (m.engine_versions or {}).get("threads")
    return {"model_index": index, "model_name": m.identity.name, "engine": m.identity.engine,
            "engine_version": engine_version(m, log.software), "kv_type": m.settings.kv_type or "f16",
            "threads": threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
            "power_source": (log.machine or Machine()).power_source}


def _phase_rows(m: ModelResult, log: RunLog) -> list[dict]:
    """The model's rows, phase by phase in the registry's order."""
    out = []
    for name in NAMES:
        record = m.phases.get(name)
        if record is None or name in NO_ROWS:
            continue
        if name in SWEEPS:
            shared = {**_memory(record.memory, m.identity.engine),
                      **_conditions(record.telemetry, thermal_state_of(record))}
            out += [{"phase": name, **shared, **_case(c)} for c in record.cases]
        else:
            out += [{"phase": name, **row} for row in ROWS[name](m, record)]
    return out


def _cold(m: ModelResult, cold: ColdPhase) -> list[dict]:
    s, t = m.settings, cold.summary.time_to_first_token_s
    return [{"case_id": "", **_status(t.n), "prompt_tokens": s.prompt_tokens, "gen_tokens": s.gen_tokens,
             "depth_tokens": 0, "batch": 1, "requests": t.n, "failures": sum(tr.status == "failed" for tr in cold.trials),
             "ttft_s": t.median}]


def _warm(m: ModelResult, w: WarmPhase) -> list[dict]:
    return [_resident(m, w, w.summary, depth=0)]


def _prefix(m: ModelResult, p: PrefixPhase) -> list[dict]:
    return [_resident(m, p, p.summary.reuse, depth=m.settings.prefix_tokens)]  # the reuse half


def _resident(m: ModelResult, phase: WarmPhase | PrefixPhase, summary: Metrics, depth: int) -> dict:
    s = m.settings
    return {"case_id": "", "prompt_tokens": s.prompt_tokens, "gen_tokens": s.gen_tokens, "depth_tokens": depth,
            "batch": 1, **_metrics(summary), **_ceiling(phase.roofline), **_memory(phase.memory, m.identity.engine),
            **_conditions(phase.telemetry, thermal_state_of(phase)), **_energy(energy_figures(phase.telemetry))}


def _speculative_rows(m: ModelResult, sp: SpeculativePhase) -> list[dict]:
    s = m.settings
    cases = [(c.id, c) for c in sp.cases] + [(f"native-{c.id}", c) for c in sp.native or ()]
    return [{"case_id": cid, **_speculative(c), "prompt_tokens": s.prompt_tokens, "gen_tokens": s.gen_tokens,
             "depth_tokens": 0, "batch": 1, **_memory(sp.memory, m.identity.engine)} for cid, c in cases]


def _quality(m: ModelResult, q: QualityPhase) -> list[dict]:
    figures = quality_figures(m)
    return [{"case_id": "", **_status(len(q.chunks)), "requests": len(q.chunks), "failures": len(q.failures),
             "kld_mean": figures["kld_mean"], "ppl": figures["ppl"], **_memory(q.memory, m.identity.engine)}]


def _tasks(m: ModelResult, t: TasksPhase) -> list[dict]:
    tf = tasks_figures(m)
    return [{"case_id": "", **_status(tf["tasks_n"] or 0), "requests": tf["tasks_n"], "failures": len(t.failures),
             "accuracy": tf["accuracy"], "accuracy_first": tf["accuracy_first"], **_memory(t.memory, m.identity.engine)}]


# a phase that is no sweep: its rows ((model, its record) -> rows less "phase"), or why it gives none
ROWS: dict[str, Callable[[ModelResult, Any], list[dict]]] = {"cold": _cold, "warm": _warm, "prefix": _prefix, "quality": _quality, "speculative": _speculative_rows,
        "tasks": _tasks}
NO_ROWS = {"concurrency": "a server's load levels: figures of another kind than these columns",
           "conversation": "a chat's turns and what its cache reused: figures of another kind than these columns"}


def _status(n: int) -> dict:
    return {"status": "ok" if n else "failed"}


def _metrics(summary: Metrics) -> dict:
    d = summary.decode_tok_s
    # a request that generates no token (bench's pp test) gives a prefill and no time to a first token
    n, failures = max((summary.ttft_s.n, summary.ttft_s.failures), (summary.prefill_tok_s.n, summary.prefill_tok_s.failures))
    return {**_status(n), "requests": n, "failures": failures,
            "ttft_s": summary.ttft_s.median, "prefill_tok_s": summary.prefill_tok_s.median, "decode_tok_s": d.median,
            "aggregate_tok_s": summary.aggregate_decode_tok_s.median if summary.aggregate_decode_tok_s else None}


def _speculative(c: SpeculativeCase) -> dict:
    measured = [r.request for r in c.requests if r.request.kind == "measured"]
    ok = sum(r.status == "ok" for r in measured)
    return {**_status(ok if c.decode_tok_s is not None else 0), "requests": ok, "failures": len(measured) - ok,
            "decode_tok_s": c.decode_tok_s, "speedup": c.speedup.value if c.speedup else None}


def _case(c: SweepCase) -> dict:
    return {"case_id": c.id, "prompt_tokens": c.prompt_tokens, "gen_tokens": c.gen_tokens,
            "depth_tokens": c.depth or 0, "batch": c.batch or 1, **_metrics(c.summary), "status": c.status,
            **(_ceiling(c.roofline) if c.gen_tokens else {"ceiling_reason": NO_DECODE}), **_energy(case_energy(c))}


NO_DECODE = "a pp test: no token generated, so no decode to hold to a ceiling"


def _ceiling(roof: Ceiling | None) -> dict:
    """The published and the measured side's ceiling and efficiency at the row's context."""
    if roof is None:
        return {"ceiling_reason": "no ceiling in this log"}
    spec, measured = roof.spec, roof.measured
    reasons = [r for r in (roof.reason, spec and spec.reason, measured and measured.reason) if r]
    return {"spec_ceiling_tok_s": spec.ceiling_tok_s if spec else None,
            "spec_efficiency": spec.efficiency if spec else None,
            "measured_ceiling_tok_s": measured.ceiling_tok_s if measured else None,
            "measured_efficiency": measured.efficiency if measured else None,
            "bound": (measured and measured.bound) or (spec and spec.bound) or None,
            "ceiling_reason": "; ".join(dict.fromkeys(reasons)) or None}


def _memory(memory: PhaseMemory | None, engine: str) -> dict:
    mem = memory_figures([memory] if memory else [], engine)
    return {"peak_memory_bytes": mem["peak_memory_bytes"], "memory_figure": mem["memory_figure"]}


def _energy(figures: dict) -> dict:
    return {k: figures[k] for k in ("prefill_j_per_token", "decode_j_per_token", "avg_w", "energy_reason")}


def _conditions(tel: PhaseTelemetry | None, thermal_state: str | None) -> dict:
    """What the phase ran under: its telemetry's power source and highest thermal pressure, and
    the worse NSProcessInfo state at its boundaries; the run's power source where no telemetry
    read one (the caller's default)."""
    out: dict = {"thermal_state": thermal_state}
    if tel is not None:
        e = energy_figures(tel)
        out["thermal_pressure"] = e["thermal_pressure"]
        out["throttled"] = tel.throttle.throttled
        if e["phase_power_source"]:
            out["power_source"] = e["phase_power_source"]
    return out
