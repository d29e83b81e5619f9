"""Comparing models across run logs (logic only; rendering is in macprof/render/compare.py).

One row per (run log, model). Each row is set against a baseline row: ratios of medians, and
a call of faster / slower made only when the raw per-request samples say so (Mann–Whitney U,
two-sided, alpha 0.05); otherwise "no significant difference", or "cannot tell" when the sample
sizes could not reach alpha whatever the samples (3 vs 3). Beside each ratio, a seeded bootstrap
interval for it from the same samples. Rows measured under different conditions (lengths,
machine, engine version, power source, thermal state) are flagged.
"""

from __future__ import annotations

import re

from macprof.cases import SWEEP_PHASES
from macprof.errors import MacprofError
from macprof.measure.significance import (ALPHA, CONFIDENCE, RESAMPLES, SEED, median_ratio_intervals, min_reps,
                                          verdict)
from macprof.measure import stats
from macprof.analyse.headline import (case_energy, energy_figures, engine_version, headline, measured_efficiency,
                                      memory_family, memory_figures)
from macprof.analyse.tasks import task_outcomes
from macprof.measure import proportions
from macprof.model.log import Machine, ModelResult, RunLog
from macprof.model.phases import PrefixPhase, Sweep, SweepCase, WarmPhase
from macprof.model.resolved import known, word
from macprof.model.vocab import THERMAL_STATES
from macprof.phases import figures_of

# metric -> (what, higher is better); memory is named after the figure judged (memory_label)
METRICS = {"decode": ("decode tok/s", True), "ttft": ("warm TTFT", False), "memory": ("peak memory", False),
           "kld": ("mean KLD", False), "accuracy": ("task accuracy", True)}
# the fewest discordant tasks at which the exact test can call a difference at all
MIN_PAIRED_TASKS = proportions.smallest_significant_pairs()
ACCURACY_TEST = (f"accuracy: exact McNemar test on the tasks both sides ran (two-sided, alpha {proportions.ALPHA}); "
                 f"cannot tell under {MIN_PAIRED_TASKS} paired tasks")


def parse_case(spec: str | None) -> tuple[str, str] | None:
    """'depth:d4096' -> ('depth', 'd4096'): compare that sweep case instead of the warm phase."""
    if spec is None:
        return None
    phase, _, cid = spec.partition(":")
    if phase not in SWEEP_PHASES or not cid:
        raise MacprofError(f"--case {spec!r}: expected PHASE:ID with PHASE {', '.join(SWEEP_PHASES)} "
                           f"(e.g. depth:d4096, batch:b8, grid:p512-g128, grid:rag)")
    return phase, cid


def rows_from(log: RunLog, source: str, case: tuple[str, str] | None = None) -> list[dict]:
    """One row per model; with ``case``, the figures of that sweep case (models without it are
    left out) instead of the warm phase's."""
    machine = log.machine or Machine()
    rows = []
    for m in log.models:
        s = m.settings
        head, lengths = {**headline(m), **figures_of(m)}, (s.prompt_tokens, s.gen_tokens)
        block: WarmPhase | SweepCase | None = m.phases.warm
        states = thermal_state_of(m.phases.warm)
        if case:
            sweep = m.phases.sweep(case[0])
            found = next((c for c in sweep.cases if c.id == case[1]), None) if sweep else None
            if sweep is None or found is None:
                continue
            head.update(cold_ttft_s=None, prefix_ttft_s=None, warm_ttft_s=found.summary.ttft_s.median,
                        decode_tok_s=found.summary.decode_tok_s.median, efficiency=measured_efficiency(found.roofline),
                        **memory_figures([sweep.memory] if sweep.memory else [], m.identity.engine))
            head.update(energy_figures(sweep.telemetry), **case_energy(found))
            block, lengths, states = found, (found.prompt_tokens, found.gen_tokens), thermal_state_of(sweep)
        ok = [r for r in (block.requests if block else ()) if r.kind == "measured" and r.status == "ok"]
        rows.append({
            "source": source,
            **head,
            "samples": {"decode": [r.decode_tok_s for r in ok if r.decode_tok_s is not None],
                        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None]},
            "outcomes": task_outcomes(m),  # per task: right first, right within (the paired accuracy test)
            "conditions": {
                "lengths": lengths,
                # what the requests really had (a server's prompts may not be the asked length)
                "measured_lengths": measured_lengths(ok),
                "machine": machine.host_id or (machine.cpu_model, machine.chip),
                "engine_version": engine_version(m, log.software),
                "power_source": machine.power_source,
                "thermal_state": machine.thermal_state,
                # over time, from the phase's telemetry (absent from older logs: None on both sides)
                "thermal_pressure": head["thermal_pressure"],
                "phase_power_source": head["phase_power_source"],
                "memory_figure": memory_family(head["memory_figure"]),
                # a footprint that missed mapped weights against one that counts its weights
                "memory_weights": head["memory_weights"],
                # NSProcessInfo's at the phase's boundaries (macOS; absent from older logs)
                "phase_thermal_state": states,
                # the task set's sha256 and attempts allowed (absent: no tasks phase on one side, not flagged)
                "task_set": _task_set(m),
                # the engine's settings as it resolved them (flash attention, threads, batch sizes, K/V types,
                # offload...): compared where both sides know a setting (absent from older logs: None)
                "engine_settings": known(m.engine_settings) if m.has("engine_settings") else None,
            },
        })
    return rows


def measured_lengths(requests) -> tuple:
    """(prompt tokens, generated tokens) of the requests, each a (min, max) range; 0 where the
    server counted none (a server's prompts in words: then nothing says they match the other side)."""
    prompts = [r.prompt_tokens or 0 for r in requests]
    gens = [r.server.completion_tokens or 0 if r.has("server") and r.server else r.n_tokens for r in requests]
    return tuple((min(v), max(v)) if v else None for v in (prompts, gens))


def _task_set(m: ModelResult) -> tuple | None:
    ph = m.phases.tasks
    return (ph.task_set.sha256 if ph.task_set else None, ph.attempts_allowed) if ph else None


_FLAG_NAMES = {"task_set": "task set or attempts allowed", "lengths": "prompt/gen lengths", "measured_lengths": "measured prompt/gen lengths", "machine": "machine", "engine_version": "engine version",
               "power_source": "power source", "thermal_state": "thermal state",
               "thermal_pressure": "thermal pressure during the phase", "phase_power_source": "power source during the phase",
               "memory_figure": "memory: footprint vs RSS", "phase_thermal_state": "thermal state during the phase",
               "memory_weights": "memory: the weights counted on one side only (mapped weights outside a footprint)"}


# flagged only when both sides know them: a log from before telemetry, or an OS that reads
# neither, says nothing about them
_KNOWN_ONLY = ("thermal_pressure", "phase_power_source", "memory_figure", "phase_thermal_state", "memory_weights",
               "task_set", "engine_settings")


def settings_differ(mine: dict | None, theirs: dict | None) -> list[str]:
    """The engine settings both sides resolved to different values, each "name a vs b" (a setting
    one side does not know is not held against the other)."""
    if not mine or not theirs:
        return []
    return [f"{name} {word(mine[name])} vs {word(theirs[name])}" for name in mine
            if name in theirs and mine[name] != theirs[name]]


def _flag_name(key: str, mine, theirs) -> str:
    if key == "engine_settings":
        return "engine settings: " + ", ".join(settings_differ(mine, theirs))
    return _FLAG_NAMES[key]
THERMAL_RANK = {state: rank for rank, state in enumerate(THERMAL_STATES)}


def thermal_state_of(phase: WarmPhase | PrefixPhase | Sweep | None) -> str | None:
    """The worse of a phase's thermal states at its start and end; None where none was read."""
    states = [s for s in (getattr(phase, "thermal_state_start", None), getattr(phase, "thermal_state_end", None))
              if s in THERMAL_RANK]
    return max(states, key=THERMAL_RANK.__getitem__) if states else None


def compare(rows: list[dict], baseline: str | None = None) -> dict:
    if not rows:
        raise MacprofError("compare: the run logs hold no models")
    if baseline is None:
        base = rows[0]
    else:
        matches = [r for r in rows if r["model"] == baseline or f"{r['model']}@{r['source']}" == baseline]
        if not matches:
            raise MacprofError(f"compare: no model named {baseline!r} (models: {', '.join(sorted({r['model'] for r in rows}))})")
        base = matches[0]
    out = []
    # the bootstrap intervals of every row, drawn together once the rows are known (one batch:
    # 1,186 intervals for 50 logs of six models); each row's dicts are filled in place
    pending: list[tuple[dict, str, list[float], list[float]]] = []
    # the first row of each model in the baseline's run: its twin for every row of that model
    in_base: dict[str, dict] = {}
    for t in rows:
        if t["source"] == base["source"]:
            in_base.setdefault(t["model"], t)
    for r in rows:
        flags = [_flag_name(k, v, base["conditions"][k]) for k, v in r["conditions"].items() if v != base["conditions"][k]
                 and (k not in ("engine_version", "engine_settings") or r["engine"] == base["engine"])  # engines differ by design
                 and (k != "engine_settings" or settings_differ(v, base["conditions"][k]))
                 # lengths asked otherwise are flagged as such; what the requests had says more only when asked alike
                 and (k != "measured_lengths" or r["conditions"]["lengths"] == base["conditions"]["lengths"])
                 and (k not in _KNOWN_ONLY or None not in (v, base["conditions"][k]))]
        row = {k: v for k, v in r.items() if k not in ("samples", "conditions", "outcomes")}
        row["baseline"] = r is base
        row["not_comparable"] = flags
        row["ratios"], row["calls"], row["intervals"] = _against(r, base, pending)
        # the same model in the baseline's run: what --fail-if judges (did this model regress?)
        twin = in_base.get(r["model"])
        if twin is r:
            twin = None
        row["same_model_baseline"] = None if twin is None else f"{twin['model']}@{twin['source']}"
        row["same_model"] = None if twin is None else dict(zip(("ratios", "calls", "intervals"), _against(r, twin, pending)),
                                                           memory_figure=twin["memory_figure"],
                                                           memory_weights=twin.get("memory_weights"))
        out.append(row)
    for (intervals, key, _, _), found in zip(pending, median_ratio_intervals([(a, b) for _, _, a, b in pending])):
        intervals[key] = found
    return {"baseline": f"{base['model']}@{base['source']}", "test": "Mann-Whitney U, two-sided, alpha 0.05, on raw per-request samples",
            "interval": f"{CONFIDENCE:.0%} percentile bootstrap of the ratio of medians, {RESAMPLES} resamples per side, "
                        f"seed {SEED}", "confidence": CONFIDENCE, "min_reps_per_side": min_reps(ALPHA),
            "accuracy_test": ACCURACY_TEST, "min_paired_tasks": MIN_PAIRED_TASKS, "rows": out}


def _against(r: dict, base: dict, pending: list) -> tuple[dict, dict, dict]:
    """Ratios of medians to ``base``; for the sampled metrics, the test's call and the interval.
    The intervals are left None, each noted in ``pending`` as (its dict, metric, base's samples,
    r's samples), for the caller to fill from one batch (median_ratio_intervals)."""
    ratios = {"decode": stats.ratio(r["decode_tok_s"], base["decode_tok_s"]),
              "ttft": stats.ratio(r["warm_ttft_s"], base["warm_ttft_s"]),
              "memory": _memory_ratio(r, base),
              # a difference, not a ratio: KLD is 0 for the reference itself
              "kld": None if None in (r.get("kld_mean"), base.get("kld_mean")) else r["kld_mean"] - base["kld_mean"],
              # a difference of accuracies (within the attempts), as a fraction: -0.05 is five points down
              "accuracy": None if None in (r.get("accuracy"), base.get("accuracy")) else r["accuracy"] - base["accuracy"],
              "time_per_correct": stats.ratio(r.get("time_per_correct_s"), base.get("time_per_correct_s"))}
    if r is base:
        return ratios, {}, {}
    calls = {key: verdict(base["samples"][key], r["samples"][key], higher_is_better=METRICS[key][1])
             for key in ("decode", "ttft")}
    if r.get("outcomes") is not None and base.get("outcomes") is not None:
        calls["accuracy"] = accuracy_call(base["outcomes"], r["outcomes"])
    intervals: dict = dict.fromkeys(("decode", "ttft"))  # in this order in the output
    pending += [(intervals, key, base["samples"][key], r["samples"][key]) for key in intervals]
    return ratios, calls, intervals


def accuracy_call(base: dict[str, tuple[bool, bool]], other: dict[str, tuple[bool, bool]]) -> dict:
    """The paired call on the tasks both sides ran (right within the attempts): exact McNemar on
    the tasks only one side got right; "cannot tell" where so few tasks are paired that no
    outcome could reach alpha, as decode is judged on too few requests."""
    common = sorted(set(base) & set(other))
    b = sum(1 for t in common if base[t][1] and not other[t][1])  # only the baseline right
    c = sum(1 for t in common if other[t][1] and not base[t][1])  # only this side right
    need = MIN_PAIRED_TASKS
    p = proportions.mcnemar_exact(b, c)
    out: dict = {"pairs": len(common), "only_base": b, "only_this": c, "p": p, "why": None}
    if len(common) < need:
        return {**out, "call": "cannot tell", "why": f"{len(common)} paired tasks; the exact test needs {need} to reach "
                                                     f"p < {proportions.ALPHA} at all"}
    if p < proportions.ALPHA:
        return {**out, "call": "more accurate" if c > b else "less accurate"}
    return {**out, "call": "no significant difference"}


def _memory_ratio(r: dict, base: dict) -> float | None:
    """The peak memory ratio, only between like figures: a macOS footprint counts the GPU's
    buffers (weights, K/V) that an RSS leaves out, so footprint / RSS measures nothing. RSS on
    both sides is not offered instead: on macOS it would judge a figure that misses the model.
    Nor between a footprint that counts the weights and one that missed them (mapped, their
    residency unknown: a log from before it was measured)."""
    if _memory_unlike(r, base):
        return None
    return stats.ratio(r["peak_memory_bytes"], base["peak_memory_bytes"])


def memory_label(rows: list[dict]) -> str:
    """'peak footprint' or 'peak RSS': the figure a memory verdict is about."""
    kinds = {r.get("memory_figure") for r in rows} - {None}
    return f"peak {kinds.pop()}" if len(kinds) == 1 else "peak memory"


def _label(metric: str, rows: list[dict]) -> str:
    return memory_label(rows) if metric == "memory" else METRICS[metric][0]


_FAIL_RE = re.compile(r"^(decode|ttft|memory):([+-]?\d+(?:\.\d+)?)%$")
_KLD_RE = re.compile(r"^kld:\+?(\d+(?:\.\d+)?)$")  # an absolute rise of the mean KLD, in nats
_ACCURACY_RE = re.compile(r"^accuracy:-?(\d+(?:\.\d+)?)%$")  # a fall of the accuracy, in percentage points


def parse_fail_if(specs: list[str]) -> list[tuple[str, float]]:
    out = []
    for spec in specs:
        k = _KLD_RE.match(spec.strip())
        if k:
            out.append(("kld", float(k.group(1))))
            continue
        a = _ACCURACY_RE.match(spec.strip())
        if a:
            out.append(("accuracy", -float(a.group(1)) / 100))
            continue
        m = _FAIL_RE.match(spec.strip())
        if not m:
            raise MacprofError(f"--fail-if {spec!r}: expected METRIC:±N% with METRIC one of decode, ttft, memory "
                               f"(e.g. decode:-5% fails when decode tok/s drops more than 5%), kld:+X "
                               f"(the mean KLD rose by more than X nats), or accuracy:-N% (the task accuracy fell by "
                               f"more than N points, and the paired test says so)")
        out.append((m.group(1), float(m.group(2)) / 100))
    return out


def regressions(result: dict, specs: list[tuple[str, float]]) -> list[str]:
    """A regression: against the same model in the baseline's run, the median moved past the
    limit in the bad direction, and (for the sampled metrics) the samples say it is significant."""
    found = []
    for row in result["rows"]:
        if row["same_model"] is None:
            continue
        for metric, limit in specs:
            ratio = row["same_model"]["ratios"][metric]
            if ratio is None:
                continue
            if metric == "kld":  # judged on the means' difference, the one figure per run
                if ratio > limit:
                    found.append(f"{row['model']}@{row['source']}: mean KLD {ratio:+.4f} vs {row['same_model_baseline']} "
                                 f"(limit kld:+{limit:g})")
                continue
            if metric == "accuracy":  # a difference of accuracies, called by the paired test
                call = row["same_model"]["calls"].get("accuracy", {}).get("call")
                if ratio < limit and call == "less accurate":
                    found.append(f"{row['model']}@{row['source']}: task accuracy {100 * ratio:+.1f} points vs "
                                 f"{row['same_model_baseline']} (limit accuracy:{100 * limit:.0f}%, exact McNemar "
                                 f"p = {row['same_model']['calls']['accuracy']['p']:.3g})")
                continue
            change = ratio - 1
            higher_is_better = METRICS[metric][1]
            worse = change < limit if higher_is_better else change > abs(limit)
            call = row["same_model"]["calls"].get(metric, {}).get("call")
            if worse and call in (None, "slower"):
                found.append(f"{row['model']}@{row['source']}: {_label(metric, [row])} {change:+.1%} vs "
                             f"{row['same_model_baseline']} (limit {metric}:{limit:+.0%})")
    return found


def cannot_judge(result: dict, specs: list[tuple[str, float]]) -> str | None:
    """One line naming each --fail-if metric and model that cannot be judged, or None when every
    one can. A gate judges only what was measured: it must not pass on a model with no successful
    request (or no peak memory, or a footprint against an RSS) on either side, on sample sizes
    that could never be significant, or when no model of the baseline's run appears in another run."""
    if not specs:
        return None
    judged = [row for row in result["rows"] if row["same_model"]]
    if not judged:
        base = next(row["source"] for row in result["rows"] if row["baseline"])
        return (f"--fail-if has nothing to judge: no model of the baseline's run ({base}) appears in another run; "
                f"compare a run against an earlier run of the same models")
    unmeasured: list[str] = []
    few: list[str] = []
    few_tasks: list[str] = []
    for metric in dict.fromkeys(m for m, _ in specs):
        none, small = _unjudged(judged, metric)
        unmeasured += [f"{_label(metric, judged)} of {', '.join(none)}"] if none else []
        (few_tasks if metric == "accuracy" else few).extend([f"{_label(metric, judged)} of {', '.join(small)}"]
                                                            if small else [])
    parts = []
    mixed = [f"{row['model']}@{row['source']} (peak {row['memory_figure']}) against {row['same_model_baseline']} "
             f"(peak {row['same_model']['memory_figure']}): not comparable, {_mixed_memory(row)}"
             for row in judged if _mixed_memory(row)]
    if mixed and "memory" in (m for m, _ in specs):
        parts.append(f"memory of {'; '.join(mixed)}")
    if unmeasured:
        parts.append(f"{'; '.join(unmeasured)}: nothing was measured there, and a gate judges only what was measured")
    if few:
        n = result["min_reps_per_side"]
        parts.append(f"{'; '.join(few)}: the test cannot reach p < {ALPHA} with so few requests; "
                     f"record at least {n} per side (--reps {n})")
    if few_tasks:
        parts.append(f"{'; '.join(few_tasks)}: the exact McNemar test cannot reach p < {ALPHA} on so few paired tasks; "
                     f"run at least {result.get('min_paired_tasks')} tasks on both sides")
    return "--fail-if cannot judge " + "; nor ".join(parts) if parts else None


def _memory_unlike(r: dict, base: dict) -> str | None:
    """Why two headline memories measure different things, or None when they measure the same:
    a footprint against an RSS, or a footprint counting the weights against one that missed them."""
    if memory_family(r["memory_figure"]) != memory_family(base["memory_figure"]):
        return "footprint vs RSS (a macOS footprint counts the GPU's buffers, which RSS leaves out)"
    mine, theirs = r.get("memory_weights"), base.get("memory_weights")
    if mine and theirs and mine != theirs:
        return ("the weights counted on one side only (a footprint leaves out mapped weights, and this log did not "
                "measure their resident bytes)")
    return None


def _mixed_memory(row: dict) -> str | None:
    """Why the row's memory and its twin's in the baseline run are unlike (_memory_unlike)."""
    twin = row["same_model"]
    return _memory_unlike(row, twin) if row["memory_figure"] and twin["memory_figure"] else None


def _unjudged(rows: list[dict], metric: str) -> tuple[list[str], list[str]]:
    """The rows whose ``metric`` has nothing measured on a side, and those whose sample sizes
    could never reach significance, each named with what it had."""
    none, small = [], []
    for row in rows:
        what = f"{row['model']}@{row['source']}"
        if metric == "memory":  # one figure per run, not a sample: judged whenever both sides have it
            if row["same_model"]["ratios"]["memory"] is None and not _mixed_memory(row):
                none.append(f"{what} (no peak {row['memory_figure'] or 'RSS'} against {row['same_model_baseline']})")
            continue
        if metric == "kld":
            if row["same_model"]["ratios"]["kld"] is None:
                none.append(f"{what} (no mean KLD against {row['same_model_baseline']})")
            continue
        if metric == "accuracy":
            call = row["same_model"]["calls"].get("accuracy")
            if call is None or row["same_model"]["ratios"]["accuracy"] is None:
                none.append(f"{what} (no tasks run against {row['same_model_baseline']})")
            elif call["call"] == "cannot tell":
                small.append(f"{what} ({call['pairs']} paired tasks)")
            continue
        call = row["same_model"]["calls"].get(metric) or {}
        n_base, n = call.get("sizes") or (0, 0)
        if not n_base or not n:
            none.append(f"{what} ({n_base} vs {n} successful requests)")
        elif call.get("call") == "cannot tell":
            small.append(f"{what} ({n_base} vs {n} requests)")
    return none, small
