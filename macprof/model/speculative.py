"""The speculative phase's journal events and run-log records (run/phases/speculative.py
emits the events, analyse/speculative.py builds the records); registered with the other
events in model/events.py."""

from __future__ import annotations

from typing import Any

from macprof.model.event_base import Event
from macprof.model.phases import Checks, Failure, OutputCheck, PhaseMemory, Request

from macprof.model.records import ABSENT, Count, Journals, Number, Positive, Record
from macprof.model.vocab import DraftStatus
from macprof.model.kind import NAME, OWN, PATH, REF, TEXT, VOCAB


# -- raw, as journaled ---------------------------------------------------------------------------
class Round(Record):
    """One round of a speculative request: k drafted, a accepted, the four stamps
    (perf_counter_ns) and the tokens it drafted and emitted (the a accepted and the target's)."""

    drafted: Count
    accepted: Count
    t_draft_start: int
    t_verify_start: int
    t_verify_end: int
    t_rewind_end: int
    drafts: tuple[int, ...] = ()
    tokens: tuple[int, ...] = ()


class DraftLoaded(Event):
    """The speculative phase's draft: loaded (its load's stamps, memory and vocabulary), refused
    (another tokenizer: ``reason`` names both) or failed to load; ngram needs no load."""

    KIND = "draft_loaded"
    phase: str
    draft: str  # the reference as given, or "ngram"
    engine: str | None = None
    path: str | None = None
    status: str = "ok"  # ok, refused, error
    reason: str | None = None
    t_load_start: int | None = None
    t_load_end: int | None = None
    rss_before_bytes: int | None = None  # the worker's RSS just before the draft's load (absent in older journals)
    rss_bytes: int | None = None
    footprint_before_bytes: int | None = ABSENT  # macOS: phys_footprint before and after the load
    footprint_bytes: int | None = ABSENT
    engine_memory: dict | None = None
    vocab_size: int | None = None
    versions: dict | None = None
    shape: dict | None = None  # the draft's, as the parent inspected it (collect/modelinfo.py)


class DraftEnd(Event):
    """The draft model at the phase's end, before it is closed: the K/V its cache holds (the
    last request's context), its engine's memory figures, how it held its weights and, mapped,
    the resident bytes of its files (what macOS's footprint leaves out, analyse/headline.py)."""

    KIND = "draft_end"
    phase: str
    kv_cache_bytes: int | None = None
    engine_memory: dict | None = None
    weights_held: str | None = None
    mapped_resident_bytes: int | None = None


class _OfRequest(Event):
    """What an event about a speculative request names: its request (phase, index, kind), its
    case and the case's draft length."""

    phase: str
    index: int
    kind: str
    case: str
    k: Positive


class SpeculativeRounds(_OfRequest):
    """A speculative request's rounds, journaled after its request event."""

    KIND = "speculative_rounds"
    rounds: tuple[Round, ...] = ()


class SpeculativeNative(_OfRequest):
    """A request of the engine's own speculative decoding (engines/capabilities.py NativeReport),
    journaled after its request event: what the engine told of it, None where it told nothing
    (``unknown`` says why)."""

    KIND = "speculative_native"
    impl: str
    from_draft: tuple[bool, ...] | None = None
    drafted: tuple[int, ...] | None = None
    accepted: tuple[int, ...] | None = None
    unknown: str | None = None


class NativeRefused(Event):
    """The engine's own speculative decoding refused (the engine lacks it, or not with this
    draft) or failed to open: macprof's loop is measured all the same."""

    KIND = "speculative_native_refused"
    phase: str
    reason: str


class SpeculativeCheck(Event, Journals[OutputCheck]):
    """A speculative request's output against the plain greedy one of the same prompt."""

    KIND = "speculative_check"
    CHECKS = True
    phase: str
    index: int
    kind: str
    case: str


# -- the run log -------------------------------------------------------------------------------
class SpeculativeRequest(Record):
    """One speculative request: the request (its token stamps) and its rounds and check."""

    REQUIRED_KEYS = ("request",)  # in every log (the schema's required), though code may leave them out
    request: Request
    rounds: tuple[Round, ...] = ()
    check: OutputCheck | None = None
    # the engine's own path (SpeculativePhase.native): what it told, per token and per round
    from_draft: tuple[bool, ...] | None = ABSENT
    drafted_per_round: tuple[int, ...] | None = ABSENT
    accepted_per_round: tuple[int, ...] | None = ABSENT


class Interval(Record):
    value: Number | None = None
    low: Number | None = None
    high: Number | None = None


class SpeculativeCase(Record):
    """One draft length k: its requests and what they give against plain decoding."""

    KINDS = {"id": VOCAB, "prediction_reason": OWN, "impl": VOCAB, "unknown": TEXT}

    REQUIRED_KEYS = ("id", "k")  # in every log (the schema's required), though code may leave them out
    id: str
    k: Positive
    requests: tuple[SpeculativeRequest, ...] = ()
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance: Number | None = None  # α = accepted / drafted
    # the per-token acceptance of the prediction's model: accepted / drafts judged (measure/speculative.py)
    acceptance_per_token: Number | None = None
    # over the measured rounds free to draft k (a request's last ones are capped to end at its length):
    # emitted tokens / rounds (older logs: over the rounds that drafted k; analyse.speculative.per_round
    # recomputes them), and the mean drafted per round (a lookup draft drafts fewer than k, or none,
    # where its context has no match)
    tokens_per_round: Number | None = None
    drafts_per_round: Number | None = ABSENT
    draft_s_per_round: Number | None = None  # medians over the measured rounds
    verify_s_per_round: Number | None = None
    rewind_s_per_round: Number | None = None
    round_s_per_round: Number | None = None  # draft start to rewind end
    decode_tok_s: Number | None = None  # median of the measured requests
    speedup: Interval | None = None  # decode tok/s against plain, with its bootstrap interval
    predicted_speedup: Number | None = None  # the roofline's at the measured α (analyse/ceilings.py)
    predicted_round_s: Number | None = None
    # (1 - α^(d+1)) / (1 - α) at acceptance_per_token, averaged over the rounds' drafted counts d
    predicted_tokens_per_round: Number | None = None
    prediction_reason: str | None = None  # why there is no prediction (a shape or the bandwidth unknown)
    checks: Checks | None = None
    impl: str | None = ABSENT  # the engine's own path: its call, as its library names it
    unknown: str | None = ABSENT  # why a figure of the engine's own path is unknown (what it does not tell)


class DraftMemory(Record):
    """What the draft adds to the process: its load's RSS (and macOS footprint) growth, its
    file and bytes read per token, the K/V it held at the phase's end (measured, and computed
    from its shape at the phase's context), its engine's figures, how it held its weights."""

    KINDS = {"engine": TEXT, "weights_held": VOCAB}

    file_bytes: int | None = None
    weight_bytes_per_token: Number | None = None
    rss_before_load_bytes: int | None = None
    rss_after_load_bytes: int | None = None
    load_rss_bytes: int | None = None  # after - before
    load_footprint_bytes: int | None = ABSENT  # macOS only
    kv_cache_bytes: int | None = None  # measured, as the target's are (llama.cpp: sequence state; MLX: K/V arrays)
    kv_computed_bytes: Number | None = None  # the draft's shape at prompt + gen tokens (measure/kvmodel.py)
    engine: dict | None = None
    weights_held: str | None = None
    mapped_resident_bytes: int | None = None


class SpeculativePhase(Record):
    # the draft as the command line named it: a path, a hub id, an Ollama name, or "ngram"
    KINDS = {"draft": REF, "draft_engine": VOCAB, "draft_status": VOCAB, "draft_reason": TEXT, "native_reason": TEXT}
    REQUIRED_KEYS = ("cases", "failures")  # in every log (the schema's required), though code may leave them out
    draft: str | None = None
    draft_engine: str | None = None
    draft_status: DraftStatus | None = None  # ok, refused, error; None: no draft_loaded event
    draft_reason: str | None = None
    draft_load_s: Number | None = None
    plain: tuple[Request, ...] = ()
    plain_decode_tok_s: Number | None = None
    cases: tuple[SpeculativeCase, ...] = ()
    failures: tuple[Failure, ...] = ()
    native: tuple[SpeculativeCase, ...] | None = ABSENT  # the engine's own speculative path, measured the same way
    # the phase's memory (its peak spans the draft's load and requests: both models' weights
    # and K/V; the draft's mapped weights added where the target's footprint would miss them)
    memory: PhaseMemory | None = None
    draft_memory: DraftMemory | None = None
    native_reason: str | None = ABSENT  # why it was not measured (asked for, refused or failed)


class DraftSpec(Record):
    """The phase's draft as the parent resolved it, once per model (run/phases/speculative.py
    DraftParent), as a MODEL argument is (an engine reaches no model store): journaled in the
    model's plan, so a resumed run loads the same files without resolving again, and handed to
    each worker of the phase (its ctx.prepared)."""

    KINDS = {"kind": VOCAB, "ref": REF, "engine": VOCAB, "path": PATH, "target": NAME}
    kind: str  # "model", or "ngram" (prompt lookup: no model)
    ref: str  # as --draft named it
    ngram: int | None = None  # prompt lookup's n
    engine: str | None = None  # the engine that loads the draft: the target's where it reads the draft's format
    path: str | None = None  # the draft's resolved file or directory
    target: str | None = None  # the target model's name (the tokenizer check names it)
    shape: dict[str, Any] | None = None  # the draft's metadata (collect/modelinfo.py), for the round's ceiling


# the phase's journal events (macprof/phases.py ``events``: model/events.py EVENTS has them)
EVENTS = (DraftLoaded, DraftEnd, SpeculativeRounds, SpeculativeNative, NativeRefused, SpeculativeCheck)
