"""The quality phase's records: the text scored, each chunk's raw per-position figures, and
what they give against the reference (perplexity, KL divergence, top-1 agreement).
Definitions: macprof/measure/quality.py (llama-perplexity's); fields: docs/runlog.md."""

from __future__ import annotations

import msgspec

from macprof.model.phases import Failure, PhaseMemory

from macprof.model.records import ABSENT, Count, Number, Record
from macprof.model.kind import NAME, PATH, TEXT, VOCAB


class QualityText(Record):
    """The text scored: where it came from, its sha256 and size, and its token count."""

    KINDS = {"source": PATH, "sha256": VOCAB}

    source: str | None = None
    sha256: str | None = None
    bytes: int | None = None
    tokens: int | None = None  # the ids of what was tokenized: the whole text, or its start (tokenized_chars)
    # a text far longer than the scored tokens need: the characters of its start that were tokenized
    tokenized_chars: int | None = ABSENT


class QualityChunk(Record):
    """One chunk's raw figures, one value per scored position (the chunk's second half)."""

    REQUIRED_KEYS = ("index", "nll")  # in every log (the schema's required), though code may leave them out
    index: int = 0
    t_start: int | None = None
    t_end: int | None = None
    tokens: int = 0  # the chunk's length: one forward pass over this many tokens
    nll: tuple[Number, ...] = ()
    kld: tuple[Number, ...] | None = None  # null without a reference to compare with
    same_top: tuple[bool, ...] | None = None


class KldSummary(Record):
    """KL divergence per token against the reference: mean ± standard error (and its 95 %
    normal interval), median, 99th percentile, maximum."""

    n: int = 0
    mean: Number | None = None
    unc: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    median: Number | None = None
    p99: Number | None = None
    max: Number | None = None


class QualityPhase(Record):
    KINDS = {"tokens_sha256": VOCAB, "reference": NAME, "reference_reason": TEXT, "rescore_reason": TEXT}
    REQUIRED_KEYS = ("chunks", "failures")  # in every log (the schema's required), though code may leave them out
    # from the chunks scored (analyse/quality.py): quality_start journals the rest (its chunks: chunks_planned)
    BUILT = ("chunks_planned", "scored_tokens", "ppl", "ppl_unc", "kld", "same_top", "same_top_unc", "score_tok_s", "chunks",
             "failures", "memory")
    text: QualityText | None = None
    n_ctx: int | None = None
    chunks_planned: int | None = None
    tokens_sha256: str | None = None  # of the scored token ids: equal across models that saw the same ids
    reference: str | None = None  # the model compared against
    is_reference: bool = False
    reference_reason: str | None = None  # why there is no KLD (no reference, tokenizers differ, ...)
    rescore_reason: str | None = ABSENT  # the reference scored again: why its stored log-probs were not used
    scored_tokens: Count = 0
    ppl: Number | None = None
    ppl_unc: Number | None = None
    kld: KldSummary | None = None
    same_top: Number | None = None
    same_top_unc: Number | None = None
    score_tok_s: Number | None = None  # median over chunks of tokens / forward-pass seconds
    chunks: tuple[QualityChunk, ...] = ()
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = ABSENT


class QualityJob(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The quality phase's part of a worker's job (run/reference.py QualityParent, ``job``): which
    model is the reference, where its distributions are stored, and why a model gets none."""

    reference: str | None = None  # the reference model's name; None: no reference in this run
    store: str | None = None  # the stored distributions' path, without suffix (reference.store_path)
    is_reference: bool = False  # this worker's model is the reference: it scores and stores
    missing: str | None = None  # why there are no distributions to compare with (the reference failed)
    rescore_reason: str | None = None  # why the reference scores again (reference.store_changed)
