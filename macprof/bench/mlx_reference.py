"""mlx_lm's own generation loop in a fresh process, for `macprof overhead --path run` on MLX:
``python -m macprof.bench.mlx_reference MODEL_DIR GEN DEPTH REPS`` prints one JSON line with the
median decode tok/s over REPS runs (after one warm-up), on this project's definition."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from mlx_lm import load

    from macprof.bench.loop import mlx_reference
    from macprof.measure.stats import summarize

    path, n, depth, reps = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    # typed as a 2- or 3-tuple (the config too with return_config=True, not asked for here)
    model, tokenizer = load(str(path))[:2]
    ids = [int(t) for t in (tokenizer.encode(" hello world" * depth)[:depth] or [0])]
    mlx_reference(model, tokenizer, ids, n)  # warm-up
    rates = [mlx_reference(model, tokenizer, ids, n) for _ in range(reps)]
    print(json.dumps({"median_tok_s": summarize(rates)["median"], "rates": rates}))


if __name__ == "__main__":
    main(sys.argv[1:])
