"""The conversation phase's record from its events (run/phases/conversation.py): each turn's two
requests, what the cache held and reused, where each app's conversation stopped early (with the
requests its last turn made), and the phase's summary over the turns measured: the reuse-rate
distribution, the TTFT a natural cache saves against an emptied one, and how TTFT grows with the
context."""

from __future__ import annotations

from typing import Sequence

from macprof.analyse.build import PhaseEvents, _counts, _phase_memory
from macprof.analyse.requests import phase_failures, request_record, summarized
from macprof.measure import stats
from macprof.model import events as ev
from macprof.model.conversation import STOP_KINDS, AppStop, ConversationPhase, ConversationStart, \
    ConversationSummary, ConversationTurn, Turn
from macprof.model.phases import Request

PHASE = "conversation"


def build_conversation_phase(ctx: PhaseEvents, name: str) -> ConversationPhase:
    return build(ctx.events, phase_failures(ctx.failures, name), ctx.head.settings.app_order, _phase_memory(ctx.events, name))


def build(events: Sequence[ev.Event], failures: list, app_order: str | None, memory) -> ConversationPhase:
    start = next((e for e in events if isinstance(e, ConversationStart) and e.phase == PHASE), None)
    requests: dict[tuple[int, int], dict[str, Request]] = {}
    for e in events:
        if isinstance(e, ev.Request) and e.phase == PHASE and e.kind == "measured" and e.case and e.mode:
            requests.setdefault((int(e.case.removeprefix("app")), e.index), {})[e.mode] = request_record(e)
    turns, stops = [], []
    for e in events:
        if not (isinstance(e, ConversationTurn) and e.phase == PHASE):
            continue
        t = e.record()
        pair = requests.get((t.app, t.turn), {})
        natural, emptied = pair.get("natural"), pair.get("emptied")
        if not t.fits or e.error:  # the context was full, or the turn failed: its app's conversation ended
            stops.append(AppStop(app=t.app, turn=t.turn, reason=t.stop_reason, error=e.error, natural=natural,
                                 # a journal before stops had prompts wrote 0 for "not rendered": no prompt has 0 tokens
                                 emptied=emptied, prompt_tokens=(t.prompt_tokens or None) if e.has("prompt_tokens")
                                 else None))
            continue
        saved = (emptied.ttft_s - natural.ttft_s) if natural and emptied and natural.ttft_s is not None \
            and emptied.ttft_s is not None else None
        # more reused than the prompt has (a server's claim an older log kept as its count): no figure
        reused, unreported = t.reused_tokens, t.reuse_unreported
        if reused is not None and reused > t.prompt_tokens:
            reused, unreported = None, (f"the reported reuse of {reused} tokens is impossible (more than the prompt's "
                                        f"{t.prompt_tokens} tokens): the server's claim, not a count")
        # the engine's report against the ids it held: equal, or zero with the engine's reason; a
        # server's (whose generated ids are not known here) at most what they may allow
        checked = None if reused is None or (t.reuse_bound is None and t.expected_reuse is None) else (
            reused <= t.reuse_bound if t.reuse_bound is not None else
            (reused == t.expected_reuse or (reused == 0 and bool(t.reuse_refused))))
        turns.append(t.replace(reused_tokens=reused, reuse_rate=stats.ratio(reused, t.prompt_tokens),
                               ideal_rate=stats.ratio(t.ideal_reuse, t.prompt_tokens), reuse_unreported=unreported,
                               reuse_checked=checked, natural=natural, emptied=emptied, ttft_saved_s=saved))
    head = start.record() if start else ConversationPhase()
    return head.replace(turns_planned=start.turns if start else 0, app_order=app_order, turns=tuple(turns),
                        stops=tuple(stops), summary=summarize(turns), failures=tuple(failures), memory=memory)


def summarize(turns: Sequence[Turn]) -> ConversationSummary:
    # the first turn of each app has nothing of its own to reuse: the rates are over the later ones
    later = [t for t in turns if t.turn > 0]
    # the hit rate is over the turns whose reuse was reported: an unreported one is never taken for 0
    told = [t for t in later if t.reused_tokens is not None]
    ideal = [t for t in later if t.ideal_reuse is not None]  # --api chat: not known (the server's ids)
    reused = sum(t.reused_tokens or 0 for t in told)
    natural = [(t.prompt_tokens, t.natural.ttft_s) for t in turns if t.natural and t.natural.ttft_s is not None]
    emptied = [(t.prompt_tokens, t.emptied.ttft_s) for t in turns if t.emptied and t.emptied.ttft_s is not None]
    checks = _counts([t.check for t in turns if t.check])  # as the prefix and batch checks are counted
    rates = sorted(t.reuse_rate for t in later if t.reuse_rate is not None)
    return ConversationSummary(
        reuse_rate=summarized(rates), reuse_rate_p10=stats.percentile(rates, 10) if rates else None,
        ideal_rate=summarized([t.ideal_rate for t in later]),
        hit_rate=stats.ratio(reused, sum(t.prompt_tokens for t in told)) if told else None,
        ideal_hit_rate=stats.ratio(sum(t.ideal_reuse or 0 for t in ideal), sum(t.prompt_tokens for t in ideal))
        if ideal else None,
        ttft_natural_s=summarized([v for _, v in natural]), ttft_emptied_s=summarized([v for _, v in emptied]),
        ttft_saved_s=summarized([t.ttft_saved_s for t in later]),
        ttft_growth_natural_s_per_kt=slope_per_kt(natural), ttft_growth_emptied_s_per_kt=slope_per_kt(emptied),
        stops={k: n for k in STOP_KINDS if (n := sum(1 for t in turns if t.stop_kind == k))},
        identical=checks["identical"], near_ties=checks["near_ties"], failed_checks=checks["failed"],
        unchecked_reports=sum(1 for t in turns if t.reuse_checked is False),
        unreported=sum(1 for t in turns if t.reused_tokens is None),
        not_emptied=sum(1 for t in turns if t.not_emptied))


def slope_per_kt(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares seconds per 1,000 prompt tokens; None with fewer than two distinct lengths."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return 1000 * sum((x - mx) * (y - my) for x, y in points) / sxx


def figures(m) -> dict:
    """The conversation columns of compare: the realistic reuse beside the ideal, and the TTFT it saves."""
    ph = m.phases.conversation
    if ph is None:
        return {"has_conversation": False, **{k: None for k in FIGURES}}
    s = ph.summary
    return {"has_conversation": True, "reuse_rate_p50": s.reuse_rate.median, "reuse_rate_p10": s.reuse_rate_p10,
            "hit_rate": s.hit_rate, "ideal_hit_rate": s.ideal_hit_rate, "ttft_saved_s": s.ttft_saved_s.median}


FIGURES = ("reuse_rate_p50", "reuse_rate_p10", "hit_rate", "ideal_hit_rate", "ttft_saved_s")
