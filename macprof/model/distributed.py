"""A distributed model's group in the run log: its ranks, their timelines, the communication
pass and the group's ceiling (analyse/distributed.py builds it; docs/runlog.md "distributed")."""

from __future__ import annotations

from typing import Any

from macprof.model.records import Number, Record
from macprof.model.kind import HOST, TEXT, VOCAB


class GroupResult(Record):
    KINDS = {"backend": VOCAB, "parallel": VOCAB, "hosts": HOST, "ranks": TEXT, "timelines": TEXT,
             "comm_method": VOCAB, "comm": TEXT, "bytes_per_token": TEXT, "prediction": TEXT, "reason": TEXT}
    # from the ranks' timelines, the communication pass and the warm phase (analyse/distributed.py): rank_group
    # journals the rest
    BUILT = ("timelines", "comm_method", "comm", "bytes_per_token", "prediction", "decode_tok_s", "efficiency", "reason")
    backend: str | None = None
    parallel: str | None = None
    hosts: tuple[str, ...] = ()
    size: int | None = None
    ranks: tuple[dict[str, Any], ...] = ()  # each rank's own machine facts (rank_group)
    timelines: tuple[dict[str, Any], ...] = ()  # the other ranks' request stamps, per rank and phase
    comm_method: str | None = None
    comm: tuple[dict[str, Any], ...] = ()  # per rank: the diagnostic pass's medians per decode step
    bytes_per_token: dict[str, Any] | None = None  # formula, computed, measured
    prediction: dict[str, Any] | None = None  # measure/distributed.predict, with its inputs' sources
    decode_tok_s: Number | None = None  # rank 0's warm median: the user-visible figure
    efficiency: Number | None = None  # decode_tok_s / the predicted tok/s of the layout run
    reason: str | None = None  # what could not be given, and why


class DistributedSettings(Record):
    """macprof.config.dist.Distributed as the log's settings record it."""

    KINDS = {"hosts": HOST, "backend": VOCAB, "parallel": VOCAB}

    hosts: tuple[str, ...] = ()
    backend: str | None = None
    parallel: str | None = None
    link_gbs: Number | None = None
