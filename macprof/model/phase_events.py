"""The journal events of the quality phase, the concurrency phase against a server and a
distributed model's ranks; registered with the others in model/events.py."""

from __future__ import annotations

from typing import Any

from macprof.model.distributed import GroupResult
from macprof.model.event_base import Event
from macprof.model.quality import QualityChunk, QualityPhase
from macprof.model.records import Journals
from macprof.model.serving import LoadLevelResult


# -- the quality phase (run/phases/quality.py) -------------------------------------------------
class QualityStart(Event, Journals[QualityPhase]):
    """The quality phase's tokens are ready: what will be scored, against what."""

    KIND = "quality_start"
    phase: str
    chunks: int | None = None  # planned (the phase's record: chunks_planned)
    vocab_size: int | None = None


class QualityStored(Event):
    """The reference's log-probabilities are stored whole: the digest of the files (.npy and its
    sidecar), so a later model, or a resumed run, uses them only while they are the same bytes."""

    KIND = "quality_stored"
    phase: str
    sha256: str
    bytes: int


class QualityChunkScored(Event, Journals[QualityChunk]):
    """One chunk scored: its forward pass's stamps and the raw figures per scored position."""

    KIND = "quality_chunk"
    REQUIRED = ("index",)
    phase: str


# -- the concurrency phase against a server (run/phases/serving.py) ----------------------------
class LoadLevel(Event, Journals[LoadLevelResult]):
    """One level of the concurrency phase ended: closed (C clients) or open (Poisson at R/s)."""

    KIND = "load_level"
    REQUIRED = ("mode", "planned", "sent", "time_limit_s")
    phase: str
    case: str  # the level's id
    t_start: int
    t_end: int


# -- a distributed model's ranks (run/rank.py), streamed by rank 0 ---------------------------------
class RankGroup(Event, Journals[GroupResult]):
    """The group once the model is loaded: every rank's own machine facts."""

    KIND = "rank_group"
    REQUIRED = ("size",)


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
