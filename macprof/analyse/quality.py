"""The quality phase's record from its events, and the figures compare and plot show (pure).
Every figure recomputes from the raw per-position values the chunks keep."""

from __future__ import annotations

from typing import Sequence

from macprof.measure import quality as q
from macprof.measure import stats
from macprof.model import events as ev
from macprof.model.log import ModelResult
from macprof.model.phase_events import QualityChunkScored, QualityStart
from macprof.model.phases import Failure, PhaseMemory
from macprof.model.quality import KldSummary, QualityPhase


def build_quality(events: Sequence[ev.Event], failures: list[Failure], memory: PhaseMemory) -> QualityPhase:
    """From the last ``quality_start`` on (a resumed run scores again from the start), its
    chunks in order, each once."""
    starts = [i for i, e in enumerate(events) if isinstance(e, QualityStart)]
    if not starts:
        return QualityPhase(failures=tuple(failures), memory=memory)
    head = events[starts[-1]]
    assert isinstance(head, QualityStart)
    scored = (e.record() for e in events[starts[-1]:] if isinstance(e, QualityChunkScored))
    chunks = tuple(c for _, c in sorted({c.index: c for c in scored}.items()))
    nll = [x for c in chunks for x in c.nll]
    kld = [x for c in chunks for x in (c.kld or ())]
    same = [x for c in chunks for x in (c.same_top or ())]
    has_kld = bool(chunks) and all(c.kld is not None for c in chunks)
    rates = [c.tokens / ((c.t_end - c.t_start) / 1e9) for c in chunks
             if c.t_start is not None and c.t_end is not None and c.t_end > c.t_start]
    return head.record().replace(
        chunks_planned=head.chunks, scored_tokens=len(nll), **{k: v for k, v in q.perplexity(nll).items() if k != "mean_nll"},
        kld=KldSummary(**q.kld_stats(kld)) if has_kld else None,
        **(q.same_top_stats(same) if has_kld else {"same_top": None, "same_top_unc": None}),
        score_tok_s=stats.median_known(rates), chunks=chunks, failures=tuple(failures), memory=memory)


def quality_figures(m: ModelResult) -> dict:
    """The quality columns of compare and plot: perplexity, mean KLD (and its 95 % interval),
    top-1 agreement, the reference, and why a figure is missing."""
    ph = m.phases.quality
    if ph is None:
        return {"ppl": None, "kld_mean": None, "kld_ci_low": None, "kld_ci_high": None, "kld_p99": None,
                "same_top": None, "reference": None, "quality_reason": None, "has_quality": False}
    k = ph.kld
    reason = ph.reference_reason if k is None else None
    if not ph.chunks:
        reason = "; ".join(f.reason or f.status for f in ph.failures) or "nothing scored"
    return {"ppl": ph.ppl, "kld_mean": k.mean if k else None, "kld_ci_low": k.ci_low if k else None,
            "kld_ci_high": k.ci_high if k else None, "kld_p99": k.p99 if k else None, "same_top": ph.same_top,
            "reference": ph.reference, "quality_reason": reason, "has_quality": True}
