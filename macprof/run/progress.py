"""What the user sees while a run goes on."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field


@dataclass
class Progress:
    """Progress lines on a terminal; silent otherwise (logs, CI, pipes)."""

    enabled: bool = field(default_factory=lambda: sys.stderr.isatty())
    start: float = field(default_factory=time.monotonic)

    def __call__(self, text: str) -> None:
        if self.enabled:
            print(f"[{time.monotonic() - self.start:7.1f}s] {text}", file=sys.stderr, flush=True)
