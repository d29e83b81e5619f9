"""The quality phase: the model scores a fixed token sequence chunk by chunk, as llama.cpp's
llama-perplexity does (macprof/measure/quality.py has the definitions), one forward pass per
chunk with the logits of every position. Against the run's reference model it gives the KL
divergence and top-1 agreement per scored position; alone, the perplexity.

The reference scores first (the orchestrator orders the models so) and writes its
log-probabilities, in llama.cpp's compact uint16 form, to a file the parent names in the job;
a sidecar JSON written once every chunk is in says which tokens they are for. A later model
reads that file one chunk at a time, so no model's full distributions are ever held in memory,
and the reference's are stored once. A model whose token ids differ from the reference's
(another tokenizer, another BOS rule) gets its perplexity and, for KLD, the reason: never an
approximation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from macprof.engines.base import AnyEngine, Engine
from macprof.engines.capabilities import SCORE, able
from macprof.errors import MacprofError
from macprof.measure import quality as q
from macprof.model import events as ev
from macprof.model.phase_events import QualityChunkScored, QualityStart, QualityStored
from macprof.model.quality import QualityChunk, QualityJob, QualityPhase, QualityText
from macprof.model.records import ABSENT
from macprof.run import reference
from macprof.run.phases.api import Host, Parent, Reads, file_input
from macprof.run.phases.common import PhaseContext
from macprof.run.qualitytext import check, default_path, head, read_text

if TYPE_CHECKING:  # numpy is imported in the worker, where chunks are scored, not by the parent
    import numpy as np

    from macprof.config import ModelSpec

PHASE = "quality"


def chunked_ids(ids: list[int], bos: list[int], n_ctx: int, max_tokens: int) -> list[list[int]]:
    """The chunks a model scores: whole chunks of ``n_ctx`` from the start of the text's ids,
    at most ``max_tokens`` in all, each starting with BOS where the model adds one (its first
    token replaced, as llama-perplexity does)."""
    n_chunks = min(max_tokens // n_ctx, len(ids) // n_ctx)
    chunks = [list(ids[k * n_ctx:(k + 1) * n_ctx]) for k in range(n_chunks)]
    if bos:
        for c in chunks:
            c[0] = bos[0]
    return chunks


@dataclass(frozen=True)
class _Text:
    """The quality text as this model scores it: what it is (``info``), its ids, the chunks taken
    from them and the sha256 of the ids those chunks hold (the reference's must be the same)."""

    info: dict[str, Any]
    ids: list[int]
    chunks: list[list[int]]
    sha256: str


def _text(engine: Engine, path: str | None, max_tokens: int, n_ctx: int) -> _Text:
    """The text in ``path`` (the packaged one where None) tokenized by the model, from its start
    up to ``max_tokens``, in whole chunks of ``n_ctx``; one line where it gives no whole chunk."""
    text, info = read_text(path)
    part = head(text, max_tokens)
    ids = list(engine.tokenize(part))
    if len(ids) < max_tokens and len(part) < len(text):  # a tokenizer that packs fewer characters a token
        part, ids = text, list(engine.tokenize(text))
    if len(part) < len(text):
        info["tokenized_chars"] = len(part)
    bos = list(engine.tokenize(""))  # what the tokenizer puts before any text: BOS, or nothing
    chunks = chunked_ids(ids, bos, n_ctx, max_tokens)
    if not chunks:
        raise MacprofError(f"{info['source']}: the quality text gives {len(ids)} tokens with this model's tokenizer, "
                           f"fewer than one chunk of {n_ctx} (--quality-ctx); give a longer --text")
    return _Text(info, ids, chunks, q.tokens_sha256([t for k in range(len(chunks)) for t in ids[k * n_ctx:(k + 1) * n_ctx]]))


def run_quality(ctx: PhaseContext[AnyEngine]) -> None:
    import numpy as np

    s = ctx.settings
    job: QualityJob = ctx.prepared or QualityJob()  # the parent's (run/reference.py QualityParent)
    engine = able(ctx.engine, SCORE)
    if isinstance(engine, str):
        raise MacprofError(f"the {ctx.engine.name} engine cannot give the logits of every position: {engine}")
    n_ctx = s.quality_ctx
    text = _text(engine, s.text, s.quality_tokens, n_ctx)
    chunks, sha = text.chunks, text.sha256
    vocab = engine.vocab_size
    store = Path(job.store) if job.store else None
    is_ref = job.is_reference
    base, reason = (None, None) if is_ref else _open_reference(job, sha, vocab)
    ctx.emit(QualityStart.of(QualityPhase(
        text=QualityText(**text.info, tokens=len(text.ids)), n_ctx=n_ctx, tokens_sha256=sha, reference=job.reference,
        is_reference=is_ref, reference_reason=reason,
        # ABSENT, not null, where the reference does not score again
        rescore_reason=job.rescore_reason if is_ref and job.rescore_reason else ABSENT),
        phase=PHASE, chunks=len(chunks), vocab_size=vocab))
    per_chunk = len(q.scored_range(n_ctx))
    writer = None
    if is_ref and store is not None:
        writer = np.lib.format.open_memmap(str(store) + ".npy", mode="w+", dtype=np.uint16,
                                           shape=(len(chunks) * per_chunk, q.row_width(vocab)))
    for k, chunk in enumerate(chunks):
        t_start = ctx.clock()
        logits = engine.score(chunk)
        t_end = ctx.clock()
        scored = np.asarray(logits, dtype=np.float32)[q.scored_range(n_ctx)]
        targets = chunk[n_ctx // 2 + 1:]
        rows = slice(k * per_chunk, (k + 1) * per_chunk)
        # the reference against its own stored rows: what the others are held to (KLD ~0 from the uint16 step)
        mine = q.quantize(scored) if is_ref else None
        if writer is not None:
            writer[rows] = mine
        figures = q.score(scored, targets, mine if is_ref else (base[rows] if base is not None else None))
        ctx.emit(QualityChunkScored.of(QualityChunk(
            index=k, t_start=t_start, t_end=t_end, tokens=len(chunk), nll=tuple(figures["nll"]),
            kld=_tuple(figures.get("kld")), same_top=_tuple(figures.get("same_top"))), phase=PHASE))
    if writer is not None and store is not None:
        writer.flush()
        del writer
        ctx.emit(_stored(store, {"model": job.reference, "tokens_sha256": sha, "vocab_size": vocab, "n_ctx": n_ctx,
                                 "chunks": len(chunks), "row_width": q.row_width(vocab)}))
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory() or None))


def _stored(store: Path, meta: dict) -> QualityStored:
    """The reference's rows written whole: its sidecar last, then the digest a later model checks
    the files against (reference.store_changed)."""
    from macprof.run.reference import store_digest

    _write_meta(store, meta)
    digest, size = store_digest(store)
    return QualityStored(phase=PHASE, sha256=digest, bytes=size)


def _tuple(values: Sequence[Any] | None) -> tuple | None:
    return None if values is None else tuple(values)


def _write_meta(store: Path, meta: dict) -> None:
    """The sidecar, written last and atomically: its presence says the distributions are whole."""
    tmp = store.with_name(store.name + ".json.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, store.with_name(store.name + ".json"))


def _open_reference(job: QualityJob, sha: str, vocab: int) -> tuple[np.ndarray | None, str | None]:
    """The reference's stored rows (a read-only memmap), or why this model gets no KLD."""
    import numpy as np

    ref = job.reference
    if not ref or not job.store:
        return None, job.missing or "no reference model in this run"
    if job.missing:
        return None, f"no reference: {job.missing}"
    store = Path(job.store)
    from macprof.files import filekind

    try:  # regular files only: a FIFO in their place would block this worker until its timeout
        meta = json.loads(filekind.read_regular(store.with_name(store.name + ".json"), 1 << 20, "the reference's sidecar"))
        rows = filekind.regular_stat(Path(str(store) + ".npy"))
    except (OSError, ValueError, MacprofError):
        return None, f"no reference: {ref} left no complete distributions (its quality phase failed or did not run)"
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), int) and not isinstance(meta.get(k), bool)
                                             for k in ("vocab_size", "chunks", "row_width", "n_ctx")):
        return None, f"no reference: {ref}'s stored sidecar is malformed"
    if meta.get("tokens_sha256") != sha:
        return None, (f"tokenizer differs from the reference {ref}'s: the text's token ids hash to {sha[:12]}, "
                      f"{ref}'s to {str(meta.get('tokens_sha256'))[:12]} (KLD needs the same ids; not approximated)")
    if meta["vocab_size"] != vocab:
        return None, f"vocabulary of {vocab} ids, the reference {ref}'s has {meta['vocab_size']}: no KLD across them"
    try:
        base = np.load(str(store) + ".npy", mmap_mode="r")
    except (OSError, ValueError) as exc:
        return None, f"no reference: {ref}'s stored log-probabilities cannot be read ({type(exc).__name__}: {exc})"
    want = (meta["chunks"] * len(q.scored_range(meta.get("n_ctx") or 0)), meta["row_width"])
    if base.dtype != np.uint16 or base.shape != want or rows.st_size < base.nbytes:
        return None, (f"no reference: {ref}'s stored log-probabilities are {base.dtype} {base.shape}, not the "
                      f"uint16 {want} its sidecar describes")
    return base, None


# -- the parent's side (run/phases/api.py) ---------------------------------------------------
QUALITY_TEXT = "the quality text"  # its role among a model's inputs (model_start identity.inputs)


class QualityParent(Parent[None, QualityJob]):
    """Chooses the reference (a bad --reference stops the run here) and checks each --text
    before any worker waits on it (a FIFO, a device, too large); the reference runs first, and
    its stored distributions are removed when the run completes (they served this run only)."""

    def __init__(self, models: Sequence[ModelSpec], journal_path: Path, reads: Reads) -> None:
        super().__init__(models, journal_path, reads)
        self.reference = reference.choose(models)
        for text in sorted({m.settings.text for m in models if PHASE in m.settings.phases and m.settings.text}):
            check(text)
        self.store = reference.store_path(journal_path, self.reference) if self.reference else None
        self._rescore: str | None = None  # why the reference scores again, for its next worker's job

    def order(self, models: list[ModelSpec]) -> list[ModelSpec]:
        return reference.ordered(models, self.reference)  # the others read what it stores

    def inputs(self, model: ModelSpec, prepared: None) -> list[dict]:
        text = model.settings.text
        return [file_input(QUALITY_TEXT, Path(text) if text else default_path())]

    def job(self, model: ModelSpec, prepared: None, host: Host) -> QualityJob:
        """Before a model is held to the reference's stored log-probabilities, they must be the
        bytes the reference journaled (store_changed); else the reference scores again first, and
        its quality phase records why."""
        if model.name == self.reference:
            why, self._rescore = self._rescore, None
            return reference.job(model, self.reference, self.store, host.events, why)
        why = reference.store_changed(self.store, host.events, self.reference)
        ref = next((m for m in self.models if m.name == self.reference), None)
        if why is not None and ref is not None and self.store is not None:
            host.note(f"{ref.name}: {why}; scoring it again before {model.name}")
            reference.remove_store(self.store)
            self._rescore = why
            host.run_worker(ref, [PHASE])
        return reference.job(model, self.reference, self.store, host.events)

    def close(self, complete: bool) -> None:
        if complete and self.store:  # the reference's distributions served this run only
            reference.remove_store(self.store)
