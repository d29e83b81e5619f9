"""Which model the quality phase compares the others against, and the order that puts it
first: the one named by ``reference`` (--reference), else the run's highest-precision model
(most file bytes per parameter, from the model files' metadata; the first such in run order);
where that model stores its distributions, whether they are still the bytes it stored, and a
worker's part of the job (run/phases/quality.py QualityParent uses these)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from macprof.config import ModelSpec
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.phase_events import QualityStored
from macprof.model.quality import QualityJob

PHASE = "quality"


def choose(models: Sequence[ModelSpec]) -> str | None:
    """The reference's name; None when no model has the quality phase."""
    scored = [m for m in models if PHASE in m.settings.phases]
    if not scored:
        return None
    asked = list(dict.fromkeys(m.settings.reference for m in scored if m.settings.reference))
    if len(asked) > 1:
        raise MacprofError(f"reference: models name different references ({', '.join(asked)}); a run has one")
    if asked:
        names = [m.name for m in scored]
        if asked[0] not in names:
            raise MacprofError(f"--reference {asked[0]}: not a model of this run with the quality phase "
                               f"(models: {', '.join(names)})")
        return asked[0]
    return max(scored, key=_bits_per_weight).name  # max keeps the first of equals


def _bits_per_weight(model: ModelSpec) -> float:
    """File bits per parameter; a model whose metadata cannot be read ranks by file size alone
    below every model that can (its precision is unknown, not assumed)."""
    from macprof.collect import modelinfo

    try:
        size = sum(f.stat().st_size for f in model.files)
        params = modelinfo.inspect(model.path, model.settings.kv_type).to_dict().get("n_params")
    except (OSError, MacprofError):
        return -1.0
    # rounded: two files of one precision (a GGUF F16 and an MLX float16) tie, and the first in run order wins
    return round(8 * size / params) if params else -1.0 + size / 1e18


def ordered(models: Sequence[ModelSpec], reference: str | None) -> list[ModelSpec]:
    """The run order with the reference first: the others read what it stores."""
    return sorted(models, key=lambda m: m.name != reference)


def job(model: ModelSpec, reference: str | None, store: Path | None, events: Sequence[ev.Event],
        rescore: str | None = None) -> QualityJob:
    """The quality part of a worker's job: the reference, where its distributions are, and,
    when it failed before storing them, why (from the journal); ``rescore``: why the reference
    scores again (store_changed)."""
    if reference is None or store is None:
        return QualityJob(missing="no reference model in this run")
    is_reference = model.name == reference
    failed = [] if is_reference else [f for e in events if isinstance(e, ev.Failure) and e.model == reference
                                      and (f := e.record()).phase in (None, PHASE)]
    return QualityJob(reference=reference, store=str(store), is_reference=is_reference, rescore_reason=rescore,
                      missing=f"{reference} failed: {failed[-1].reason}" if failed else None)


def store_path(journal_path: Path, reference: str) -> Path:
    """Where the reference's distributions go: beside the journal, one per reference."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in reference)
    return journal_path.with_name(f"{journal_path.name}.quality-{safe}")


STORE_SUFFIXES = (".npy", ".json")


def store_digest(store: Path) -> tuple[str, int]:
    """(sha256, bytes) of the stored distributions and their sidecar, read as regular files
    only (a FIFO put in their place is refused, not waited on)."""
    from macprof.files import filekind

    digest, total = hashlib.sha256(), 0
    for suffix in STORE_SUFFIXES:
        with filekind.open_regular(store.with_name(store.name + suffix)) as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    return digest.hexdigest(), total


def store_changed(store: Path | None, events: Sequence[ev.Event], reference: str | None) -> str | None:
    """Why the reference's stored distributions cannot be used as they are now, or None: they
    are the bytes its quality phase journaled (quality_stored), or it never stored any (the job
    then says why). Files macprof wrote and reads back are checked, not trusted: on a resume a
    file overwritten with other rows once gave a KLD of 6,957 and exit 0."""
    if store is None or reference is None:
        return None
    stored = [e for e in events if isinstance(e, QualityStored) and e.model == reference]
    if not stored:
        return None
    try:
        now, _ = store_digest(store)
    except FileNotFoundError:
        return "its stored log-probabilities are gone"
    except (OSError, MacprofError) as exc:
        return f"its stored log-probabilities cannot be read ({exc})"
    then = stored[-1].sha256
    if now != then:
        return f"its stored log-probabilities changed on disk since it scored (sha256 {now[:12]}, journaled {then[:12]})"
    return None


def remove_store(store: Path) -> None:
    for suffix in STORE_SUFFIXES:
        store.with_name(store.name + suffix).unlink(missing_ok=True)
