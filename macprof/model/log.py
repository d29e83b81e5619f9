"""The run log: the machine, the bandwidth, and per model its identity, settings, phases and
memory. ``RunLog.to_json()`` is the file `macprof run` writes (schema SCHEMA_VERSION);
``RunLog.from_json`` reads one of that version (macprof.store.runlog migrates older ones first)."""

from __future__ import annotations

from msgspec import field
from typing import TYPE_CHECKING, Any, Self

from macprof.config import Settings, settings_from_dict
from macprof.errors import MacprofError
from macprof.model.definitions import SCHEMA_VERSION
from macprof.model.conversation import ConversationPhase
from macprof.model.distributed import DistributedSettings, GroupResult
from macprof.model.phases import ColdPhase, Failure, PrefixPhase, Sweep, WarmPhase
from macprof.model.quality import QualityPhase
from macprof.model.tasks import TasksPhase
from macprof.model.speculative import SpeculativePhase
from macprof.model.records import ABSENT, Count, Number, Positive, Record, Sha256
from macprof.model.resolved import Resolved
from macprof.model.vocab import EngineName, Store
from macprof.model.serving import ConcurrencyPhase
from macprof.model.kind import HOST_ID, MODEL_PATH, NAME, OWN, PATH, REF, TEXT, VOCAB

_DEFAULT = Settings()


# -- the machine ---------------------------------------------------------------------------
class SystemMemory(Record):
    available_bytes: int | None = None
    swap_used_bytes: int | None = None


class RunMemory(Record):
    start: SystemMemory | None = None
    end: SystemMemory | None = None


class Machine(Record):
    # in every log (the schema's "required"), though code may construct the record without them
    KINDS = {"os": VOCAB, "os_version": VOCAB, "arch": VOCAB, "cpu_model": VOCAB, "host_id": HOST_ID, "chip": VOCAB,
             "power_source": VOCAB, "thermal_state": VOCAB, "unknown": OWN, "core_levels": VOCAB,
             "power_mode": VOCAB, "sources": OWN, "cores_by_kind": VOCAB}
    REQUIRED_KEYS = (
        "os", "os_version", "arch", "cpu_model", "memory_bytes")
    os: str | None = None
    os_version: str | None = None
    arch: str | None = None
    cpu_model: str | None = None
    cores_logical: int | None = None
    cores_physical: int | None = None
    cores_performance: int | None = None
    cores_efficiency: int | None = None
    memory_bytes: int | None = None
    host_id: str | None = None
    chip: str | None = None
    gpu_cores: int | None = None
    power_source: str | None = None
    low_power_mode: bool | None = None
    thermal_state: str | None = None
    unknown: dict[str, str] = field(default_factory=dict)  # field -> why it is null
    core_levels: tuple[dict[str, Any], ...] | None = ABSENT  # macOS: the chip's core clusters
    power_mode: str | None = ABSENT  # macOS: automatic / low / high (pmset); absent from older logs
    gpu_working_set_bytes: int | None = ABSENT  # macOS: Metal's recommendedMaxWorkingSetSize
    sources: dict[str, str] | None = ABSENT  # field -> where its value came from (macOS)
    cores_by_kind: dict[str, int] | None = ABSENT  # macOS: cores per kind as macOS names them (Super, Performance, Efficiency)


class SpecBandwidth(Record):
    KINDS = {"source": VOCAB, "reason": OWN}
    gbs: Number | None = None
    source: str | None = None
    reason: str | None = None


class MeasuredBandwidth(Record):
    """The bandwidth (and matmul) probe; a failed probe leaves only ``gbs`` (null) and ``reason``."""

    KINDS = {"device": VOCAB, "method": VOCAB, "utc": VOCAB, "reason": TEXT, "tflops_method": VOCAB}

    gbs: Number | None = None
    best_gbs: Number | None = ABSENT
    stdev_gbs: Number | None = ABSENT
    device: str | None = ABSENT
    method: str | None = ABSENT
    utc: str | None = ABSENT
    cached: bool | None = ABSENT
    reason: str | None = None
    tflops: Number | None = ABSENT  # absent from logs before the matmul probe
    tflops_method: str | None = ABSENT


class Bandwidth(Record):
    spec: SpecBandwidth | None = None
    measured: MeasuredBandwidth | None = None
    tflops: Number | None = None  # published peak, where Apple gives one


# -- one model -----------------------------------------------------------------------------
class ModelFile(Record):
    KINDS = {"name": NAME, "sha256": VOCAB}
    REQUIRED_KEYS = ("name", "bytes", "sha256")  # in every log (the schema's required), though code may leave them out
    name: str = ""
    bytes: int = 0
    sha256: Sha256 = ""


class Source(Record):
    """A model named on the command line: the reference as typed, the store it was found in
    and the path it resolved to (models.toml entries have none)."""

    KINDS = {"ref": REF, "store": VOCAB, "path": MODEL_PATH}

    REQUIRED_KEYS = ("ref", "store", "path")  # in every log (the schema's required), though code may leave them out
    ref: str = ""
    store: Store = ""
    path: str | None = None


class InputFile(Record):
    """A file a model's run reads besides the model's own (collect/facts.py run_inputs): what it
    is to the run, its path, size and sha256, recorded once when the model starts; a resume
    refuses a run whose inputs changed since (run/resume.py)."""

    KINDS = {"role": VOCAB, "path": PATH, "sha256": VOCAB}
    role: str = ""  # "the task file", "the chat template", "the quality text", "the draft"
    path: str = ""
    bytes: Count = 0
    sha256: Sha256 = ""


class Identity(Record):
    KINDS = {"name": NAME, "engine": VOCAB, "path": MODEL_PATH, "quant_label": VOCAB, "quant_declared": VOCAB,
             "architecture": VOCAB}
    REQUIRED_KEYS = ("name", "engine", "path", "total_bytes", "files")  # in every log, though code may leave them out
    name: str = ""
    engine: EngineName = ""
    path: str | None = None
    quant_label: str | None = None
    quant_declared: str | None = None
    architecture: str | None = None
    n_params: int | None = None
    total_bytes: Count = 0
    files: tuple[ModelFile, ...] = ()
    source: Source | None = ABSENT  # only a model named on the command line has one
    inputs: tuple[InputFile, ...] | None = ABSENT  # the run's other files (absent from older logs)

    @property
    def quant(self) -> str | None:
        """The quantization the model is known by: as declared (models.toml's quant, or its file's
        own), else as macprof labelled it."""
        return self.quant_declared or self.quant_label


class ModelSettings(Record):
    """macprof.config.Settings as the log records it: each setting is declared once, as a field
    of config.settings.Settings, whose order is this record's key order. These fields are written
    out for the type checker; tests/test_model_schema.py holds them to the declarations (names,
    order, types, defaults). A setting added after the first logs ("added") defaults to ABSENT:
    older logs lack its key."""

    KINDS = {"phases": VOCAB, "shapes": VOCAB, "kv_type": VOCAB, "reference": NAME, "text": PATH, "app_order": VOCAB,
             "chat_template": PATH, "tasks": PATH, "draft": REF, "speculative_impl": VOCAB, "preset": VOCAB}

    phases: tuple[str, ...] = _DEFAULT.phases
    prompt_tokens: int = _DEFAULT.prompt_tokens
    gen_tokens: int = _DEFAULT.gen_tokens
    prefix_tokens: int = _DEFAULT.prefix_tokens
    reps: int = _DEFAULT.reps
    cold_trials: int = _DEFAULT.cold_trials
    threads: int | None = _DEFAULT.threads
    timeout: Number = _DEFAULT.timeout
    delay: Number = _DEFAULT.delay
    drop_cache: bool = _DEFAULT.drop_cache
    force: bool = _DEFAULT.force
    prompt_grid: tuple[int, ...] | None = ABSENT
    gen_grid: tuple[int, ...] | None = ABSENT
    shapes: tuple[str, ...] | None = ABSENT
    depths: tuple[int, ...] | None = ABSENT
    batches: tuple[int, ...] | None = ABSENT
    kv_type: str | None = ABSENT  # absent from logs before the option: f16
    distributed: DistributedSettings | None = ABSENT  # a sharded model: hosts, backend, parallel, link_gbs
    quality_tokens: int | None = ABSENT  # absent from logs before the quality phase
    quality_ctx: int | None = ABSENT
    reference: str | None = ABSENT
    text: str | None = ABSENT
    draft: str | None = ABSENT  # the speculative phase's (absent before it)
    draft_tokens: tuple[int, ...] | None = ABSENT
    ngram: int | None = ABSENT
    speculative_impl: str | None = ABSENT  # absent before the native paths: macprof's loop
    concurrency: tuple[int, ...] | None = ABSENT  # the concurrency phase's levels (absent before it)
    rates: tuple[Number, ...] | None = ABSENT
    load_requests: int | None = ABSENT
    load_seconds: Number | None = ABSENT
    slo_ttft: Number | None = ABSENT
    slo_itl: Number | None = ABSENT
    turns: int | None = ABSENT  # the conversation phase's (absent before it)
    turn_tokens: int | None = ABSENT
    system_tokens: int | None = ABSENT
    tool_tokens: int | None = ABSENT
    apps: int | None = ABSENT
    app_order: str | None = ABSENT
    serve_slots: int | None = ABSENT
    chat_template: str | None = ABSENT
    tasks: str | None = ABSENT  # the tasks phase's (absent before it)
    attempts: int | None = ABSENT
    temperature: Number | None = ABSENT
    seed: int | None = ABSENT
    preset: str | None = ABSENT  # --preset (absent before it)

    def to_settings(self) -> Settings:
        return settings_from_dict(self.to_json())


class KvCache(Record):
    KINDS = {"measured_note": OWN}
    bytes_per_token: Number | None = None
    context_tokens: int | None = None
    computed_bytes: Number | None = None
    measured_bytes: int | None = None
    measured_note: str | None = None


class ModelMemory(Record):
    KINDS = {"engine_after_load": TEXT}
    REQUIRED_KEYS = ("kv_cache",)  # in every log (the schema's required), though code may leave them out
    rss_before_load_bytes: int | None = None
    rss_after_load_bytes: int | None = None
    footprint_after_load_bytes: int | None = ABSENT  # macOS: phys_footprint once loaded
    engine_after_load: dict[str, Any] | None = None
    kv_cache: KvCache = field(default_factory=KvCache)
    system_before: SystemMemory | None = None
    system_after: SystemMemory | None = None


# a phase whose registry line names its record (macprof/phases.py ``record``) instead of a field
# here gets one at import (with_registry_records), read as ``get(name)``
class Phases(Record):
    """The phases the model's settings asked for; the others are absent (None)."""

    cold: ColdPhase | None = ABSENT
    warm: WarmPhase | None = ABSENT
    prefix: PrefixPhase | None = ABSENT
    grid: Sweep | None = ABSENT
    depth: Sweep | None = ABSENT
    batch: Sweep | None = ABSENT
    bench: Sweep | None = ABSENT
    quality: QualityPhase | None = ABSENT
    speculative: SpeculativePhase | None = ABSENT
    concurrency: ConcurrencyPhase | None = ABSENT
    conversation: ConversationPhase | None = ABSENT
    tasks: TasksPhase | None = ABSENT

    def sweep(self, name: str) -> Sweep | None:
        """grid, depth, batch or bench by name (`compare --case depth:d4096` names one)."""
        return {"grid": self.grid, "depth": self.depth, "batch": self.batch, "bench": self.bench}[name]

    def get(self, name: str) -> Any:
        """Phase ``name``'s record, or None (not asked for, or a phase this macprof does not know)."""
        return getattr(self, name, None)


def with_registry_records(cls: type[Phases]) -> type[Phases]:
    """``cls`` with a field, after its own, for each registry phase that declares its record
    (``record``: "module:Record", a module that does not import this one) rather than a field
    of ``Phases``: the same class name, so the schema's and share's walk of the log's types see it."""
    from macprof.phases import REGISTRY, load

    extra = {name: load(p.record) | None for name, p in REGISTRY.items() if p.record and name not in cls.__struct_fields__}
    if not extra:
        return cls
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                 "__annotations__": extra, **dict.fromkeys(extra, ABSENT)}
    meta: Any = type(cls)  # the records' metaclass: keyword-only, ABSENT read as None
    return meta(cls.__name__, (cls,), namespace)


if not TYPE_CHECKING:  # the type checker reads the fields written out above
    Phases = with_registry_records(Phases)


class ModelResult(Record):
    # in every log (the schema's "required"), though code may construct the record without them
    KINDS = {"shape": TEXT, "shape_error": TEXT, "engine_versions": TEXT}
    REQUIRED_KEYS = (
        "identity", "settings", "phases", "memory", "failures", "complete")
    identity: Identity = field(default_factory=Identity)
    shape: dict[str, Any] | None = None  # the model's metadata: macprof.collect.modelinfo
    shape_error: str | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    engine_versions: dict[str, Any] | None = None
    # every engine setting as asked and as the engine resolved it (model/resolved.py); absent from older logs
    engine_settings: dict[str, Resolved] | None = ABSENT
    phases: Phases = field(default_factory=Phases)
    memory: ModelMemory = field(default_factory=ModelMemory)
    failures: tuple[Failure, ...] = ()
    complete: bool = False
    distributed: GroupResult | None = ABSENT  # a model sharded over an MLX distributed group


# -- the run -------------------------------------------------------------------------------
class Redacted(Record):
    # share's own words, which hold none of what it removed
    KINDS = {"by": VOCAB, "removed": VOCAB}
    by: str | None = None
    removed: tuple[str, ...] = ()


class Digest(Record):
    """The log's content digest (store/digest.py): sha256 of its canonical form, which ``form``
    names; it detects an edit made after the log was written, not who made the run."""

    KINDS = {"sha256": VOCAB, "form": VOCAB}
    REQUIRED_KEYS = ("sha256", "form")  # in every log that has one, though code may leave them out
    sha256: Sha256 = ""
    form: str = ""


class RunLog(Record):
    # in every log (the schema's "required"), though code may construct the record without them
    KINDS = {"tool_version": VOCAB, "started_utc": VOCAB, "ended_utc": VOCAB, "software": TEXT, "definitions": VOCAB}
    REQUIRED_KEYS = (
        "schema_version", "tool_version", "started_utc", "ended_utc", "complete", "machine", "software",
        "definitions", "memory", "models")
    schema_version: Positive = SCHEMA_VERSION
    tool_version: str | None = None
    started_utc: str | None = None
    ended_utc: str | None = None
    complete: bool = False
    interrupted: bool = False
    machine: Machine | None = None
    software: dict[str, str | None] | None = None  # package -> its version (null: not installed), collect/machine.py
    definitions: dict[str, Any] = field(default_factory=dict)
    bandwidth: Bandwidth | None = ABSENT  # absent from schema 1 logs until migrated
    memory: RunMemory = field(default_factory=RunMemory)
    models: tuple[ModelResult, ...] = ()
    redacted: Redacted | None = ABSENT  # a `macprof share` copy
    migrated_from: int | None = ABSENT
    digest: Digest | None = ABSENT  # written by `save` (store/digest.py); absent from logs before it

    @classmethod
    def from_json(cls, data: Any, where: str | None = None) -> Self:
        """A log of this schema version (older ones are migrated by macprof.store.runlog first)."""
        version = data.get("schema_version", SCHEMA_VERSION) if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise MacprofError(f"{where or 'run log'}: schema_version {version!r} is not {SCHEMA_VERSION}: migrate it first")
        return super().from_json(data, where)
