"""The journal's events: what the orchestrator, the worker and the measurement protocols write,
one JSON object per line with its kind under ``"event"``. Writers construct these records and
emit ``to_json()``; readers get them back from ``parse_event``. The orchestrator adds ``model``
(and ``worker``, for what a worker streamed) by building a new event, never by editing one. An
event that journals a record is made from it (``Journals``, model/records.py): written with
``of(record, ...)``, read with ``record()``."""

from __future__ import annotations

from typing import Any

from macprof.model import phases
from macprof.model.log import Bandwidth, Identity, Machine, ModelSettings, SystemMemory
from macprof.model.phases import DropCache, OutputCheck, PlannedCase, Residency
from macprof.model.event_base import Event
from macprof.model.phase_events import CommProfile, RankGroup, RankTimeline
from macprof.model.records import ABSENT, Journals
from macprof.model.resolved import Resolved
from macprof.model.telemetry import TelemetryRaw
from macprof.phases import REGISTRY, load


# -- the orchestrator ------------------------------------------------------------------------
class RunStart(Event):
    KIND = "run_start"
    schema_version: int | None = None
    tool_version: str | None = None
    utc: str | None = None
    machine: Machine | None = None
    software: dict[str, Any] | None = None
    bandwidth: Bandwidth | None = None
    memory: SystemMemory | None = None
    # what the run measures, so `--resume` can refuse a command that asks for something else:
    # per model its name, engine, resolved path and settings (journals before it lack it)
    models: tuple[dict[str, Any], ...] | None = ABSENT


class ModelStart(Event):
    KIND = "model_start"
    utc: str | None = None
    identity: Identity
    shape: dict[str, Any] | None = None
    shape_error: str | None = None
    files_error: str | None = ABSENT  # journals before it existed lack it
    settings: ModelSettings
    memory: SystemMemory | None = None


class Plan(Event):
    """The sweep cases planned for a model, refused ones included (journals before it existed
    are rebuilt with the plan recomputed from the settings), and what the parent prepared for
    each of its phases that prepares (run/phases/api.py: the record's JSON, under the phase's
    name; a phase refused there is absent), which --resume reads back instead of preparing
    again (journals before it lack the key: their phases are prepared again)."""

    KIND = "plan"
    cases: dict[str, tuple[PlannedCase, ...]]
    prepared: dict[str, dict[str, Any]] | None = ABSENT


class ColdTrial(Event):
    KIND = "cold_trial"
    index: int
    drop_cache: DropCache | None = None
    residency: Residency


class WorkerSpawn(Event):
    KIND = "worker_spawn"
    phases: tuple[str, ...]
    trial: int = 0
    t_spawn: int
    pid: int | None = None


class Failure(Event, Journals[phases.Failure]):
    """A worker that crashed, hung or reported an error, or a model or case refused: the log's
    failure record as the orchestrator journals it."""

    KIND = "failure"
    REQUIRED = ("status",)
    DEFAULTS = {"phase": None}  # a line without a phase failed none (the log's record: the key absent)


class Interrupted(Event):
    KIND = "interrupted"
    utc: str | None = None


class ModelEnd(Event):
    KIND = "model_end"
    memory: SystemMemory | None = None


class RunEnd(Event):
    KIND = "run_end"
    utc: str | None = None
    complete: bool = False
    memory: SystemMemory | None = None


# -- the worker ------------------------------------------------------------------------------
class Started(Event):
    KIND = "started"
    pid: int | None = None
    t_main: int | None = None
    rss_bytes: int | None = None


class Loaded(Event):
    KIND = "loaded"
    t_import_start: int | None = ABSENT  # macprof's own start-up in the worker ends (absent in older journals)
    t_imported: int | None = None
    t_model: int | None = None
    t_tokenizer: int | None = None
    rss_bytes: int | None = None
    engine_memory: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    vocab_size: int | None = None
    tokenizer_separate: bool = True
    footprint_bytes: int | None = ABSENT  # macOS: phys_footprint (collect/footprint.py), GPU buffers included
    engine_settings: dict[str, Resolved] | None = ABSENT  # every engine setting as asked and resolved (older journals lack it)


class PhaseStart(Event):
    KIND = "phase_start"
    DURABLE = False
    phase: str
    rss_bytes: int | None = None
    footprint_bytes: int | None = ABSENT  # macOS only: phys_footprint now
    footprint_max_bytes: int | None = ABSENT  # macOS only: the process's lifetime maximum so far
    thermal_state: str | None = ABSENT  # macOS only: NSProcessInfo.thermalState at the boundary
    t: int | None = ABSENT  # perf_counter_ns as the phase begins (journals before telemetry lack it)
    t_idle_start: int | None = ABSENT  # the start of the idle wait before it (the power baseline's window)


class PhaseEnd(Event):
    KIND = "phase_end"
    phase: str
    rss_bytes: int | None = None
    os_peak_rss_bytes: int | None = ABSENT  # the worker's own OS high-water mark (collect/peak.py)
    os_peak_scope: str | None = ABSENT  # "phase" (reset at its start) or "process" (lifetime maximum)
    peak_rss_bytes: int | None = ABSENT  # max of the parent's RSS samples and a phase-scoped OS peak
    rss_samples: int | None = ABSENT
    footprint_bytes: int | None = ABSENT  # macOS only, as phase_start's
    footprint_max_bytes: int | None = ABSENT
    thermal_state: str | None = ABSENT
    peak_footprint_bytes: int | None = ABSENT  # added by the parent (collect/footprint.py, phase_peak)
    footprint_samples: int | None = ABSENT
    t: int | None = ABSENT  # perf_counter_ns as the phase ends
    weights_held: str | None = ABSENT  # engines/base.py WEIGHTS_HELD; absent where a server holds them
    mapped_resident_bytes: int | None = ABSENT  # mapped weights: the model files' resident bytes (mincore)


class PhaseMemory(Event):
    KIND = "phase_memory"
    phase: str
    engine_memory: dict[str, Any] | None = None


class Error(Event):
    KIND = "error"
    message: str | None = None


class Done(Event):
    KIND = "done"


# -- the measurement protocols (macprof/run/phases) -----------------------------------------------
class _RequestHead(Event):
    """What a request_start and its request share: which phase, index, kind, case..."""

    phase: str
    index: int
    kind: str
    mode: str | None = ABSENT  # prefix
    case: str | None = ABSENT  # sweeps
    batch: int | None = ABSENT  # batch
    cached_tokens_before: int | None = ABSENT  # depth


class RequestStart(_RequestHead):
    """An item begins (a request, a task attempt, a conversation turn's prompt): before its
    prompt is rendered, tokenized or sent; the parent's per-item timeout runs from it."""

    KIND = "request_start"
    DURABLE = False
    t0: int | None = ABSENT  # a task attempt's start stamp: the wall time of an attempt the parent cuts


class RequestEnd(_RequestHead):
    """An item announced by a request_start ended without a record of its own (a warm-up a
    resumed run does not record again, a conversation turn's prompt rendered): the parent's
    timeout and blame stop here."""

    KIND = "request_end"
    DURABLE = False
    ENDS_ITEM = True


class Request(_RequestHead, Journals[phases.Request]):
    """One measured request: the log's request record less what its timestamps give, raw
    timestamps and token ids (a batch's: one list per sequence; a server's: its chunks' arrivals
    and texts, and what it reported)."""

    KIND = "request"
    ENDS_ITEM = True
    REQUIRED = ("status", "t0")
    # a batch's request has no reuse figures of its own (absent from its line; the log's record:
    # null), and a line says the engine's memory (null where unknown)
    DEFAULTS = {"reused_tokens": ABSENT, "computed_prompt_tokens": ABSENT, "cached_tokens_after": ABSENT,
                "kv_cache_bytes": ABSENT, "engine_memory": None}


class PrefixCheck(Event, Journals[OutputCheck]):
    """The reuse and noreuse outputs of one prompt compared: an OutputCheck, journaled."""

    KIND = "prefix_check"
    CHECKS = True
    phase: str
    index: int
    kind: str


class DepthFill(Event, Journals[phases.DepthFill]):
    """A depth case's cache filled once (a phases.DepthFill, journaled with its case)."""

    KIND = "depth_fill"
    phase: str
    case: str
    depth: int


class BatchCheck(Event):
    KIND = "batch_check"
    CHECKS = True
    phase: str
    case: str
    batch: int
    index: int
    sequences: tuple[OutputCheck, ...]


class CaseError(Event):
    KIND = "case_error"
    phase: str
    case: str
    reason: str | None = None


class ReuseNotPossible(Event):
    """The engine's cache could not be cut back to a prefix (the prefix phase: that pair was
    measured from an empty cache; a depth case: its fill was recomputed, untimed, before each
    request); ``reason`` is the engine's own."""

    KIND = "reuse_not_possible"
    phase: str
    case: str | None = ABSENT
    reason: str


class CaseUnsupported(Event):
    KIND = "case_unsupported"
    phase: str
    case: str
    batch: int | None = ABSENT
    reason: str | None = None


class Telemetry(Event, Journals[TelemetryRaw]):
    """The parent's telemetry of one phase (run/sampling.py), journaled after its phase_end."""

    KIND = "telemetry"


# -- the registry ----------------------------------------------------------------------------
# the events of the run itself and of the phases written before phases declared their own; then
# each phase's own, as its registry line names them (macprof/phases.py ``events``)
CORE: tuple[type[Event], ...] = (
    RunStart, ModelStart, Plan, ColdTrial, WorkerSpawn, Failure, Interrupted, ModelEnd, RunEnd,
    Started, Loaded, PhaseStart, PhaseEnd, PhaseMemory, Error, Done,
    RequestStart, RequestEnd, Request, PrefixCheck, DepthFill, BatchCheck, CaseError, CaseUnsupported,
    ReuseNotPossible, Telemetry, RankGroup, RankTimeline, CommProfile)
EVENTS: dict[str, type[Event]] = {cls.KIND: cls for cls in CORE + tuple(
    cls for p in REGISTRY.values() if p.events for cls in load(p.events))}


def parse_event(data: Any, where: str = "journal") -> Event | None:
    """The event of one journal line (already read as JSON); None for what is not an event or
    is of a kind this macprof does not know. A known kind with a missing or malformed field
    raises MacprofError naming it."""
    if not isinstance(data, dict) or not isinstance(data.get("event"), str):
        return None
    cls = EVENTS.get(data["event"])
    if cls is None:
        return None
    return cls.from_json(data, f"{where}: {data['event']} event")  # "event" is the tag msgspec checks
