"""Speculative decoding's pure arithmetic: the n-gram (prompt lookup) draft, the accepted
prefix of a verified draft, each round's draft budget, the per-token acceptance a set of rounds
gives, and the roofline's round: its time, the expected tokens per round at an acceptance and so
the speed-up over plain decoding (the loop itself is run/phases/speculative.py; the run's
prediction analyse/ceilings.py and `macprof estimate --draft` both call ``predicted_round``)."""

from __future__ import annotations

from typing import Sequence

from macprof.measure.roofline import Roofline


def ngram_draft(context: Sequence[int], n: int, k: int) -> list[int]:
    """Prompt lookup: the ``k`` tokens that followed the most recent earlier occurrence of the
    context's last ``m`` tokens, for the longest ``m`` <= ``n`` that occurs earlier (as
    llama-cpp-python's LlamaPromptLookupDecoding and llama.cpp's lookup search, longest first);
    fewer where the match is near the end, none where no suffix recurs."""
    if k <= 0:
        return []
    size = len(context)
    for m in range(min(n, size - 1), 0, -1):
        pattern = list(context[size - m:])
        # the latest start whose window is not the suffix itself, searched back from the end
        for start in range(size - m - 1, -1, -1):
            if list(context[start:start + m]) == pattern:
                return list(context[start + m:start + m + k])
    return []


def accepted_prefix(drafts: Sequence[int], choices: Sequence[int]) -> int:
    """How many drafted tokens the target accepts: the longest prefix where each draft is the
    target's greedy choice after the tokens before it (``choices[j]`` follows ``drafts[:j]``)."""
    a = 0
    while a < len(drafts) and a < len(choices) and drafts[a] == choices[a]:
        a += 1
    return a


def draft_budget(k: int, left: int) -> int:
    """Tokens to draft in a round with ``left`` tokens still to emit: a round emits up to k + 1
    (the accepted drafts and the target's own), so k is capped at left - 1 to end exactly."""
    return max(0, min(k, left - 1))


def tokens_per_round(alpha: float, k: int) -> float:
    """Expected tokens a round emits when each drafted token is accepted with probability α
    independently, up to the first rejection: (1 - α^(k+1)) / (1 - α); k + 1 at α = 1."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def acceptance_per_token(rounds: Sequence[tuple[int, int]]) -> float | None:
    """The per-token acceptance of the model behind ``tokens_per_round`` (each drafted token
    accepted with probability α, until the first rejection), estimated from (drafted, accepted)
    rounds: accepted tokens over the draft tokens the target judged, Σa / Σ(a + [a < drafted])
    (the drafts after a rejection were never judged; its maximum-likelihood value). Not
    accepted / drafted, which counts those unjudged drafts as rejections and so falls with k at
    one and the same α. None where no round drafted."""
    judged = sum(a + (1 if a < d else 0) for d, a in rounds if d > 0)
    return sum(a for d, a in rounds if d > 0) / judged if judged else None


def predicted_round(target: Roofline, draft: Roofline | None, k: int, alpha: float | None, context: float) -> dict:
    """The roofline's speculative round at ``context`` tokens: k one-token draft steps (none for
    a lookup draft, ``draft`` None), then one verify of k + 1 tokens that reads the target's
    weights and K/V once (its compute that of k + 1 tokens); against one plain target step. With
    an acceptance α, the expected tokens per round and the speed-up = tokens per round x plain
    step / round time. Seconds; one dict per k (docs/design.md "Speculative decoding")."""
    draft_s = k * draft.step_s(context) if draft is not None else 0.0
    verify_s = max(target.read_s(context), target.compute_s(k + 1) or 0.0)
    round_s = draft_s + verify_s
    plain_s = target.step_s(context)
    out: dict = {"k": k, "draft_s": draft_s, "verify_s": verify_s, "round_s": round_s, "plain_step_s": plain_s,
                 "plain_tok_s": 1.0 / plain_s}
    if alpha is not None:
        per_round = tokens_per_round(alpha, k)
        out.update(acceptance=alpha, tokens_per_round=per_round, tok_s=per_round / round_s,
                   speedup=per_round * plain_s / round_s)
    return out
