"""The run log: the machine, the bandwidth, and per model its identity, settings, phases and
memory. ``RunLog.to_json()`` is the file `macprof run` writes (schema SCHEMA_VERSION);
``RunLog.from_json`` reads one of that version (macprof.store.runlog migrates older ones first)."""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from msgspec import field
from typing import TYPE_CHECKING, Any, Self

from macprof.config import Settings, settings_from_dict
from macprof.config.dist import Distributed
from macprof.config.settings import SPECS, Spec
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
from macprof.phases import SWEEPS
from macprof.model.kind import HOST_ID, MODEL_PATH, NAME, OWN, PATH, REF, TEXT, VOCAB



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


def _as_logged(hint: Any) -> Any:
    """A declared setting's type as the log holds it: a float is a Number (the log keeps 512 as
    512), the distributed group its record."""
    if hint is float:
        return Number
    if hint is Distributed:
        return DistributedSettings
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, map(_as_logged, args))
    if typing.get_origin(hint) is tuple:
        return tuple[tuple(a if a is Ellipsis else _as_logged(a) for a in args)]  # type: ignore[misc]
    return hint


def _share_kind(spec: Spec) -> str | None:
    """What a setting's string value is to `macprof share`: as declared, else a word of its
    choices (vocabulary) or a file's path."""
    if spec.kind is not None:
        return spec.kind
    if spec.check.choices:
        return VOCAB
    return PATH if any(flag.kind == "file" for flag in spec.flags) else None


class _LoggedSettings(Record):
    """The base of ModelSettings: what it gives beside its fields."""

    def to_settings(self) -> Settings:
        return settings_from_dict(self.to_json())


def _model_settings() -> type[_LoggedSettings]:
    """ModelSettings from the declarations (config/settings.py Settings): a field per setting,
    in their order (the log's key order), typed as the log holds it (``_as_logged``). A setting
    every log has ("required", "always") keeps its declared default; one added after the first
    logs ("added") is nullable and defaults to ABSENT, as older logs lack its key. Its share
    kinds are its declarations' (``_share_kind``)."""
    hints = typing.get_type_hints(Settings)
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        logged = _as_logged(hints[f.name])
        added = SPECS[f.name].logged == "added"
        annotations[f.name] = logged | None if added else logged
        namespace[f.name] = ABSENT if added else f.default
    namespace.update(__annotations__=annotations, __module__=__name__, __qualname__="ModelSettings",
                     __doc__="macprof.config.Settings as the log records it (model/log.py _model_settings).",
                     KINDS={name: kind for name, spec in SPECS.items() if (kind := _share_kind(spec)) is not None})
    meta: Any = type(_LoggedSettings)  # the records' metaclass: keyword-only, ABSENT read as None
    return meta("ModelSettings", (_LoggedSettings,), namespace)


if TYPE_CHECKING:  # its fields are made at import, which mypy cannot follow: it reads them from the generated stub
    from macprof.model.logged_settings import ModelSettings
else:
    ModelSettings = _model_settings()


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
        """A sweep's record by name (`compare --case depth:d4096` names one): macprof/phases.py SWEEPS."""
        if name not in SWEEPS:
            raise KeyError(name)
        return getattr(self, name)

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
