"""The journal: append-only JSON lines beside the run log, flushed and fsynced per event."""

from __future__ import annotations

import json
import os
from pathlib import Path

from macprof.errors import MacprofError
from macprof.model.events import Event


class Journal:
    """Append-only JSON lines, flushed and fsynced per event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise MacprofError(f"{path}: cannot write the journal ({exc.strerror})") from None
        self.events: list[Event] = []

    def write(self, event: Event) -> None:
        self.events.append(event)
        try:
            self.fh.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
            self.fh.flush()
            os.fsync(self.fh.fileno())
        except OSError as exc:
            raise MacprofError(f"{self.path}: writing the journal failed ({exc.strerror}); "
                               f"what was measured until now is in it") from None

    def close(self) -> None:
        self.fh.close()
