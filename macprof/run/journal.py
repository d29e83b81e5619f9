"""The journal: append-only JSON lines beside the run log, flushed and fsynced per event.

Each event carries ``seq``, its number in the journal (0, 1, 2...), so a reader can drop a line
written twice and put back in order lines that were moved (macprof/store/runlog.py).

One run, one journal: a new journal is created exclusively (O_EXCL), and whoever writes one
holds an exclusive lock on it for the whole run, so neither a second run started with the same
log name nor a second ``--resume`` of it can append to a journal another run is writing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path
from typing import IO, Sequence

from macprof.errors import MacprofError
from macprof.files.filekind import not_a_folder, read_regular, regular_stat
from macprof.model.definitions import MAX_LOG_BYTES
from macprof.model.events import Event
from macprof.model.records import json_line
from macprof.run import signals


class Journal:
    """Append-only JSON lines, flushed and fsynced per event, numbered."""

    def __init__(self, path: Path, fh: IO[str]) -> None:
        self.path = path
        self.fh = fh
        self.events: list[Event] = []
        self.next_seq = 0

    @classmethod
    def create(cls, path: Path, overwrite: bool = False) -> Journal:
        """A new journal; one already there is an error unless ``overwrite``."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if overwrite else os.O_EXCL)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MacprofError(f"{path}: cannot write the journal: {not_a_folder(path) or exc.strerror}") from None
        try:
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            raise MacprofError(f"{path}: a journal is already there (another run, or an earlier one): it is never "
                               f"overwritten; pass --force-overwrite to replace it, or --resume it") from None
        except OSError as exc:
            raise MacprofError(f"{path}: cannot write the journal ({exc.strerror})") from None
        _lock(fd, path)
        if overwrite:
            os.ftruncate(fd, 0)  # only now that no other run holds it
        return cls(path, os.fdopen(fd, "a", encoding="utf-8"))

    @classmethod
    def reopen(cls, path: Path) -> Journal:
        """An existing journal, to continue (``--resume``); locked, its torn tail repaired. The
        events it holds are read and checked by the caller, then given to ``continue_with``."""
        try:
            regular_stat(path)  # a FIFO named as the journal would block the open below until a reader came
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise MacprofError(f"{path}: cannot write the journal ({exc.strerror})") from None
        _lock(fd, path)
        try:
            repair_tail(path, fd)
        except OSError as exc:
            os.close(fd)
            raise MacprofError(f"{path}: cannot repair the journal's last line ({exc.strerror})") from None
        except MacprofError:
            os.close(fd)
            raise
        return cls(path, os.fdopen(fd, "a", encoding="utf-8"))

    def continue_with(self, events: Sequence[Event]) -> None:
        """The events read back from this journal: new ones are numbered after them."""
        self.events = list(events)
        numbered = [e.seq for e in self.events if e.seq is not None]
        # a journal of a macprof before numbering: its lines are numbered by their place
        self.next_seq = max(numbered) + 1 if numbered else len(self.events)

    def write(self, event: Event) -> None:
        event = event.replace(seq=self.next_seq)
        line = json_line(event)
        with signals.deferred():  # the line on disk and the event in memory, or neither
            try:
                self.fh.write(line)
                self.fh.flush()  # in the OS's hands: a crash of macprof loses nothing from here
                if event.DURABLE:
                    os.fsync(self.fh.fileno())
            except OSError as exc:
                raise MacprofError(f"{self.path}: writing the journal failed ({exc.strerror}); "
                                   f"what was measured until now is in it") from None
            self.next_seq += 1
            self.events.append(event)

    def close(self) -> None:
        """Closing can only fail for the reason a write already failed (a full disk: the buffer
        still holds the line that did not fit), and that write's error is the one to tell."""
        try:
            self.fh.close()
        except OSError:
            pass


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise MacprofError(f"{path}: another macprof run is writing this journal") from None
        raise MacprofError(f"{path}: cannot lock the journal ({exc.strerror})") from None


def repair_tail(path: Path, fd: int) -> None:
    """A last line without its newline was cut mid-write (a crash, a full disk). Appending after
    it would glue the next event to it, so: a whole JSON line that lacks only the newline gets
    it; a cut one is truncated away (readers skip it too: it holds no event)."""
    raw = read_regular(path, MAX_LOG_BYTES, "a journal")
    if not raw or raw.endswith(b"\n"):
        return
    start = raw.rfind(b"\n") + 1
    try:
        json.loads(raw[start:])
        os.write(fd, b"\n")
    except ValueError:
        os.ftruncate(fd, start)
    os.fsync(fd)
