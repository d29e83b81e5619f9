"""The text the quality phase scores: a fixed default shipped inside the package (the same
bytes on every machine, no download), or the user's own file (``--text``). Its sha256 and
size go into the log, so two runs can tell they scored the same words.

A user's text is a regular file of at most MAX_TEXT_BYTES, checked before anything opens it (a
FIFO would block the worker until its load timeout, /dev/zero would never end), and only as
much of it is tokenized as the scored tokens can need (``head``): a 200 MB text once cost 8.5
GB and two and a half minutes to score 256 tokens."""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from macprof.errors import MacprofError

DEFAULT_SOURCE = "macprof/data/quality.txt"
MAX_TEXT_BYTES = 16 << 20  # a long book is 2 MB: far more than a quality run scores
CHARS_PER_TOKEN = 64  # a generous bound (byte-level tokenizers: ~1 char a token; BPE ~4)


def check(path: str) -> None:
    """One line, before any worker starts, for a --text that is not a regular file of at most
    MAX_TEXT_BYTES (nothing is opened)."""
    from macprof.files import filekind

    try:
        size = filekind.regular_stat(Path(path)).st_size
    except OSError as exc:
        raise MacprofError(f"{path}: cannot read the quality text: {exc.strerror}") from None
    except MacprofError as exc:
        raise MacprofError(f"--text {exc}") from None
    if size > MAX_TEXT_BYTES:
        raise MacprofError(f"{path}: the quality text is {size} bytes, more than the {MAX_TEXT_BYTES} it may have "
                           f"(the phase scores a few thousand tokens: give an excerpt)")


def default_path() -> Path:
    """The packaged quality text's file: what is read, and what a run's inputs name, without --text."""
    return Path(str(resources.files("macprof") / "data" / "quality.txt"))


def read_text(path: str | None) -> tuple[str, dict]:
    """(the text, {source, sha256, bytes}); a missing, special, too large or non-UTF-8 file is a
    MacprofError."""
    from macprof.files import filekind

    if path is None:
        data = default_path().read_bytes()
        source = DEFAULT_SOURCE
    else:
        check(path)
        try:
            data = filekind.read_regular(Path(path), MAX_TEXT_BYTES, "a quality text")  # it may have changed since
        except OSError as exc:
            raise MacprofError(f"{path}: cannot read the quality text: {exc.strerror or exc}") from None
        source = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MacprofError(f"{source}: the quality text is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return text, {"source": source, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def head(text: str, tokens: int) -> str:
    """The start of ``text`` that ``tokens`` tokens can need, cut at a whitespace so no word is
    split (the tokens before the cut are those of the whole text), or all of it. The phase
    tokenizes the whole text after all when a tokenizer packs fewer characters a token."""
    limit = CHARS_PER_TOKEN * tokens + 4096
    if len(text) <= limit:
        return text
    cut = max(text.rfind(c, 0, limit) for c in " \n\t")
    return text[:cut] if cut > 0 else text

