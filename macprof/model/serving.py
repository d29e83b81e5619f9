"""The concurrency phase's record: one entry per load level (macprof/analyse/serving.py)."""

from __future__ import annotations

from msgspec import field
from typing import Any

from macprof.model.phases import Failure, Prediction, Request, Summary
from macprof.model.records import Number, Record
from macprof.model.vocab import LoadMode
from macprof.model.kind import OWN, TEXT, VOCAB


class LoadLevelResult(Record):
    """A closed-loop level (``concurrency`` clients) or an open-loop one (Poisson ``rate``/s)."""

    KINDS = {"id": VOCAB, "mode": VOCAB, "goodput_reason": OWN, "error_messages": TEXT}

    REQUIRED_KEYS = ("id", "mode")  # in every log (the schema's required), though code may leave them out
    # from the level's requests and its stamps (analyse/serving.py): load_level journals the rest (its id: case)
    BUILT = ("id", "ok", "errors", "duration_s", "ttft_s", "itl_s", "e2e_s", "tokens", "aggregate_tok_s", "goodput",
             "goodput_reason", "prediction", "error_messages", "requests")
    id: str
    mode: LoadMode
    concurrency: int | None = None
    rate: Number | None = None
    seed: int | None = None
    planned: int = 0
    sent: int = 0
    ok: int = 0
    errors: int = 0
    duration_s: Number | None = None
    time_limit_s: Number | None = None
    ttft_s: Summary = field(default_factory=Summary)
    itl_s: Summary = field(default_factory=Summary)
    e2e_s: Summary = field(default_factory=Summary)
    tokens: int | None = None
    aggregate_tok_s: Number | None = None
    goodput: Number | None = None  # share of sent requests that succeeded and met every SLO
    goodput_reason: str | None = None
    prediction: Prediction | None = None  # the batching roofline at B = the level's concurrency
    error_messages: tuple[str, ...] = ()
    requests: tuple[Request, ...] = ()


class ConcurrencyPhase(Record):
    KINDS = {"slo": TEXT}
    REQUIRED_KEYS = ("levels",)  # in every log (the schema's required), though code may leave them out
    slo: dict[str, Any] | None = None
    levels: tuple[LoadLevelResult, ...] = ()
    failures: tuple[Failure, ...] = ()
