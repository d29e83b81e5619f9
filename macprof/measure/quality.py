"""How much a model's next-token distributions differ from a reference's (pure numpy, no I/O).

Defined as llama.cpp's ``llama-perplexity`` defines them (tools/perplexity/perplexity.cpp), so
macprof's figures and its agree on the same tokens:

- the token sequence is cut into chunks of ``n_ctx``; each chunk starts with BOS where the
  model adds one (its first token is replaced); the first half of a chunk is context only,
  and positions ``n_ctx // 2 .. n_ctx - 2`` are scored, each against the token after it;
- a position's NLL is −log p(next token); perplexity is exp(mean NLL);
- the reference's log-probabilities are kept as llama.cpp's ``--kl-divergence-base`` keeps
  them: per position two float32 (scale, min log-prob) in four uint16, then one uint16 per
  vocabulary entry, the logit's offset from max − 16 in steps of (max − min) / 65535;
- KLD at a position = Σ over entries whose base log-prob exceeds −16 of
  p_base × (log p_base − log p_model); "same top" = the model's argmax equals the base's;
- a mean's ± is sqrt((E[x²] − E[x]²) / (n − 1)) (0 for 10 values or fewer), a proportion's
  sqrt(p (1 − p) / (n − 1)); percentiles interpolate linearly (numpy's default, and theirs).
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # numpy is imported where an array is computed: the log's readers never need it
    import numpy as np

LOG_PROB_FLOOR = 16.0  # llama.cpp ignores what lies more than 16 nats below the top


def scored_range(n_ctx: int) -> range:
    """The positions of a chunk whose logits are scored (each predicts the token after it)."""
    return range(n_ctx // 2, n_ctx - 1)


def row_width(n_vocab: int) -> int:
    """uint16 per stored position: 4 for the two float32, then the vocabulary rounded up to even."""
    return 2 * ((n_vocab + 1) // 2) + 4


def tokens_sha256(ids: Sequence[int]) -> str:
    """The identity of a token sequence: sha256 of its ids as little-endian int32 (llama.cpp's
    own layout of the tokens in a --kl-divergence-base file)."""
    import numpy as np

    return hashlib.sha256(np.asarray(ids, dtype="<i4").tobytes()).hexdigest()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-probabilities, float64 sums as llama.cpp's (float32 logits in, float64 out)."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float32)
    top = x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp((x - top).astype(np.float64)).sum(axis=-1, keepdims=True))
    return (x - top).astype(np.float64) - lse


def quantize(logits: np.ndarray) -> np.ndarray:
    """Rows of llama.cpp's stored log-probabilities (``row_width`` uint16 each) for float32
    logits of shape [n, vocab]."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float32)
    n, vocab = x.shape
    top = x.max(axis=1)
    low = np.maximum(x.min(axis=1), top - np.float32(LOG_PROB_FLOOR))
    lse = np.log(np.exp((x - top[:, None]).astype(np.float64)).sum(axis=1)).astype(np.float32)
    min_log_prob = (low - top - lse).astype(np.float32)
    scale = ((top - low) / np.float32(65535)).astype(np.float32)
    out = np.zeros((n, row_width(vocab)), dtype=np.uint16)
    head = np.stack([scale, min_log_prob], axis=1).astype("<f4")
    out[:, :4] = head.view("<u2").reshape(n, 4)
    with np.errstate(divide="ignore"):
        inv = np.where(scale > 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
    q = np.rint(inv[:, None] * (x - low[:, None])).astype(np.float32)
    out[:, 4:4 + vocab] = np.where(x > low[:, None], np.clip(q, 0, 65535), 0).astype(np.uint16)
    return out


def dequantize(rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """Stored rows -> base log-probabilities [n, vocab] (float32, as llama.cpp reads them)."""
    import numpy as np

    rows = np.ascontiguousarray(rows, dtype=np.uint16)
    head = rows[:, :4].copy().view("<f4")
    scale, min_log_prob = head[:, 0:1], head[:, 1:2]
    return (scale * rows[:, 4:4 + n_vocab].astype(np.float32) + min_log_prob).astype(np.float32)


def score(logits: np.ndarray, targets: Sequence[int], base_rows: np.ndarray | None = None) -> dict:
    """Per scored position: ``nll``; with the reference's stored rows also ``kld`` and
    ``same_top``. ``logits`` are the model's at the scored positions, ``targets`` the token
    after each."""
    import numpy as np

    logp = log_softmax(logits)
    idx = np.arange(len(targets))
    out: dict = {"nll": (-logp[idx, np.asarray(targets)]).tolist()}
    if base_rows is None:
        return out
    base = dequantize(base_rows, logp.shape[1]).astype(np.float64)
    mass = np.where(base > -LOG_PROB_FLOOR, np.exp(base), 0.0)
    out["kld"] = (mass * (base - logp)).sum(axis=1).tolist()
    out["same_top"] = (np.argmax(np.asarray(logits, dtype=np.float32), axis=1) == np.argmax(base, axis=1)).tolist()
    return out


def mean_and_uncertainty(values: Sequence[float]) -> tuple[float | None, float | None]:
    """llama-perplexity's mean and its ±: the standard error, 0 for 10 values or fewer."""
    import numpy as np

    n = len(values)
    if n < 1:
        return None, None
    x = np.asarray(values, dtype=np.float64)
    mean = float(x.mean())
    var = float((x * x).mean() - mean * mean)
    return mean, (math.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0)


def perplexity(nll: Sequence[float]) -> dict:
    """exp(mean NLL) and its ± (ppl × the mean's standard error), over every scored position."""
    mean, unc = mean_and_uncertainty(nll)
    if mean is None or unc is None:
        return {"ppl": None, "ppl_unc": None, "mean_nll": None}
    ppl = math.exp(mean)
    return {"ppl": ppl, "ppl_unc": ppl * unc, "mean_nll": mean}


def kld_stats(kld: Sequence[float]) -> dict:
    """Mean (± its standard error, and the 95 % normal interval from it), median, p99, max."""
    import numpy as np

    mean, unc = mean_and_uncertainty(kld)
    if mean is None or unc is None:
        return {"n": 0, "mean": None, "unc": None, "ci_low": None, "ci_high": None, "median": None, "p99": None,
                "max": None}
    x = np.asarray(kld, dtype=np.float64)
    return {"n": len(x), "mean": mean, "unc": unc, "ci_low": mean - 1.96 * unc, "ci_high": mean + 1.96 * unc,
            "median": float(np.median(x)), "p99": float(np.percentile(x, 99)), "max": float(x.max())}


def same_top_stats(same: Sequence[bool]) -> dict:
    """The share of positions whose argmax agrees with the reference's, and its ±."""
    n = len(same)
    if n < 1:
        return {"same_top": None, "same_top_unc": None}
    p = sum(1 for s in same if s) / n
    return {"same_top": p, "same_top_unc": math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0}


def frontier(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Per (mean KLD, decode tok/s): True where no other point is at least as good on both and
    better on one (lower KLD, higher tok/s); a point missing either figure is never on it."""
    out = []
    for i, (k, r) in enumerate(points):
        if k is None or r is None:
            out.append(False)
            continue
        beaten = any(j != i and k2 is not None and r2 is not None and k2 <= k and r2 >= r and (k2 < k or r2 > r)
                     for j, (k2, r2) in enumerate(points))
        out.append(not beaten)
    return out
