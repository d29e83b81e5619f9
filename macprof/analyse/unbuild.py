"""The journal events a run log was built from, read back from what the log keeps: build's
inverse, so that `macprof verify` recomputes every summary through build itself
(analyse/build.py and the phases' builders, one path for a run and for its check) and can
never drift from what `run` computes.

A log keeps its raw records (requests' stamps and ids, prefix and output checks, cold trials'
start-up spans, sweeps' fills and checks, speculative rounds, quality chunks, conversation
turns, task attempts, load levels, telemetry samples) beside what build derives from them.
Each event is made of the raw fields of the record it became (an event's fields are its
record's raw ones; the derived ones are left out), in the order a journal has them where a
builder reads the order (the first `loaded` of a model is its memory's).

A cold trial's stamps are not kept, only the spans between them (interpreter, harness, import,
load, tokenizer, prompt build): they are laid end to end from the spawn. What a log does not
keep the raw records of cannot be recomputed, and ``kept`` names it (the figure stays as it
was recorded): a cold trial's energy and the tasks phase's energy per correct answer (their
telemetry samples are not in the log), a model draft's K/V and predictions (its shape is not),
a distributed group's communication figures (the pass's steps are not).
"""

from __future__ import annotations

from typing import Any, Callable

from macprof.errors import MacprofError, reason
from macprof.model import events as ev
from macprof.model.conversation import ConversationStart, ConversationTurn
from macprof.model.log import RunLog
from macprof.model.phase_events import LoadLevel, QualityChunkScored, QualityStart, RankGroup, RankTimeline
from macprof.model.speculative import (DraftEnd, DraftLoaded, NativeRefused, SpeculativeCheck, SpeculativeNative,
                                       SpeculativeRounds)
from macprof.model.tasks import TaskAttemptDone, TasksStart
from macprof.phases import REGISTRY, SWEEPS, Phase, load

NS = 1e9
# a model's figures whose raw records the log does not keep, as paths under models/<i>/ ("*": any key or index)
KEPT_ALWAYS = ("phases/cold/trials/*/energy", "phases/tasks/summary/energy_per_correct_j",
               "phases/tasks/summary/energy_reason")
KEPT_MODEL_DRAFT = ("phases/speculative/draft_memory/kv_computed_bytes", "phases/speculative/cases/*/predicted_*",
                    "phases/speculative/cases/*/prediction_reason", "phases/speculative/native/*/predicted_*",
                    "phases/speculative/native/*/prediction_reason")
KEPT_DISTRIBUTED = ("distributed/comm", "distributed/comm_method", "distributed/bytes_per_token/measured_payload",
                    "distributed/prediction", "distributed/efficiency", "distributed/reason")
# a distributed rank's request as the log keeps it: its figures are derived (analyse/distributed.py)
_TIMELINE_DERIVED = ("ttft_s", "decode_tok_s", "tokens_match_rank0")


def kept(model: dict) -> tuple[str, ...]:
    """The paths under one model (its JSON) that cannot be recomputed from the log."""
    phases = model.get("phases") or {}
    spec = phases.get("speculative") or {}
    draft = spec.get("draft_status") is not None and spec.get("draft") != "ngram"
    # a log from before prompt_build_s counted the prompt's build in time_to_first_token_s, and kept no span of it
    trials = (phases.get("cold") or {}).get("trials") or ()
    older = tuple(f"phases/cold/trials/{j}/time_to_first_token_s" for j, t in enumerate(trials)
                  if "interpreter_s" in t and "prompt_build_s" not in t)
    return (KEPT_ALWAYS + (KEPT_MODEL_DRAFT if draft else ()) + (KEPT_DISTRIBUTED if model.get("distributed") else ())
            + older + (("phases/cold/summary/time_to_first_token_s",) if older else ()))


def journal_of(log: RunLog, data: dict | None = None) -> list[ev.Event]:
    """The events ``log`` was built from; ``data``: its JSON (log.to_json()), where the caller
    has it. Raises MacprofError where a record cannot be an event (a field of the wrong type)."""
    data = log.to_json() if data is None else data
    out: list[ev.Event] = [_event(ev.RunStart, {}, schema_version=data.get("schema_version"),
                                  tool_version=data.get("tool_version"), utc=data.get("started_utc"),
                                  machine=data.get("machine"), software=data.get("software"),
                                  bandwidth=data.get("bandwidth"), memory=(data.get("memory") or {}).get("start"))]
    names: set[str] = set()
    for i, m in enumerate(data.get("models") or ()):
        name = str((m.get("identity") or {}).get("name"))  # the journal's key: a model's name, once per run
        out += _model(m, name if name not in names else f"{name} (model {i})")
        names.add(name)
    if data.get("interrupted"):
        out.append(_event(ev.Interrupted, {}))
    if data.get("ended_utc") is not None or data.get("complete") or (data.get("memory") or {}).get("end"):
        out.append(_event(ev.RunEnd, {}, utc=data.get("ended_utc"), complete=bool(data.get("complete")),
                          memory=(data.get("memory") or {}).get("end")))
    return out


def _event(cls: type[ev.Event], source: dict, **fields: Any) -> ev.Event:
    """An event of ``cls`` from a record's JSON: the keys the event has, then ``fields``."""
    names = cls.__struct_fields__
    body = {k: v for k, v in source.items() if k in names}
    body.update(fields)
    body["event"] = cls.KIND
    return cls.from_json(body, f"{cls.KIND} event")


def _model(m: dict, key: str) -> list[ev.Event]:
    """One model's events, each carrying ``model`` = ``key`` (build groups a model's events by it,
    and a failure keeps it)."""
    memory, phases = m.get("memory") or {}, m.get("phases") or {}
    out: list[ev.Event] = [_event(ev.ModelStart, m, memory=memory.get("system_before"))]
    planned = {name: [_planned(c) for c in phases[name].get("cases") or ()] for name in SWEEPS if phases.get(name)}
    if planned:
        out.append(_event(ev.Plan, {}, cases=planned))
    # the first started and loaded of a model are its memory's (analyse/build.py _model_memory)
    out.append(_event(ev.Started, {}, rss_bytes=memory.get("rss_before_load_bytes")))
    out.append(_event(ev.Loaded, {}, rss_bytes=memory.get("rss_after_load_bytes"),
                      engine_memory=memory.get("engine_after_load"), versions=m.get("engine_versions"),
                      **_present(memory, footprint_after_load_bytes="footprint_bytes"),
                      **_present(m, engine_settings="engine_settings")))
    for name in REGISTRY:
        phase = phases.get(name)
        if phase is None:
            continue
        body = reader(REGISTRY[name])(phase, m, name)
        out += _bounds(phase, name, body)
    out += _distributed(m)
    # after the workers' events, as the orchestrator journals them: a worker's first event is its spawn
    out += [_event(ev.Failure, f) for f in m.get("failures") or ()]
    if m.get("complete"):
        out.append(_event(ev.ModelEnd, {}, memory=memory.get("system_after")))
    return [e.replace(model=key) for e in out]


def _present(record: dict, **renamed: str) -> dict:
    """``record``'s keys that are present, under the event's names for them."""
    return {new: record[old] for old, new in renamed.items() if old in record}


def _ns(seconds: Any) -> int:
    return round(seconds * NS)


def _requests(phase: str, requests, **tags: Any) -> list[ev.Event]:
    return [_event(ev.Request, r, phase=phase, **tags) for r in requests or () if r]


def _bounds(phase: dict, name: str, body: list[ev.Event]) -> list[ev.Event]:
    """The phase's own events between its start and end, which carry its memory and thermal
    states (analyse/build.py _phase_memory, _thermal_states), then its telemetry."""
    mem = phase.get("memory")
    head: list[ev.Event] = []
    tail: list[ev.Event] = []
    if isinstance(mem, dict):
        head.append(_event(ev.PhaseStart, {}, phase=name, rss_bytes=mem.get("rss_start_bytes"),
                           **_present(mem, footprint_start_bytes="footprint_bytes"),
                           **_present(phase, thermal_state_start="thermal_state")))
        end = _present(mem, footprint_end_bytes="footprint_bytes", peak_footprint_bytes="peak_footprint_bytes",
                       footprint_samples="footprint_samples", weights_held="weights_held",
                       mapped_resident_bytes="mapped_resident_bytes")
        if name == "speculative":
            end = _target_weights(end, mem, phase.get("draft_memory"))
        tail.append(_event(ev.PhaseEnd, {}, phase=name, rss_bytes=mem.get("rss_end_bytes"),
                           peak_rss_bytes=mem.get("peak_rss_bytes"), rss_samples=mem.get("rss_samples"),
                           **end, **_present(phase, thermal_state_end="thermal_state")))
        if mem.get("engine") is not None:
            tail.append(_event(ev.PhaseMemory, {}, phase=name, engine_memory=mem["engine"]))
    elif "thermal_state_start" in phase:  # a phase whose memory was not recorded, its thermal states were
        head.append(_event(ev.PhaseStart, {}, phase=name, thermal_state=phase["thermal_state_start"]))
        tail.append(_event(ev.PhaseEnd, {}, phase=name, thermal_state=phase.get("thermal_state_end")))
    if phase.get("telemetry"):
        tail.append(_event(ev.Telemetry, phase["telemetry"], phase=name))
    return head + body + tail


def _target_weights(end: dict, mem: dict, draft: dict | None) -> dict:
    """The target's own mapped bytes: the phase's memory adds a mapped draft's to them where the
    footprint is the figure (analyse/speculative.py _with_draft_weights)."""
    if not draft or draft.get("weights_held") != "mapped" or "peak_footprint_bytes" not in mem:
        return end
    total, own = mem.get("mapped_resident_bytes"), draft.get("mapped_resident_bytes")
    if total is None or own is None:
        return end
    return {**end, "weights_held": "mapped", "mapped_resident_bytes": total - own}


# -- the phases ----------------------------------------------------------------------------------
def cold_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    for n, trial in enumerate(phase.get("trials") or ()):
        out.append(_event(ev.ColdTrial, trial))
        if "interpreter_s" not in trial:  # its worker never ran
            continue
        worker = (trial.get("failure") or {}).get("worker") or f"cold trial {n}"
        out += [e.replace(worker=worker) for e in _cold_worker(trial)]
    return out


def _cold_worker(trial: dict) -> list[ev.Event]:
    """The trial's worker: its stamps laid end to end from the spawn by the spans it recorded
    (analyse/cold.py _cold_trial takes them apart again), placed so that the first request's own
    stamps (kept) follow the tokenizer's by the prompt's build time."""
    first, second = trial.get("first_request"), trial.get("second_request")
    # the engine's tokenizer came with the model (a log from before that was said timed its no-op load)
    harness, joint = trial.get("harness_s"), "tokenizer_note" in trial and trial.get("tokenizer_load_s") is None
    stamps: dict[str, int | None] = {"t_spawn": 0}
    at: int | None = 0
    for stamp, span in (("t_main", "interpreter_s"), ("t_import_start", "harness_s"), ("t_imported", "import_s"),
                        ("t_model", "model_load_s"), ("t_tokenizer", "tokenizer_load_s")):
        if stamp == "t_import_start" and harness is None:
            continue
        if stamp == "t_tokenizer" and joint:  # no tokenizer span of its own: ready_s says where it ended
            ready = trial.get("ready_s")
            at = None if ready is None else _ns(ready + (harness or 0))
        else:
            value = trial.get(span)
            at = None if at is None or value is None else at + _ns(value)
        stamps[stamp] = at
    build = trial.get("prompt_build_s")
    if first and build is not None and stamps["t_tokenizer"] is not None:
        shift = first["t0"] - _ns(build) - stamps["t_tokenizer"]
        stamps = {k: None if v is None else v + shift for k, v in stamps.items()}
    started = stamps["t_main"] is not None or trial.get("interpreter_s") is not None
    out: list[ev.Event] = [_event(ev.WorkerSpawn, {}, phases=("cold",), trial=trial.get("index", 0),
                                  t_spawn=stamps["t_spawn"])]
    if started:
        out.append(_event(ev.Started, {}, t_main=stamps["t_main"]))
    if trial.get("import_s") is not None or trial.get("model_load_s") is not None or trial.get("ready_s") is not None:
        out.append(_event(ev.Loaded, {}, t_imported=stamps["t_imported"], t_model=stamps["t_model"],
                          t_tokenizer=stamps["t_tokenizer"], tokenizer_separate=not joint,
                          **({"t_import_start": stamps["t_import_start"]} if harness is not None else {})))
    return out + _requests("cold", (first, second))


def request_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    return _requests(name, phase.get("requests"))


def prefix_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    for pair in phase.get("pairs") or ():
        out += _requests(name, (pair.get("reuse"), pair.get("noreuse")))
        if pair.get("check"):
            out.append(_event(ev.PrefixCheck, pair["check"], phase=name, index=pair.get("index"), kind=pair.get("kind")))
    if "reuse_not_possible" in phase:
        out.append(_event(ev.ReuseNotPossible, {}, phase=name, reason=phase["reuse_not_possible"]))
    return out


def _planned(case: dict) -> dict:
    return {k: case[k] for k in ("id", "test", "shape", "depth", "batch", "prompt_tokens", "gen_tokens", "context_tokens")
            if k in case}


def sweep_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    ours = [f for f in m.get("failures") or () if f.get("phase") == name]
    out: list[ev.Event] = []
    for case in phase.get("cases") or ():
        cid = case.get("id")
        out += _requests(name, case.get("requests"))
        if case.get("fill"):
            out.append(_event(ev.DepthFill, case["fill"], phase=name, case=cid, depth=case.get("depth") or 0))
        if "reuse_not_possible" in case:
            out.append(_event(ev.ReuseNotPossible, {}, phase=name, case=cid, reason=case["reuse_not_possible"]))
        if case.get("check"):
            out.append(_event(ev.BatchCheck, {}, phase=name, case=cid, batch=case.get("batch") or 1, index=0,
                              sequences=case["check"].get("sequences") or ()))
        if case.get("status") == "unsupported":
            out.append(_event(ev.CaseUnsupported, {}, phase=name, case=cid, reason=case.get("reason"),
                              **_present(case, batch="batch")))
        # the case's failures after the model's own of this case are its errors (case_error events)
        theirs = sum(1 for f in ours if f.get("case") == cid)
        out += [_event(ev.CaseError, {}, phase=name, case=cid, reason=f.get("reason"))
                for f in (case.get("failures") or ())[theirs:]]
    return out


def quality_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    if not phase.get("chunks") and all(phase.get(k) is None for k in ("text", "n_ctx", "chunks_planned",
                                                                       "tokens_sha256", "reference_reason")):
        return []  # no quality_start: the phase never read its text
    return [_event(QualityStart, phase, phase=name, chunks=phase.get("chunks_planned")),
            *(_event(QualityChunkScored, c, phase=name) for c in phase.get("chunks") or ())]


def speculative_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    if phase.get("draft_status") is not None:
        mem = phase.get("draft_memory") or {}
        load = phase.get("draft_load_s")
        # the draft's shape is not kept: what its memory record took from it is
        shape = {k: mem[k] for k in ("file_bytes", "weight_bytes_per_token") if mem.get(k) is not None}
        growth = mem.get("load_footprint_bytes")
        out.append(_event(DraftLoaded, {}, phase=name, draft=phase.get("draft") or "", engine=phase.get("draft_engine"),
                          status=phase["draft_status"], reason=phase.get("draft_reason"),
                          t_load_start=1 if load is not None else None,
                          t_load_end=1 + _ns(load) if load is not None else None,
                          rss_before_bytes=mem.get("rss_before_load_bytes"), rss_bytes=mem.get("rss_after_load_bytes"),
                          engine_memory=mem.get("engine"), shape=shape or None,
                          **({"footprint_before_bytes": 1 << 40, "footprint_bytes": (1 << 40) + growth}
                             if growth is not None else {})))
    out += _requests(name, phase.get("plain"))
    for case in phase.get("cases") or ():
        for s in case.get("requests") or ():
            r = s.get("request") or {}
            out += _requests(name, (r,))
            if s.get("rounds"):
                out.append(_event(SpeculativeRounds, {}, phase=name, index=r.get("index"), kind=r.get("kind"),
                                  case=case.get("id"), k=case.get("k"), rounds=s["rounds"]))
            if s.get("check"):
                out.append(_event(SpeculativeCheck, s["check"], phase=name, index=r.get("index"), kind=r.get("kind"),
                                  case=case.get("id")))
    for case in phase.get("native") or ():
        for s in case.get("requests") or ():
            r = s.get("request") or {}
            out += _requests(name, (r,))
            told = (s.get("from_draft"), s.get("drafted_per_round"), s.get("accepted_per_round"))
            if any(x is not None for x in told):
                # where the engine told what it drafted it told what was accepted; else that follows from from_draft
                accepted = told[2] if told[1] is not None or told[0] is None else None
                out.append(_event(SpeculativeNative, {}, phase=name, index=r.get("index"), kind=r.get("kind"),
                                  case=case.get("id"), k=case.get("k"), impl=case.get("impl") or "",
                                  from_draft=told[0], drafted=told[1], accepted=accepted,
                                  unknown=_engine_unknown(case.get("unknown"))))
            if s.get("check"):
                out.append(_event(SpeculativeCheck, s["check"], phase=name, index=r.get("index"), kind=r.get("kind"),
                                  case=f"n{case.get('k')}"))
    if phase.get("draft_status") is not None and phase.get("draft") != "ngram" and phase.get("draft_memory"):
        mem = phase["draft_memory"]
        out.append(_event(DraftEnd, {}, phase=name, kv_cache_bytes=mem.get("kv_cache_bytes"),
                          engine_memory=mem.get("engine"), weights_held=mem.get("weights_held"),
                          mapped_resident_bytes=mem.get("mapped_resident_bytes")))
    if phase.get("native_reason"):
        out.append(_event(NativeRefused, {}, phase=name, reason=phase["native_reason"]))
    return out


def _engine_unknown(text: str | None) -> str | None:
    """What the engine said it does not tell: a native case's ``unknown`` before the sentences
    its builder adds (analyse/speculative_native.py OWN_WORDS)."""
    from macprof.analyse.speculative_native import OWN_WORDS

    cut = min((i for i in (text.find(w) for w in OWN_WORDS) if i >= 0), default=len(text)) if text else 0
    return text[:cut].removesuffix("; ") or None if text else None


def concurrency_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    for level in phase.get("levels") or ():
        out.append(_event(LoadLevel, level, phase=name, case=level.get("id"), t_start=0,
                          t_end=_ns(level.get("duration_s") or 0), time_limit_s=level.get("time_limit_s") or 0))
        out += _requests(name, level.get("requests"))
    return out


def conversation_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    if phase.get("template_source") is not None:
        out.append(_event(ConversationStart, phase, phase=name, turns=phase.get("turns_planned") or 0))
    for t in phase.get("turns") or ():
        out.append(_event(ConversationTurn, t, phase=name))
        out += _requests(name, (t.get("natural"), t.get("emptied")))
    for s in phase.get("stops") or ():  # a turn that no longer fit (fits false) or failed (its error)
        out.append(_event(ConversationTurn, {}, phase=name, stop_reason=s.get("reason"), fits=s.get("error") is not None,
                          **{k: s[k] for k in ("app", "turn", "error", "prompt_tokens") if s.get(k) is not None}))
        out += _requests(name, (s.get("natural"), s.get("emptied")))
    # an older log's `stopped` (the first stop's reason, its turn not kept) is words: nothing to rebuild
    return out


def tasks_events(phase: dict, m: dict, name: str) -> list[ev.Event]:
    if phase.get("summary") is None:
        return []  # no tasks_start: the phase never read its task file
    out: list[ev.Event] = [_event(TasksStart, phase, phase=name)]
    for r in phase.get("results") or ():
        out += [_event(TaskAttemptDone, a, phase=name, category=r.get("category"), checker=r.get("checker") or "")
                for a in r.get("attempts") or ()]
    return out


def _distributed(m: dict) -> list[ev.Event]:
    group = m.get("distributed")
    if not group:
        return []
    out: list[ev.Event] = []
    if group.get("ranks"):
        out.append(_event(RankGroup, group, size=len(group.get("hosts") or ())))
    for t in group.get("timelines") or ():
        out.append(_event(RankTimeline, t, requests=[{k: v for k, v in r.items() if k not in _TIMELINE_DERIVED}
                                                     for r in t.get("requests") or ()]))
    return out


def reader(phase: Phase) -> Callable[[dict, dict, str], list[ev.Event]]:
    """How a phase's record in a log is read back as the events it was built from: the function
    its registry line names (``unbuild``), else a sweep's cases, else its requests alone."""
    if phase.unbuild:
        return load(phase.unbuild)
    return sweep_events if phase.sweep else request_events


def rebuilt(log: RunLog, data: dict | None = None) -> RunLog:
    """The log built again from its own raw records (analyse/build.py build)."""
    from macprof.analyse.build import build

    try:
        return build(journal_of(log, data))
    except MacprofError:
        raise
    except Exception as exc:  # noqa: BLE001 - records a run could not have written: that log does not verify
        raise MacprofError(f"its raw records cannot be built into a log ({reason(exc)[:200]})") from None
