"""The journal events of the quality phase, the concurrency phase against a server and a
distributed model's ranks; registered with the others in model/events.py."""

from __future__ import annotations

from typing import Any

from macprof.model.event_base import Event
from macprof.model.quality import QualityText

from macprof.model.records import ABSENT, Number


# -- the quality phase (run/phases/quality.py) -------------------------------------------------
class QualityStart(Event):
    """The quality phase's tokens are ready: what will be scored, against what."""

    KIND = "quality_start"
    phase: str
    text: QualityText | None = None
    n_ctx: int | None = None
    chunks: int | None = None
    tokens_sha256: str | None = None
    vocab_size: int | None = None
    reference: str | None = None
    is_reference: bool = False
    reference_reason: str | None = None
    rescore_reason: str | None = ABSENT  # the reference scored again: why its stored log-probs were not used


class QualityStored(Event):
    """The reference's log-probabilities are stored whole: the digest of the files (.npy and its
    sidecar), so a later model, or a resumed run, uses them only while they are the same bytes."""

    KIND = "quality_stored"
    phase: str
    sha256: str
    bytes: int


class QualityChunkScored(Event):
    """One chunk scored: its forward pass's stamps and the raw figures per scored position."""

    KIND = "quality_chunk"
    phase: str
    index: int
    t_start: int | None = None
    t_end: int | None = None
    tokens: int = 0
    nll: tuple[Number, ...] = ()
    kld: tuple[Number, ...] | None = None
    same_top: tuple[bool, ...] | None = None


# -- the concurrency phase against a server (run/phases/serving.py) ----------------------------
class LoadLevel(Event):
    """One level of the concurrency phase ended: closed (C clients) or open (Poisson at R/s)."""

    KIND = "load_level"
    phase: str
    case: str
    mode: str
    concurrency: int | None = None
    rate: Number | None = None
    planned: int
    sent: int
    seed: int | None = None
    t_start: int
    t_end: int
    time_limit_s: Number


# -- a distributed model's ranks (run/rank.py), streamed by rank 0 ---------------------------------
class RankGroup(Event):
    """The group once the model is loaded: every rank's own machine facts."""

    KIND = "rank_group"
    size: int
    backend: str | None = None
    parallel: str | None = None
    hosts: tuple[str, ...] = ()
    ranks: tuple[dict[str, Any], ...] = ()


class RankTimeline(Event):
    """Another rank's request stamps of one phase (rank 0's are its request events)."""

    KIND = "rank_timeline"
    phase: str
    rank: int
    requests: tuple[dict[str, Any], ...] = ()


class CommProfile(Event):
    """The untimed diagnostic pass: per rank, per decode step, time inside the collectives."""

    KIND = "comm_profile"
    parallel: str | None = None
    prompt_tokens: int | None = None
    gen_tokens: int | None = None
    method: str | None = None
    ranks: tuple[dict[str, Any], ...] = ()


# each phase's journal events (macprof/phases.py ``events``: model/events.py EVENTS has them);
# the distributed ranks' are the run's own (model/events.py CORE)
QUALITY_EVENTS = (QualityStart, QualityChunkScored, QualityStored)
CONCURRENCY_EVENTS = (LoadLevel,)
