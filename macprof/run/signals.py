"""SIGINT and SIGTERM from the start of a run until its log is saved and summarised.

Python's defaults leave holes in the promise that a measurement survives: SIGTERM kills the
process outright (no log, exit -15), and a second Ctrl-C while the first is being handled
escapes every handler ("Aborted!", no run log). So while a ``guard`` is open both signals are
handled here, and a signal raises at most once:

- armed (while the orchestrator measures), the first signal raises ``KeyboardInterrupt`` (SIGINT)
  or ``Interrupted`` (SIGTERM) and disarms the guard, so the handling code that journals the
  interruption and saves the log cannot itself be interrupted;
- disarmed (stopping, building and saving the log, printing the summary) a signal is only
  recorded: the save is atomic and short, so it is finished, and the caller says what happened;
- inside ``deferred()`` (one journal write) a signal is held until the write is whole, so the
  journal and the events in memory never disagree by a line;
- after the guard, if a signal came during it, a later one is let pass: the process is exiting
  130 because of the first, and the defaults put back would have it end by the second (143).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGTERM: stop now, write what was measured. A BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way (a model-file reader, an engine adapter) can swallow it."""


@dataclass
class Guard:
    armed: bool = True
    received: list[int] = field(default_factory=list)
    depth: int = 0
    held: int | None = None  # a signal that came inside deferred(), raised at its end
    critical: int = 0
    old: dict = field(default_factory=dict)

    def handle(self, signum, frame) -> None:
        self.received.append(signum)
        if not self.armed:
            return
        if self.critical:
            self.held = signum
            return
        self.fire(signum)

    def fire(self, signum: int) -> None:
        self.armed = False  # at most one raise: the handling of this one must run to its end
        raise KeyboardInterrupt() if signum == signal.SIGINT else Interrupted()


_guard: Guard | None = None


@contextmanager
def guard() -> Iterator[Guard]:
    """Handle SIGINT and SIGTERM until the block ends. Re-entrant: the outermost block installs
    the handlers and puts back the ones it found; an inner one shares its state."""
    global _guard
    if _guard is not None:
        _guard.depth += 1
        try:
            yield _guard
        finally:
            _guard.depth -= 1
        return
    _guard = g = Guard()
    try:
        g.old = {s: signal.signal(s, g.handle) for s in SIGNALS}
    except ValueError:  # not the main thread: signals are delivered elsewhere, nothing to guard
        g.old = {}
    try:
        yield g
    finally:
        for s, old in g.old.items():
            # once a signal came, the process is on its way out because of it, its status (130)
            # decided: a second one must not end it by the signal instead (143, or "Aborted!"
            # under SIGINT's default) on the way. Ignored, not handled: at its exit Python puts
            # the default back in place of a handler of its own, but leaves SIG_IGN alone
            signal.signal(s, signal.SIG_IGN if g.received else old)
        _guard = None


def disarm() -> None:
    """From here on a signal is recorded, not raised (the run is stopping or done)."""
    if _guard is not None:
        _guard.armed = False


def received() -> list[int]:
    return list(_guard.received) if _guard is not None else []


@contextmanager
def deferred() -> Iterator[None]:
    """A section no signal may cut in two (a journal line and its event in memory): one that
    arrives meanwhile is raised when the section ends, if the guard is still armed."""
    g = _guard
    if g is None:
        yield
        return
    g.critical += 1
    try:
        yield
    finally:
        g.critical -= 1
    if not g.critical and g.held is not None:
        signum, g.held = g.held, None
        if g.armed:
            g.fire(signum)
