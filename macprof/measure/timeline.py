"""Per-request timeline math (pure): docs/design.md "Definitions", to the letter.

All times are integers in nanoseconds from one monotonic clock (time.perf_counter_ns).
  t0           the request starts, before the prompt text is tokenized
  t_tokenized  the prompt ids are ready
  t_i          the i-th generated token is available to the caller (i = 1..n)
Derived:
  ttft         = t_1 - t0
  itl_i        = t_i - t_{i-1}                 (i >= 2)
  decode_tok_s = (n - 1) / (t_n - t_1)
  e2e_tok_s    = n / (t_n - t0)
  prefill_tok_s = prompt_tokens / (t_1 - t_tokenized)
  t_prefilled  a pp test's prompt computed, no token generated (the bench phase): then
               prefill_tok_s = prompt_tokens / (t_prefilled - t_tokenized)
A figure that the timestamps cannot give (n = 0, n = 1 for decode) is None, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

NS = 1e9

DEFINITIONS = {
    "clock": "time.perf_counter_ns (monotonic, system-wide); raw timestamps are integers in ns",
    "t0": "request start, before the prompt text is tokenized",
    "t_tokenized": "prompt token ids ready",
    "t_i": "i-th generated token available to the caller (materialised token id), i = 1..n",
    "tokens": "counted by token id from the engine, never by stream chunks; EOS ignored, so n is exact",
    "ttft_s": "t_1 - t0 (tokenization + prefill + first sampling)",
    "itl_s": "t_i - t_{i-1} for i >= 2",
    "decode_tok_s": "(n - 1) / (t_n - t_1)",
    "e2e_tok_s": "n / (t_n - t0)",
    "prefill_tok_s": "prompt_tokens / (t_1 - t_tokenized); prompt_tokens counts only tokens computed (reused prefix "
                     "excluded); a pp test's (no token generated): prompt_tokens / (t_prefilled - t_tokenized)",
    "percentiles": "linear interpolation between closest ranks (numpy's default)",
}

DEFINITION_EXAMPLE = "t0 = 0, t_1 = 0.8 s, t_101 = 2.8 s -> ttft 0.8 s, mean itl 0.02 s, decode 50 tok/s, e2e 36.1 tok/s"


@dataclass(frozen=True)
class Derived:
    n_tokens: int
    ttft_s: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    e2e_tok_s: float | None
    itl_s: tuple[float, ...]
    tokenize_s: float | None
    total_s: float | None


def _rate(count: float, ns: int) -> float | None:
    return count * NS / ns if ns > 0 and count > 0 else None


def derive(t0: int, t_tokenized: int | None, token_times: Sequence[int], prompt_tokens: int,
           chunks: Sequence[int] | None = None, total: int | None = None, chunked: bool = False,
           t_prefilled: int | None = None) -> Derived:
    """``token_times`` one per token; or, for a server's stream (``chunked``), one per chunk, with
    ``chunks`` the tokens each carried (then ITL is per chunk and decode counts the tokens after
    the first chunk), or only ``total``, the tokens the chunks carried, where the tokens per chunk
    are not known (then decode is unknown: how many tokens the first chunk held is not known);
    neither: no count at all (n is 0, never the number of chunks). ``t_prefilled``: a prompt
    computed with no token generated (a pp test), which gives the prefill rate alone."""
    if not token_times:
        prefill = (_rate(prompt_tokens, t_prefilled - t_tokenized)
                   if t_prefilled is not None and t_tokenized is not None else None)
        return Derived(0, None, prefill, None, None, (), span(t0, t_tokenized), span(t0, t_prefilled))
    if chunked and not chunks and total is None:
        total = 0
    n = sum(chunks) if chunks else (total if total is not None else len(token_times))
    after_first = n - chunks[0] if chunks else (n - 1 if total is None else None)
    t1, tn = token_times[0], token_times[-1]
    itl = tuple((b - a) / NS for a, b in zip(token_times, token_times[1:]))
    prefill = _rate(prompt_tokens, t1 - t_tokenized) if t_tokenized is not None else None
    return Derived(
        n_tokens=n,
        ttft_s=(t1 - t0) / NS,
        prefill_tok_s=prefill,
        decode_tok_s=_rate(after_first, tn - t1) if after_first is not None else None,
        e2e_tok_s=_rate(n, tn - t0),
        itl_s=itl,
        tokenize_s=span(t0, t_tokenized),
        total_s=(tn - t0) / NS,
    )


def span(a: int | None, b: int | None) -> float | None:
    """Seconds from stamp ``a`` to stamp ``b`` (ns), or None where either is unknown."""
    return None if a is None or b is None else (b - a) / NS
