"""The speculative phase's journal events and run-log records (run/phases/speculative.py
emits the events, analyse/speculative.py builds the records); registered with the other
events in model/events.py."""

from __future__ import annotations

from macprof.model.event_base import Event
from macprof.model.phases import Checks, Failure, OutputCheck, Request

from macprof.model.records import ABSENT, Count, Number, Positive, Record
from macprof.model.vocab import DraftStatus


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
    rss_bytes: int | None = None
    engine_memory: dict | None = None
    vocab_size: int | None = None
    versions: dict | None = None
    shape: dict | None = None  # the draft's, as the parent inspected it (collect/modelinfo.py)


class SpeculativeRounds(Event):
    """A speculative request's rounds, journaled after its request event."""

    KIND = "speculative_rounds"
    phase: str
    index: int
    kind: str
    case: str
    k: int
    rounds: tuple[Round, ...] = ()


class SpeculativeCheck(Event):
    """A speculative request's output against the plain greedy one of the same prompt."""

    KIND = "speculative_check"
    # OutputCheck's fields (an event cannot also be a record: tests/test_model_schema.py holds them equal)
    identical_fraction: Number | None = None
    first_divergence: int | None = None
    margin: Number | None = None
    near_tie: bool | None = None
    passed: bool = False
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


class Interval(Record):
    value: Number | None = None
    low: Number | None = None
    high: Number | None = None


class SpeculativeCase(Record):
    """One draft length k: its requests and what they give against plain decoding."""

    REQUIRED_KEYS = ("id", "k")  # in every log (the schema's required), though code may leave them out
    id: str
    k: Positive
    requests: tuple[SpeculativeRequest, ...] = ()
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance: Number | None = None  # α = accepted / drafted
    tokens_per_round: Number | None = None
    draft_s_per_round: Number | None = None  # medians over the measured rounds
    verify_s_per_round: Number | None = None
    rewind_s_per_round: Number | None = None
    decode_tok_s: Number | None = None  # median of the measured requests
    speedup: Interval | None = None  # decode tok/s against plain, with its bootstrap interval
    predicted_speedup: Number | None = None  # the roofline's at the measured α (analyse/ceilings.py)
    predicted_round_s: Number | None = None
    checks: Checks | None = None


class SpeculativePhase(Record):
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
