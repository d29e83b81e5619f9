"""The run log built from the journal's events (pure: no I/O, no clock).

The journal is the source of truth: ``build`` turns its events into the run log, so a log
written at the end of a run, after Ctrl-C, or recovered from the journal of a killed run
(`macprof show JOURNAL`, `macprof run --resume JOURNAL`) come from the same code.
"""

from __future__ import annotations

from macprof.analyse.ceilings import ROOFLINE_DEFINITIONS, batch_prediction, batch_tradeoff, roofline_for
from macprof.cases import SWEEP_PHASES, mean_context, plan
from macprof.config import settings_from_dict
from macprof.errors import MacprofError
from macprof.measure import stats
from macprof.measure.timeline import DEFINITION_EXAMPLE, DEFINITIONS, derive
from macprof.model.definitions import NEAR_TIE_LOGITS, SCHEMA_VERSION

METRICS = ("ttft_s", "prefill_tok_s", "decode_tok_s", "e2e_tok_s")


# -- building the log (pure) -----------------------------------------------------------
def request_record(ev: dict) -> dict:
    """A raw request event plus the figures derived from its timestamps."""
    d = derive(ev["t0"], ev.get("t_tokenized"), ev.get("token_times") or [], ev.get("computed_prompt_tokens") or ev.get("prompt_tokens") or 0)
    rec = {k: ev.get(k) for k in ("index", "kind", "mode", "status", "error", "t0", "t_tokenized", "token_times",
                                    "tokens", "prompt_tokens", "reused_tokens", "computed_prompt_tokens",
                                    "cached_tokens_after", "kv_cache_bytes", "engine_memory")}
    rec.update({k: ev[k] for k in ("case", "batch", "cached_tokens_before") if k in ev})
    rec["n_tokens"] = d.n_tokens
    rec.update(ttft_s=d.ttft_s, prefill_tok_s=d.prefill_tok_s, decode_tok_s=d.decode_tok_s,
               e2e_tok_s=d.e2e_tok_s, tokenize_s=d.tokenize_s, total_s=d.total_s)
    itl = sorted(d.itl_s)
    rec["itl"] = None if not itl else {"mean": sum(itl) / len(itl), "p50": stats.percentile(itl, 50),
                                        "p95": stats.percentile(itl, 95), "p99": stats.percentile(itl, 99),
                                        "max": itl[-1]}
    return rec


def summarize_requests(requests: list[dict], failures: int = 0) -> dict:
    ok = [r for r in requests if r["status"] == "ok"]
    bad = len(requests) - len(ok) + failures
    out = {m: stats.summarize([r[m] for r in ok], failures=bad) for m in METRICS}
    itls = []
    for r in ok:
        tt = r["token_times"]
        itls += [(b - a) / 1e9 for a, b in zip(tt, tt[1:])]
    out["itl_s"] = stats.summarize(itls, failures=bad)
    return out


def _phase_failures(failures: list[dict], phase: str) -> list[dict]:
    return [f for f in failures if f.get("phase") == phase]


def build(events: list[dict]) -> dict:
    start = next((e for e in events if e.get("event") == "run_start"), None)
    if start is None:
        raise MacprofError("journal has no run_start event: not a macprof journal")
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), None)
    models: dict[str, dict] = {}
    order: list[str] = []
    by_model: dict[str, list[dict]] = {}
    for ev in events:
        name = ev.get("model")
        if name is None:
            continue
        if ev["event"] == "model_start":  # a resumed run measures a partial model afresh
            if name not in order:
                order.append(name)
            by_model[name] = []
        by_model.setdefault(name, []).append(ev)
    for name in order:
        models[name] = build_model(by_model[name], start.get("bandwidth"))
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": start.get("tool_version"),
        "started_utc": start.get("utc"),
        "ended_utc": end.get("utc") if end else None,
        "complete": bool(end and end.get("complete")),
        "interrupted": any(e.get("event") == "interrupted" for e in events),
        "machine": start.get("machine"),
        "software": start.get("software"),
        "definitions": {**DEFINITIONS, "worked_example": DEFINITION_EXAMPLE,
                        "near_tie_logits": NEAR_TIE_LOGITS, **ROOFLINE_DEFINITIONS},
        "bandwidth": start.get("bandwidth"),
        "memory": {"start": start.get("memory"), "end": end.get("memory") if end else None},
        "models": [models[n] for n in order],
    }


def build_model(events: list[dict], bw: dict | None = None) -> dict:
    head = events[0]
    workers: dict[str, dict] = {}
    failures = [e for e in events if e["event"] == "failure"]
    for ev in events:
        wid = ev.get("worker")
        if wid:
            workers.setdefault(wid, {"events": []})["events"].append(ev)
    versions = None
    for w in workers.values():
        loaded = next((e for e in w["events"] if e["event"] == "loaded"), None)
        if loaded and versions is None:
            versions = loaded.get("versions")
    cold = _build_cold(events, workers, failures)
    warm_reqs = [request_record(e) for e in events if e["event"] == "request" and e["phase"] == "warm"]
    warm_measured = [r for r in warm_reqs if r["kind"] == "measured"]
    phases: dict = {}
    settings = head["settings"]
    if "cold" in settings["phases"]:
        phases["cold"] = cold
    decode_context = mean_context(settings["prompt_tokens"], settings["gen_tokens"])
    if "warm" in settings["phases"]:
        wf = _phase_failures(failures, "warm")
        summary = summarize_requests(warm_measured, len(wf))
        phases["warm"] = {"requests": warm_reqs, "summary": summary, "failures": wf,
                          "memory": _phase_memory(events, "warm"),
                          "roofline": roofline_for(summary, head.get("shape"), decode_context, bw,
                                                   head["identity"]["total_bytes"])}
    if "prefix" in settings["phases"]:
        phases["prefix"] = _build_prefix(events, _phase_failures(failures, "prefix"))
        phases["prefix"]["roofline"] = roofline_for(phases["prefix"]["summary"]["reuse"], head.get("shape"),
                                                    decode_context, bw, head["identity"]["total_bytes"])
    for phase in SWEEP_PHASES:
        if phase in settings["phases"]:
            phases[phase] = _build_sweep(phase, events, _phase_failures(failures, phase), head, bw)
    shape = head.get("shape") or {}
    kv_tok = shape.get("kv_bytes_per_token")
    context = settings["prompt_tokens"] + settings["gen_tokens"]
    loaded = next((e for e in events if e["event"] == "loaded"), None)
    started = next((e for e in events if e["event"] == "started"), None)
    model_end = next((e for e in events if e["event"] == "model_end"), None)
    measured_kv = [r["kv_cache_bytes"] for r in warm_measured if r.get("kv_cache_bytes") is not None]
    memory = {
        "rss_before_load_bytes": started and started.get("rss_bytes"),
        "rss_after_load_bytes": loaded and loaded.get("rss_bytes"),
        "engine_after_load": loaded and loaded.get("engine_memory"),
        "kv_cache": {
            "bytes_per_token": kv_tok,
            "context_tokens": context,
            "computed_bytes": kv_tok * context if kv_tok else None,
            "measured_bytes": max(measured_kv) if measured_kv else None,
            "measured_note": "llama.cpp: serialised sequence state; mlx: allocated K/V arrays (grown in 256-token steps)",
        },
        "system_before": head.get("memory"),
        "system_after": model_end and model_end.get("memory"),
    }
    return {
        "identity": head["identity"],
        "shape": head.get("shape"),
        "shape_error": head.get("shape_error"),
        "settings": settings,
        "engine_versions": versions,
        "phases": phases,
        "memory": memory,
        "failures": failures,
        "complete": model_end is not None,
    }


def _build_sweep(phase: str, events: list[dict], failures: list[dict], head: dict, bw: dict | None) -> dict:
    """One entry per planned case, in plan order, each with its requests, summary and ceiling
    at its own context; a case refused, unsupported or never reached says so."""
    shape, file_bytes = head.get("shape"), head["identity"]["total_bytes"]
    mine = [e for e in events if e.get("phase") == phase]
    cases = []
    for case in plan(settings_from_dict(head["settings"])).get(phase, []):
        cid = case["id"]
        evs = [e for e in mine if e.get("case") == cid]
        build_record = batch_record if phase == "batch" else request_record
        reqs = [build_record(e) for e in evs if e["event"] == "request"]
        measured = [r for r in reqs if r["kind"] == "measured"]
        fails = [f for f in failures if f.get("case") == cid] + [
            {"status": "error", "reason": e["reason"], "phase": phase, "case": cid}
            for e in evs if e["event"] == "case_error"]
        unsupported = next((e for e in evs if e["event"] == "case_unsupported"), None)
        summary = summarize_requests(measured, len(fails))
        entry = {**case, "status": _case_status(measured, fails, unsupported), "requests": reqs, "summary": summary,
                 "failures": fails, "reason": (unsupported or {}).get("reason") or next((f.get("reason") for f in fails), None),
                 "roofline": roofline_for(summary, shape, case["context_tokens"], bw, file_bytes)}
        if phase == "depth":
            fill = next((e for e in evs if e["event"] == "depth_fill"), None)
            entry["fill"] = fill and {k: fill.get(k) for k in ("t_start", "t_end", "fill_s", "cached_tokens", "kv_cache_bytes")}
        if phase == "batch":
            aggregate = [r["aggregate_decode_tok_s"] for r in measured if r["status"] == "ok"]
            summary["aggregate_decode_tok_s"] = stats.summarize(aggregate, failures=len(fails))
            entry["prediction"] = batch_prediction(shape, case["context_tokens"], case["batch"], bw)
            check = next((e for e in evs if e["event"] == "batch_check"), None)
            entry["check"] = _batch_check_summary(check)
        cases.append(entry)
    out = {"cases": cases, "failures": [f for f in failures if f.get("case") is None],
           "memory": _phase_memory(events, phase)}
    if phase == "batch":
        out["tradeoff"] = batch_tradeoff(cases)
    return out


def _case_status(measured: list[dict], fails: list[dict], unsupported: dict | None) -> str:
    if unsupported:
        return "unsupported"
    if any(f.get("status") == "refused" for f in fails):
        return "refused"
    if fails or any(r["status"] != "ok" for r in measured):
        return "failed"
    return "ok" if measured else "not run"


def batch_record(ev: dict) -> dict:
    """A batched request: B sequences share each step's timestamp. ``decode_tok_s`` and the ITL
    are per sequence (what each user sees); prefill counts all B prompts; the aggregate is B x
    the per-sequence rate."""
    rec = request_record(ev)
    b = ev["batch"]
    rec["aggregate_decode_tok_s"] = b * rec["decode_tok_s"] if rec["decode_tok_s"] else None
    rec["aggregate_e2e_tok_s"] = b * rec["e2e_tok_s"] if rec["e2e_tok_s"] else None
    return rec


def _batch_check_summary(check: dict | None) -> dict | None:
    if not check:
        return None
    seqs = check["sequences"]
    return {"n": len(seqs), "identical": sum(1 for c in seqs if c["first_divergence"] is None),
            "near_ties": sum(1 for c in seqs if c["near_tie"]), "failed": sum(1 for c in seqs if not c["passed"]),
            "sequences": seqs}


def _phase_memory(events: list[dict], phase: str) -> dict:
    end = next((e for e in events if e["event"] == "phase_end" and e["phase"] == phase), None)
    start = next((e for e in events if e["event"] == "phase_start" and e["phase"] == phase), None)
    eng = next((e for e in events if e["event"] == "phase_memory" and e["phase"] == phase), None)
    return {
        "rss_start_bytes": start and start.get("rss_bytes"),
        "rss_end_bytes": end and end.get("rss_bytes"),
        "peak_rss_bytes": end and end.get("peak_rss_bytes"),
        "rss_samples": end and end.get("rss_samples"),
        "engine": eng and eng.get("engine_memory"),
    }


def _build_cold(events: list[dict], workers: dict, failures: list[dict]) -> dict:
    trials = []
    for ev in events:
        if ev["event"] != "cold_trial":
            continue
        trial = {"index": ev["index"], "residency": ev["residency"], "drop_cache": ev.get("drop_cache"),
                 "status": "ok"}
        w = next((w for w in workers.values() if w["events"][0].get("phases") == ["cold"]
                  and w["events"][0].get("trial") == ev["index"]), None)
        if w is None:
            trial["status"] = "failed"
            trials.append(trial)
            continue
        by = {e["event"]: e for e in w["events"]}
        reqs = {e["kind"]: request_record(e) for e in w["events"] if e["event"] == "request"}
        spawn, started, loaded = by.get("worker_spawn"), by.get("started"), by.get("loaded")

        def span(a, ka, b, kb):
            return (b[kb] - a[ka]) / 1e9 if a and b and a.get(ka) is not None and b.get(kb) is not None else None

        first, second = reqs.get("first"), reqs.get("second")
        trial.update({
            "interpreter_s": span(spawn, "t_spawn", started, "t_main"),
            "import_s": span(started, "t_main", loaded, "t_imported"),
            "model_load_s": span(loaded, "t_imported", loaded, "t_model"),
            "tokenizer_load_s": span(loaded, "t_model", loaded, "t_tokenizer"),
            "ready_s": span(spawn, "t_spawn", loaded, "t_tokenizer"),
            "first_request": first,
            "second_request": second,
            "first_request_extra_s": (first["total_s"] - second["total_s"])
            if first and second and first["total_s"] is not None and second["total_s"] is not None else None,
            # spawn -> ready, then the first request's own TTFT: macprof's prompt preparation
            # between the two (prompt_build_s) is not the engine's cold start
            "time_to_first_token_s": span(spawn, "t_spawn", loaded, "t_tokenizer") + first["ttft_s"]
            if first and first["ttft_s"] is not None and span(spawn, "t_spawn", loaded, "t_tokenizer") is not None else None,
            "prompt_build_s": (first["t0"] - loaded["t_tokenizer"]) / 1e9 if first and loaded else None,
        })
        if loaded and loaded.get("tokenizer_separate") is False:
            trial["tokenizer_load_s"] = None
            trial["tokenizer_note"] = "the engine reads the vocabulary with the model: tokenizer load is inside model_load_s"
        fails = [f for f in failures if f.get("worker") == w["events"][0].get("worker")]
        if fails or not (first and second and first["status"] == second["status"] == "ok"):
            trial["status"] = "failed"
            trial["failure"] = fails[0] if fails else None
        trials.append(trial)
    ok = [t for t in trials if t["status"] == "ok"]
    keys = ("interpreter_s", "import_s", "model_load_s", "tokenizer_load_s", "ready_s",
            "first_request_extra_s", "time_to_first_token_s")
    summary = {k: stats.summarize([t[k] for t in ok], failures=len(trials) - len(ok)) for k in keys}
    return {"trials": trials, "summary": summary, "failures": _phase_failures(failures, "cold")}


def _build_prefix(events: list[dict], failures: list[dict]) -> dict:
    pairs: dict[int, dict] = {}
    for ev in events:
        if ev.get("phase") != "prefix":
            continue
        if ev["event"] == "request":
            pairs.setdefault(ev["index"], {"index": ev["index"], "kind": ev["kind"]})[ev["mode"]] = request_record(ev)
        elif ev["event"] == "prefix_check":
            pairs.setdefault(ev["index"], {"index": ev["index"], "kind": ev["kind"]})["check"] = {
                k: ev.get(k) for k in ("identical_fraction", "first_divergence", "margin", "near_tie", "passed")}
    measured = [p for i, p in sorted(pairs.items()) if p["kind"] == "measured"]
    reuse = [p["reuse"] for p in measured if "reuse" in p]
    noreuse = [p["noreuse"] for p in measured if "noreuse" in p]
    s_reuse = summarize_requests(reuse, len(failures))
    s_noreuse = summarize_requests(noreuse, len(failures))
    checks = [p["check"] for p in measured if "check" in p]
    med_r, med_n = s_reuse["ttft_s"]["median"], s_noreuse["ttft_s"]["median"]
    return {
        "pairs": [pairs[i] for i in sorted(pairs)],
        "summary": {
            "reuse": s_reuse,
            "noreuse": s_noreuse,
            "ttft_speedup": stats.ratio(med_n, med_r),
            "reused_tokens": stats.summarize([r["reused_tokens"] for r in reuse]),
            "checks": {"n": len(checks), "identical": sum(1 for c in checks if c["first_divergence"] is None),
                       "near_ties": sum(1 for c in checks if c["near_tie"]),
                       "failed": sum(1 for c in checks if not c["passed"])},
        },
        "failures": failures,
        "memory": _phase_memory(events, "prefix"),
    }


