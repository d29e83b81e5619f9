"""The base of every journal event (model/events.py registers them all: its own and each phase's
that the registry names, macprof/phases.py ``events``)."""

from __future__ import annotations

from typing import ClassVar


from macprof.model.records import ABSENT, Record


class Event(Record, tag_field="event"):
    """One journal line: msgspec writes ``"event": KIND`` first and reads it as the tag of the union
    of every event (a subclass's KIND is its tag, model/records.py)."""

    KIND: ClassVar[str]
    # The journal fsyncs after an event that carries a measurement or ends something; one that
    # only announces what comes next (DURABLE False) is written at once but made durable by the
    # next fsync, which covers every earlier line: a power cut can lose an announcement, never
    # a measurement, and a request costs one fsync instead of two.
    DURABLE: ClassVar[bool] = True
    # An event that ends the item the last ``request_start`` announced (its ``request``, a task
    # attempt's record or refusal, a ``request_end``): the parent's per-item deadline and its blame
    # for a hang or a death stop there (run/watch.py), so a cut never falls on an item recorded.
    ENDS_ITEM: ClassVar[bool] = False
    # An output check (fields phase, index, and case and kind where it has them): --resume reads it
    # as a done request of mode "check" (run/resume.py), so that no check is made twice.
    CHECKS: ClassVar[bool] = False

    model: str | None = ABSENT
    worker: str | None = ABSENT
    seq: int | None = ABSENT  # its number in the journal (run/journal.py); a worker's events have none
