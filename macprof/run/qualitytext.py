"""The text the quality phase scores: a fixed default shipped inside the package (the same
bytes on every machine, no download), or the user's own file (``--text``). Its sha256 and
size go into the log, so two runs can tell they scored the same words."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from macprof.errors import MacprofError

DEFAULT_SOURCE = "macprof/data/quality.txt"


def read_text(path: str | None) -> tuple[str, dict]:
    """(the text, {source, sha256, bytes}); a missing or non-UTF-8 file is a MacprofError."""
    if path is None:
        data = resources.files("macprof").joinpath("data/quality.txt").read_bytes()
        source = DEFAULT_SOURCE
    else:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise MacprofError(f"{path}: cannot read the quality text: {exc.strerror}") from None
        source = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MacprofError(f"{source}: the quality text is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return text, {"source": source, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
