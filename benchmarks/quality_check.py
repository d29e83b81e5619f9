"""macprof's quality figures beside llama-perplexity's, on the same tokens.

    python benchmarks/quality_check.py --llama-perplexity PATH --log RUN.json \
        --base demo-small-f16 --models demo-small-q8_0,demo-small-q4_k_m [--text FILE]

RUN.json is a `macprof run --phases quality` log of those GGUF models (default text and chunk
settings, or the same --text / --quality-ctx / --quality-tokens). The script runs
`llama-perplexity --kl-divergence-base` on the base model with the same text (-f), context
(-c) and chunk count (--chunks), then `--kl-divergence` on each other model, and prints each
figure from both tools side by side. It checks that the token ids are the same: llama.cpp
stores them in its base file, whose sha256 (int32, as macprof hashes) must equal the log's
`tokens_sha256`. Not part of the test suite: it needs the binary (build_llama_perplexity.sh).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from macprof.measure.quality import tokens_sha256
from macprof.run.qualitytext import read_text
from macprof.store.runlog import load

FIGURES = {  # llama-perplexity's line -> macprof's field
    "ppl": r"Mean PPL\(Q\)\s*:\s*([\d.]+)", "kld_mean": r"Mean\s+KLD:\s*(-?[\d.]+)", "kld_median": r"Median\s+KLD:\s*(-?[\d.]+)",
    "kld_p99": r"99\.0%\s+KLD:\s*(-?[\d.]+)", "kld_max": r"Maximum KLD:\s*(-?[\d.]+)", "same_top": r"Same top p:\s*([\d.]+)",
}


def run(binary: Path, model: Path, args: list[str]) -> str:
    cmd = [str(binary), "-m", str(model), "-t", "2", "-b", "512", *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def parse(text: str) -> dict:
    got = {k: float(m.group(1)) if (m := re.search(p, text)) else None for k, p in FIGURES.items()}
    if got["same_top"] is not None:
        got["same_top"] /= 100
    return got


def base_tokens(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    n_ctx, _, n_chunk = np.frombuffer(raw[8:20], dtype="<i4")
    return np.frombuffer(raw[20:20 + 4 * n_ctx * n_chunk], dtype="<i4")


def ours(log, name: str) -> dict:
    m = next(m for m in log.models if m.identity.name == name)
    q = m.phases.quality
    k = q.kld
    return {"path": m.identity.path, "sha": q.tokens_sha256, "n_ctx": q.n_ctx, "chunks": len(q.chunks), "ppl": q.ppl,
            "kld_mean": k.mean if k else None, "kld_median": k.median if k else None, "kld_p99": k.p99 if k else None,
            "kld_max": k.max if k else None, "same_top": q.same_top}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-perplexity", required=True, type=Path)
    ap.add_argument("--log", required=True, type=Path)
    ap.add_argument("--base", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--text")
    a = ap.parse_args()
    log = load(a.log)
    base = ours(log, a.base)
    with tempfile.TemporaryDirectory() as tmp:
        text_file = Path(tmp) / "text.txt"
        text_file.write_text(read_text(a.text)[0], encoding="utf-8")
        common = ["-f", str(text_file), "-c", str(base["n_ctx"]), "--chunks", str(base["chunks"])]
        kl_base = Path(tmp) / "base.kld"
        out = run(a.llama_perplexity, Path(base["path"]), [*common, "--kl-divergence-base", str(kl_base)])
        m = re.search(r"Final estimate: PPL = ([\d.]+)", out)
        ids = base_tokens(kl_base)
        same = tokens_sha256(ids.tolist()) == base["sha"]
        print(f"token ids: llama-perplexity {len(ids)} ids, sha256 {tokens_sha256(ids.tolist())[:16]}; "
              f"macprof {base['sha'][:16]}: {'SAME' if same else 'DIFFERENT'}")
        print(f"{a.base} PPL: llama-perplexity {m.group(1) if m else '?'}, macprof {base['ppl']:.4f}")
        print(f"{'model':<22}{'figure':<12}{'llama-perplexity':>18}{'macprof':>14}{'rel. diff':>11}")
        for name in a.models.split(","):
            mine = ours(log, name)
            theirs = parse(run(a.llama_perplexity, Path(mine["path"]), ["-c", str(base["n_ctx"]), "--kl-divergence-base",
                                                                        str(kl_base), "--kl-divergence"]))
            for key in FIGURES:
                t, o = theirs[key], mine[key]
                rel = abs(o - t) / abs(t) if t and o is not None else float('nan')
                print(f"{name:<22}{key:<12}{t if t is not None else float('nan'):>18.6g}"
                      f"{o if o is not None else float('nan'):>14.6g}{rel:>10.2%}")


if __name__ == "__main__":
    main()
