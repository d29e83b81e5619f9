"""How many tokens a server's request produced, and how many each received chunk carried: pure
functions of what the timed stream and, where needed, one untimed counting request gave.

The timed request carries nothing that costs the server work (no logprobs, no echo, no n_probs):
what names its tokens is the server's own free report (streamed ``usage``, llama.cpp's
``timings.predicted_n``, Ollama's ``eval_count``), else a counting request made after it (the
same prompt and greedy settings, not streamed, engines/openai.py) whose text must be the timed
request's text, or its count is not used. docs/design.md ("Local servers") says what is assumed
and what is checked; in short:

- assumed: each received chunk with text carries at least one whole token (no server splits one
  token's text over two chunks); greedy decoding of the same prompt on the same server gives the
  same tokens (checked: the same text);
- so a count equal to the chunks with text is one token per chunk;
- otherwise the counting request's tokens are placed in the text (their ids detokenized, or the
  server's text offsets), and chunk j carries the tokens after chunk j - 1's up to the fewest
  whose text covers every chunk up to j (``align``); tokens the server counted after the last
  chunk with text (its EOS, which has none) are counted but not stamped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

ONE_PER_CHUNK = "one per chunk: the count equals the chunks with text"


@dataclass(frozen=True)
class Counted:
    """What an untimed counting request gave: its text, its token count, and, where the server
    placed each token in the text, the text of the first k tokens for k = 1..total."""

    text: str
    total: int | None
    prefixes: tuple[str, ...] | None = None
    named_by: str | None = None  # "ids", "text offsets", or None (a total only)


@dataclass
class Settled:
    """A request's count as the run log keeps it (model/phases.py ServerReport)."""

    completion_tokens: int | None
    count_source: str | None
    chunk_tokens: list[int] | None
    chunk_source: str
    unstamped: int | None = None
    counting: dict | None = None  # a CountingRequest's fields
    flags: list[str] = field(default_factory=list)


def same_text(a: str, b: str) -> bool:
    """The same generated text; leading whitespace aside (a detokenizer may drop the first
    token's leading space, a stream keep it)."""
    return a.lstrip() == b.lstrip()


def align(texts: Sequence[str], prefixes: Sequence[str]) -> list[int] | None:
    """Tokens per chunk: chunk j carries the tokens after chunk j - 1's up to the fewest whose
    text covers every chunk up to j (at least one). ``prefixes[k - 1]``: the text of the first
    k tokens. None where the tokens do not spell the chunks."""
    out, k, joined = [], 0, ""
    for text in texts:
        joined += text
        want = joined.lstrip()
        j = k + 1
        while j <= len(prefixes) and not prefixes[j - 1].lstrip().startswith(want):
            j += 1
        if j > len(prefixes):
            return None
        out.append(j - k)
        k = j
    return out


def prefixes_from_ids(ids: Sequence[int], decode: Callable[[Sequence[int]], str]) -> tuple[str, ...]:
    """The text of the first k ids, k = 1..len(ids), by the model's detokenizer."""
    return tuple(decode(list(ids[:k])) for k in range(1, len(ids) + 1))


def prefixes_from_offsets(text: str, offsets: Sequence[int]) -> tuple[str, ...] | None:
    """The text of the first k tokens from a server's ``text_offset`` list (where each token
    starts in the text, llama-cpp-python's logprobs); None where it is not one per token."""
    if not offsets or any(b < a for a, b in zip(offsets, offsets[1:])):
        return None
    base = offsets[0]
    ends = [o - base for o in offsets[1:]] + [len(text)]
    return tuple(text[:e] for e in ends)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (bytes_to_unicode) read backwards: a printable character per byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, extra = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTES = _byte_decoder()
_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def prefixes_from_pieces(pieces: Sequence[str]) -> tuple[str, ...] | None:
    """The text of the first k tokens from their raw vocabulary strings (what mlx_lm.server's
    ``top_logprobs`` name, ``convert_ids_to_tokens``), where no tokenizer is at hand: a byte-level
    BPE's (GPT-2's alphabet, "Ġ" a space) or a SentencePiece's ("▁" a space, "<0xNN>" a byte).
    A special token (an EOS) reads as its own name, which no chunk holds: it stays after the
    chunks. None where the strings are neither."""
    if any("▁" in p or _SPM_BYTE.search(p) for p in pieces):
        def raw(p: str) -> bytes:
            out, at = b"", 0
            for m in _SPM_BYTE.finditer(p):
                out += p[at:m.start()].replace("▁", " ").encode() + bytes([int(m.group(1), 16)])
                at = m.end()
            return out + p[at:].replace("▁", " ").encode()
    elif all(ch in _BYTES for p in pieces for ch in p):
        def raw(p: str) -> bytes:
            return bytes(_BYTES[ch] for ch in p)
    else:
        return None
    out, acc = [], b""
    for p in pieces:
        acc += raw(p)
        out.append(acc.decode("utf-8", errors="replace"))
    return tuple(out)


def needs_counting(n_chunks: int, free_total: int | None) -> bool:
    """Whether the timed stream's own report leaves the tokens per chunk unknown."""
    return free_total is None or free_total != n_chunks


def settle(texts: Sequence[str], free_total: int | None, free_source: str | None, counted: Counted | None,
           counting_error: str | None = None) -> Settled:
    """The count of one request from its chunks' texts, the server's free count (with where it
    came from) and the counting request's result (None where none was made)."""
    chunks, joined = len(texts), "".join(texts)
    if free_total is not None and free_total == chunks:
        return Settled(free_total, free_source, [1] * chunks, ONE_PER_CHUNK)
    unknown = "unknown: the server names no tokens per chunk and its count differs from the chunks"
    if counted is None:
        why = f"unknown: {counting_error}" if counting_error else unknown
        return Settled(free_total, free_source, None, why,
                       counting={"status": "error", "reason": counting_error} if counting_error else None)
    info = {"status": "ok", "completion_tokens": counted.total, "named_by": counted.named_by, "reason": None}
    if not same_text(counted.text, joined):
        info.update(status="differs", reason="its text is not the timed request's (greedy decoding was not "
                                             "reproduced): its count is not used")
        return Settled(free_total, free_source, None, "unknown: the counting request's text differs", counting=info,
                       flags=["counting: the untimed counting request's text differs from the timed request's"])
    flags = []
    total, source = free_total, free_source
    if free_total is None:
        total, source = counted.total, f"counting request ({counted.named_by or 'its usage'}, the same text)"
    elif counted.total is not None and counted.total != free_total:
        flags.append(f"counting: the counting request counted {counted.total} tokens, the timed one {free_total}")
    if total is not None and total == chunks:
        return Settled(total, source, [1] * chunks, ONE_PER_CHUNK, counting=info, flags=flags)
    per_chunk = align(texts, counted.prefixes) if counted.prefixes is not None else None
    if per_chunk is None or total is None or sum(per_chunk) > total:
        return Settled(total, source, None, unknown if counted.prefixes is None else
                       "unknown: the counting request's tokens do not spell the chunks", counting=info, flags=flags)
    left = total - sum(per_chunk)
    if left:
        flags.append(f"unstamped: {left} token(s) the server counted came after the last chunk with text "
                     f"(an EOS has none): counted, not in the decode figure")
    return Settled(total, source, per_chunk, f"the counting request's tokens placed in the text ({counted.named_by})",
                   unstamped=left, counting=info, flags=flags)
