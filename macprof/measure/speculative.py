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
    context's last ``m`` tokens, for the longest ``m`` <= ``n`` that occurs earlier (longest
    first, as llama-cpp-python's LlamaPromptLookupDecoding searches; it takes the earliest
    occurrence with a continuation instead, so the two can draft differently on the same context:
    `macprof run --speculative-impl both` measures both side by side); fewer where the match is
    near the end, none where no suffix recurs."""
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


def rounds_of(rounds: Sequence[tuple[int | None, int]]) -> tuple[float | None, float | None]:
    """(tokens per round, drafts per round) over the rounds given as (drafted, accepted): a round
    emits its accepted drafts and the target's own token; drafts per round is None where a
    round's drafted count is not told."""
    if not rounds:
        return None, None
    drafted = [d for d, _ in rounds]
    return (sum(a + 1 for _, a in rounds) / len(rounds),
            None if any(d is None for d in drafted) else sum(d or 0 for d in drafted) / len(rounds))


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


def predicted_rounds(target: Roofline, draft: Roofline | None, drafts: Sequence[int], alpha: float | None,
                     context: float) -> dict:
    """The roofline's prediction over rounds as they drafted: ``drafts`` is each measured round's
    drafted count (a lookup draft drafts fewer than k where the context has no match, and none
    where it has nothing; a request's last round is capped to end at its length). Each round is
    ``predicted_round`` at its own count; the prediction is their mean tokens per round over their
    mean round time, x the plain step: k drafts every round where they all drafted k."""
    if not drafts:
        raise ValueError("no round to predict")
    counts: dict[int, int] = {}
    for d in drafts:
        counts[d] = counts.get(d, 0) + 1
    each = {d: predicted_round(target, draft, d, alpha, context) for d in counts}
    n = len(drafts)

    def mean(key: str) -> float:
        return sum(each[d][key] * c for d, c in counts.items()) / n

    plain_s = target.step_s(context)
    out: dict = {"k": max(counts), "drafts_per_round": sum(drafts) / n, "draft_s": mean("draft_s"),
                 "verify_s": mean("verify_s"), "round_s": mean("round_s"), "plain_step_s": plain_s,
                 "plain_tok_s": 1.0 / plain_s}
    if alpha is not None:
        per_round = mean("tokens_per_round")
        out.update(acceptance=alpha, tokens_per_round=per_round, tok_s=per_round / out["round_s"],
                   speedup=per_round * plain_s / out["round_s"])
    return out


def proposal_rounds(proposals: Sequence[tuple[int, Sequence[int]]], emitted: Sequence[int]) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per round of a speculative decoding that told its proposals but not
    what it accepted (llama-cpp-python's draft_model is called once a round): each proposal is
    (the index into ``emitted`` of the first token it drafts for, its tokens). Greedy
    verification accepts the longest prefix that equals what was emitted there, so that prefix
    is the round's accepted count; a round past the last emitted token is none of the request's."""
    drafted, accepted = [], []
    for start, tokens in proposals:
        if start >= len(emitted):
            break
        drafted.append(len(tokens))
        accepted.append(accepted_prefix(tokens, emitted[start:]))
    return drafted, accepted


def flag_rounds(from_draft: Sequence[bool]) -> list[int]:
    """Accepted drafts per round from per-token flags, where every round ends with one target
    token (mlx-lm's from_draft: speculative_generate_step drafts from the prompt on, so its first
    token already belongs to a round): the runs of True before each False. A last run of True
    with no target token after it (the request ended mid-round) is a round of its own."""
    accepted, run = [], 0
    for flag in from_draft:
        if flag:
            run += 1
        else:
            accepted.append(run)
            run = 0
    if run:
        accepted.append(run)
    return accepted


def first_round_tokens(from_draft: Sequence[bool] | None) -> int:
    """How many tokens come out together with the first one: up to and including the first target
    token (from_draft False). 1 where the first token is the prefill's own (macprof's loop,
    llama-cpp-python's); a whole round where the first round drafts from the prompt on
    (mlx-lm's); 1 where nothing is told."""
    if not from_draft:
        return 1
    return next((i + 1 for i, flag in enumerate(from_draft) if not flag), len(from_draft))


def decode_rate(token_times: Sequence[int], from_draft: Sequence[bool] | None = None) -> float | None:
    """Decode tokens/s after the first emission, as plain decoding's (n - 1) / (t_n - t_1) is: the
    tokens after the first burst over the time after it, (n - m) / (t_n - t_m), m the first
    burst's tokens (first_round_tokens). Counting from the first token alone would credit a
    speculative path that drafts from the prompt on (mlx-lm's) with m - 1 tokens that took no
    time of the span. None with fewer than two emissions."""
    m = first_round_tokens(from_draft)
    n = len(token_times)
    if n <= m or token_times[-1] <= token_times[m - 1]:
        return None
    return (n - m) * 1e9 / (token_times[-1] - token_times[m - 1])
