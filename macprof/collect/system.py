"""Reading the operating system: running a command, parsing sysctl output, this host's id.
Shared by the machine facts (machine.py) and the chip detection (chips.py)."""

from __future__ import annotations

import hashlib
import socket
import subprocess
from datetime import datetime, timezone


def utc_now() -> str:
    """The one UTC timestamp format of every log and cache: ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_command(cmd: list[str], timeout: float = 10.0) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def host_id() -> str:
    """A short, one-way id of this host: runs from one machine group together, the name stays private."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


# -- parsers (pure) ----------------------------------------------------------------------
def parse_sysctl(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out
