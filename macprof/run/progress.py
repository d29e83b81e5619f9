"""What the user sees while a run goes on: a live bar on a terminal (done / planned requests,
elapsed time, ETA), plain lines otherwise (logs, CI, pipes). The one place that knows about
display: the orchestrator only calls plan, advance, note and reach. rich is imported when a bar
is shown, never before (`macprof --help` stays instant)."""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from macprof.sanitise import clean

Clock = Callable[[], float]


def eta_s(done: float, total: float, elapsed_s: float) -> float | None:
    """Seconds left at the mean pace so far; unknown (None) before the first unit, or with no plan.
    The mean over the whole run, not a recent rate: requests of one model come in bursts
    between loads, and a recent rate swings with them."""
    if total <= 0 or done <= 0:
        return None
    return max(0.0, elapsed_s / done * (total - done))


def clock_text(seconds: float | None) -> str:
    """0:42, 12:05, 1:02:03; -:-- when unknown."""
    if seconds is None:
        return "-:--"
    h, rest = divmod(round(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Display:
    """The interface the orchestrator calls; this base shows nothing (tests, library use).

    A unit is one planned request event (warm-ups and both requests of a cold trial included).
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.start = clock()
        self.total = 0
        self.done = 0

    def plan(self, total: int) -> None:
        """The units the whole run is expected to take, known before the first model."""
        self.total = total
        self._update()

    def advance(self, line: str) -> None:
        """One unit done (a request event arrived), and the line that says so."""
        self.done += 1
        self._show(clean(line), unit=True)  # no escape sequence or line break from a name or a message

    def note(self, line: str) -> None:
        """An event worth a line that is not a unit: a model starts, a trial, a failure."""
        self._show(clean(line), unit=False)

    __call__ = note  # a plain progress("...") call, as the orchestrator made before, is a note

    def reach(self, done: int) -> None:
        """At least ``done`` units are behind us: the units of a model that failed or was
        refused will not come, and the ETA must not wait for them."""
        if done > self.done:
            self.done = done
            self._update()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def eta(self) -> float | None:
        return eta_s(self.done, self.total, self.elapsed())

    def close(self) -> None:
        """The run is over (or interrupted): leave the terminal as it was."""

    def _show(self, line: str, unit: bool) -> None:
        pass

    def _update(self) -> None:
        pass


class Lines(Display):
    """One line per event, as '[   12.3s] text': for a stream that is not a terminal."""

    def __init__(self, stream: TextIO, clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        self.stream: TextIO | None = stream

    def _show(self, line: str, unit: bool) -> None:
        if self.stream is None:
            return
        try:
            print(f"[{self.elapsed():7.1f}s] {line}", file=self.stream, flush=True)
        except BrokenPipeError:  # the reader went away (`2>&1 | head`): stop showing, keep measuring
            self.stream = None


class Callback(Display):
    """Every line to a function: a caller's own display (``progress=print``)."""

    def __init__(self, fn: Callable[[str], None], clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        self.fn = fn

    def _show(self, line: str, unit: bool) -> None:
        self.fn(line)


class Bar(Display):
    """A rich bar: units done / planned, elapsed, ETA, and the latest request as its text;
    notes (model starts, cold trials, failures) print above it and stay."""

    def __init__(self, stream: TextIO, clock: Clock = time.monotonic) -> None:
        super().__init__(clock)
        self.progress = _rich_progress(stream, self)
        self.task = None

    def plan(self, total: int) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("", total=total or None)
        super().plan(total)

    def _show(self, line: str, unit: bool) -> None:
        if unit and self.task is not None:
            self.progress.update(self.task, completed=self.done, description=line)
        else:
            from rich.text import Text

            self.progress.console.print(Text(f"[{self.elapsed():7.1f}s] {line}"))

    def _update(self) -> None:
        if self.task is not None:
            self.progress.update(self.task, total=self.total or None, completed=self.done)

    def close(self) -> None:
        self.progress.stop()


def _rich_progress(stream: TextIO, display: Display):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
    from rich.table import Column
    from rich.text import Text

    class Times(ProgressColumn):
        """Elapsed and ETA from the display's own clock and pace (eta_s), not rich's estimate."""

        def render(self, task) -> Text:
            return Text(f"{clock_text(display.elapsed())} elapsed, ETA {clock_text(display.eta())}")

    return Progress(BarColumn(), MofNCompleteColumn(), Times(),
                    TextColumn("{task.description}", markup=False,
                               table_column=Column(no_wrap=True, overflow="ellipsis")),
                    console=Console(file=stream), refresh_per_second=4)


def to_stream(stream: TextIO | None = None) -> Display:
    """A bar on a terminal, plain lines anywhere else (stderr by default)."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return Bar(stream) if isatty and isatty() else Lines(stream)


def as_display(progress: Display | Callable[[str], None] | None) -> Display:
    """A Display as given; a plain function gets every line; None shows nothing."""
    if isinstance(progress, Display):
        return progress
    return Display() if progress is None else Callback(progress)
