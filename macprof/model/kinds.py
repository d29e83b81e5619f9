"""What each string field of the run log holds, by kind, so that `macprof share` removes what
identifies a person or a machine by what a value is, never by the name of its key ("source" is
a hardware table's name in one record and the path of the user's text in another).

Every field of every record the run log holds that can hold a string (a ``str``, a tuple of
them, a free-form dict or list) has its kind here, one mapping per record class;
tests/test_share_kinds.py walks the records and fails on a field that has none, so a field
added later is classified before it can be shared, never kept by default.

The kinds, and what `share` does with each (store/share.py):

- VOCAB: what macprof, the OS or the hardware names (a status, a method, the chip, a hash, a
  time, a version): kept as is. A user named "M4" must not take the chip's name apart.
- TEXT: free text that may quote anything (an engine's message, a stderr tail, a server's
  report) and every string inside a free-form value (engine_versions, software, a server's
  timings): paths lose their folders, URLs their credentials and query, and this machine's
  home directory, user name and host name go wherever they stand.
- OWN: macprof's own sentences about what the OS or a library did not give: treated as TEXT
  but for the user and host names (a host named "vm" leaves "(a VM reports none)" alone); a
  path or URL such a sentence quotes still goes.
- NAME: a model's name or a file's, which may come from a path (a file's stem, the id a
  server lists, which llama-cpp-python makes the model's full path): treated as TEXT.
- REF: a model reference as typed: one that is a path becomes ``<path of NAME>``; a store's
  reference (``org/repo:Q4_K_M``, ``ollama:ns/model``) is how others find the model, and is
  treated as TEXT.
- PATH: a file's path (the quality text): its folders go, its file name stays.
- MODEL_PATH: a model's path: removed (null); the model stays identified by its files' names,
  sizes and sha256, and the path, wherever it is quoted, becomes ``<path of NAME>``.
- HOST: a rank's host (user@host): ``<host N>``, wherever it stands; loopback is kept.
- HOST_ID: the short hash of a host name: removed (null).

A key that a record does not declare (a log of another version) is TEXT. Inside free-form
values, FREE_KEYS gives the kind of keys macprof itself writes there (a rank's ``host_id``).
"""

from __future__ import annotations

import functools
import typing
from typing import Any

from macprof.model.conversation import ConversationPhase, ConversationSummary, Turn
from macprof.model.distributed import DistributedSettings, GroupResult
from macprof.model.speculative import DraftMemory, SpeculativeCase, SpeculativePhase
from macprof.model.log import (Bandwidth, Identity, KvCache, Machine, MeasuredBandwidth, ModelFile, ModelMemory,
                               ModelResult, ModelSettings, Phases, Redacted, RunLog, RunMemory, Source, SpecBandwidth,
                               SystemMemory)
from macprof.model.phases import (BatchCheck, Ceiling, CeilingSide, Checks, ColdPhase, ColdSummary, ColdTrial,
                                  CountingRequest, DepthFill, DropCache, Failure, Itl, Metrics, OutputCheck, PhaseMemory,
                                  Prediction, PredictionSide, PrefixPair, PrefixPhase, PrefixSummary, Request, Residency,
                                  ServerReport, Summary, Sweep, SweepCase, TradeoffRow, WarmPhase)
from macprof.model.quality import KldSummary, QualityChunk, QualityPhase, QualityText
from macprof.model.records import Record, plain, record_fields
from macprof.model.serving import ConcurrencyPhase, LoadLevelResult
from macprof.model.tasks import (Proportion, TaskAttempt, TaskRefusal, TaskResult, TaskSetInfo, TasksPhase, TasksSummary,
                                 ToolCall, ToolValiditySummary)
from macprof.model.telemetry import (Baseline, ColdEnergy, Energy, PhaseTelemetry, RequestEnergy, TelemetryRaw,
                                     TelemetrySample, Throttle)

VOCAB, TEXT, OWN, NAME, REF = "vocabulary", "text", "own message", "model name", "model reference"
PATH, MODEL_PATH, HOST, HOST_ID = "path", "model path", "host", "host id"
KINDS = (VOCAB, TEXT, OWN, NAME, REF, PATH, MODEL_PATH, HOST, HOST_ID)

# keys macprof writes inside free-form values, and their kind (any other key's strings: TEXT)
FREE_KEYS = {"host_id": HOST_ID}  # GroupResult.ranks: each rank's machine facts

_V, _T, _O = VOCAB, TEXT, OWN
FIELDS: dict[type, dict[str, str]] = {
    # -- the run and the machine
    RunLog: {"tool_version": _V, "started_utc": _V, "ended_utc": _V, "software": _T, "definitions": _V},
    Redacted: {"by": _V, "removed": _V},  # share's own words, which hold none of what it removed
    Machine: {"os": _V, "os_version": _V, "arch": _V, "cpu_model": _V, "host_id": HOST_ID, "chip": _V,
              "power_source": _V, "thermal_state": _V, "unknown": _O, "core_levels": _V, "power_mode": _V,
              "sources": _O, "cores_by_kind": _V},
    SpecBandwidth: {"source": _V, "reason": _O},
    MeasuredBandwidth: {"device": _V, "method": _V, "utc": _V, "reason": _T, "tflops_method": _V},
    # -- a model
    ModelResult: {"shape": _T, "shape_error": _T, "engine_versions": _T},
    Identity: {"name": NAME, "engine": _V, "path": MODEL_PATH, "quant_label": _V, "quant_declared": _V,
               "architecture": _V},
    Source: {"ref": REF, "store": _V, "path": MODEL_PATH},
    ModelFile: {"name": NAME, "sha256": _V},
    ModelSettings: {"phases": _V, "shapes": _V, "kv_type": _V, "reference": NAME, "text": PATH, "app_order": _V,
                    "chat_template": PATH, "tasks": PATH, "draft": REF,
                    "speculative_impl": _V},
    DistributedSettings: {"hosts": HOST, "backend": _V, "parallel": _V},
    GroupResult: {"backend": _V, "parallel": _V, "hosts": HOST, "ranks": _T, "timelines": _T, "comm_method": _V,
                  "comm": _T, "bytes_per_token": _T, "prediction": _T, "reason": _T},
    ModelMemory: {"engine_after_load": _T},
    KvCache: {"measured_note": _O},
    # a worker is named after its model ("NAME:warm:0:..."): its name is the model's
    Failure: {"event": _V, "model": NAME, "worker": NAME, "status": _V, "reason": _T, "phase": _V, "case": _V,
              "kind": _V, "mode": _V, "signal": _V, "stderr_tail": _T},
    # -- requests and phases
    Request: {"kind": _V, "mode": _V, "status": _V, "error": _T, "tokens": _T, "engine_memory": _T, "case": _V},
    # cached_tokens_source may quote a line of the server's own log
    ServerReport: {"count_source": _V, "chunk_tokens_source": _V, "prompt_tokens_source": _V, "finish_reason": _T,
                   "eos": _V, "timings": _T, "flags": _T, "cached_tokens_source": _T},
    CountingRequest: {"status": _V, "named_by": _V, "reason": _T},
    PhaseMemory: {"engine": _T, "weights_held": _V},
    WarmPhase: {"thermal_state_start": _V, "thermal_state_end": _V},
    PrefixPhase: {"reuse_not_possible": _T, "thermal_state_start": _V, "thermal_state_end": _V},
    PrefixPair: {"kind": _V},
    Sweep: {"thermal_state_start": _V, "thermal_state_end": _V},
    SweepCase: {"id": _V, "status": _V, "shape": _V, "reason": _T, "reuse_not_possible": _T},
    TradeoffRow: {"predicted_with": _V, "bound": _V},
    Ceiling: {"reason": _O, "kv_type": _V},
    CeilingSide: {"reason": _O, "bound": _V, "prefill_reason": _O},
    Prediction: {"reason": _O},
    PredictionSide: {"reason": _O, "bound": _V},
    ColdTrial: {"status": _V, "tokenizer_note": _T, "note": _T},
    ColdEnergy: {"reason": _O, "domain": _V, "baseline_from": _V},
    DropCache: {"reason": _T},
    Residency: {"label": _V, "method": _V},
    QualityPhase: {"tokens_sha256": _V, "reference": NAME, "reference_reason": _T, "rescore_reason": _T},
    QualityText: {"source": PATH, "sha256": _V},
    ConcurrencyPhase: {"slo": _T},
    # the task set's own words (a task's id, its reply, the checker's message): free text
    TasksPhase: {"prompt_format": _T, "tool_format": _V, "generation": _O},
    # the template's path is a file's (--chat-template) or where the model's came from
    ConversationPhase: {"template_source": _V, "template_path": PATH, "template_sha256": _V, "app_order": _V,
                        "stopped": _O, "holds": _O},
    ConversationSummary: {"stops": _V},
    # the draft as the command line named it: a path, a hub id, an Ollama name, or "ngram"
    SpeculativePhase: {"draft": REF, "draft_engine": _V, "draft_status": _V, "draft_reason": _T, "native_reason": _T},
    SpeculativeCase: {"id": _V, "prediction_reason": _O, "impl": _V, "unknown": _T},
    DraftMemory: {"engine": _T, "weights_held": _V},
    Turn: {"reuse_refused": _O, "stop_kind": _V, "stop_reason": _O, "reuse_unreported": _O, "not_emptied": _O},
    TaskSetInfo: {"source": PATH, "sha256": _V},
    TaskRefusal: {"task": _T, "reason": _T},
    TaskResult: {"task": _T, "category": _T, "checker": _V},
    TaskAttempt: {"task": _T, "status": _V, "error": _T, "tokens": _T, "stop": _V, "text": _T, "message": _T},
    TasksSummary: {"energy_reason": _O, "tokens_reason": _O},
    LoadLevelResult: {"id": _V, "mode": _V, "goodput_reason": _O, "error_messages": _T},
    # -- telemetry
    TelemetryRaw: {"phase": _V, "source": _V, "total_domain": _V, "domains": _V, "unavailable": _O,
                   "power_source_start": _V, "power_source_end": _V, "thermal_pressure_start": _V,
                   "thermal_pressure_end": _V},
    PhaseTelemetry: {"thermal_pressure_max": _V},
    TelemetrySample: {"watts": _T, "temps_c": _T, "thermal_pressure": _V},
    Baseline: {"reason": _O},
    Energy: {"reason": _O, "domain": _V, "note": _O},
    RequestEnergy: {"kind": _V, "case": _V, "mode": _V, "reason": _O},
    Throttle: {"reason": _O, "pressure_from": _V, "pressure_to": _V},
    # records with no string field: listed, so the test tells "none" from "forgotten"
    **{cls: {} for cls in (SystemMemory, RunMemory, Bandwidth, Phases, Summary, Metrics, Itl, OutputCheck, Checks,
                           BatchCheck, DepthFill, ColdPhase, ColdSummary, PrefixSummary, QualityChunk, KldSummary,
                           Proportion, ToolCall, ToolValiditySummary)},
}


def _records_in(hint: Any) -> type | None:
    """The record class a field holds (itself, or in a tuple or a dict), or None."""
    hint = plain(hint)
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint
    if origin is tuple:
        return _records_in(typing.get_args(hint)[0])
    if origin is dict:
        return _records_in(typing.get_args(hint)[1])
    return None


class Field(typing.NamedTuple):
    kind: str | None  # None: a field of records, or one FIELDS does not declare
    record: type | None = None  # the record class it holds
    mapping: bool = False  # a dict of records (else one, or a tuple of them)


@functools.cache
def fields_of(cls: type) -> dict[str, Field]:
    """Per JSON key of ``cls``: its kind, or the record class it holds."""
    hints = typing.get_type_hints(cls)
    declared: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's fields after its bases'
        declared.update(FIELDS.get(klass, {}))
    out: dict[str, Field] = {}
    for f in record_fields(cls):
        inner = _records_in(hints[f.name])
        mapping = typing.get_origin(plain(hints[f.name])) is dict
        out[f.name] = Field(None, inner, mapping) if inner is not None else Field(declared.get(f.name))
    return out


def holds_text(hint: Any) -> bool:
    """Whether a field typed ``hint`` can hold a string: str, Any, or a container of either."""
    hint = plain(hint)
    if hint in (str, Any):
        return True
    if typing.get_origin(hint) is typing.Literal:  # a word of model/vocab.py
        return any(isinstance(a, str) for a in typing.get_args(hint))
    return any(holds_text(a) for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis)


def reachable(root: type = RunLog) -> list[type]:
    """Every record class a run log can hold, ``root`` first."""
    seen: list[type] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        todo += [f.record for f in fields_of(cls).values() if f.record is not None]
    return seen
