"""`macprof overhead --path loop`: does macprof's own decode loop slow what it measures?

Side by side, in one process and on one loaded model, alternating A/B then B/A:
- A: macprof's own engine loop, timestamped exactly as `macprof run` does;
- B: the engine's reference loop:
  - llama.cpp: llama-bench's `tg` loop (one `llama_decode` of one token per step, no
    sampling at all) at the same KV depth; or, with `--llama-bench PATH`, llama-bench itself
    (`-p 0 -n N -d DEPTH`) run as a subprocess between our trials;
  - MLX: `mlx_lm.stream_generate` as `mlx_lm.benchmark` runs it (EOS ids emptied), its
    generation_tps n / (t_n - t_1) put on this project's definition (n - 1) / (t_n - t_1).
Reported: the median of the paired ratios A / B (noise on a shared machine moves both sides
of a pair together), and each side's median.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from macprof.engines.base import EngineSettings
from macprof.measure.significance import median_interval
from macprof.measure.stats import summarize


def _ours(engine, ids: list[int], n: int) -> float:
    engine.reset()
    times = []
    for _ in engine.generate(ids, n):
        times.append(time.perf_counter_ns())
    return (n - 1) * 1e9 / (times[-1] - times[0])


def _llama_tg(engine, ids: list[int], n: int) -> float:
    """llama-bench's tg: prefill to depth, then n decodes of one (random) token, no sampling,
    each followed by llama_synchronize as llama-bench's test_gen does: a Metal (or any GPU)
    decode returns before the device has finished, so without it the loop times the queueing.
    (macprof's own loop needs no call of its own: llama_get_logits_ith synchronizes first.)"""
    import llama_cpp as lc

    engine.reset()
    engine._decode(ids)
    rng = random.Random(0)
    one = (lc.llama_token * 1)()
    ctx, decode, get_one, sync = engine.ctx, lc.llama_decode, lc.llama_batch_get_one, lc.llama_synchronize
    sync(ctx)  # the prefill is done before the first token's decode starts
    one[0] = rng.randrange(engine.vocab_size)
    decode(ctx, get_one(one, 1))  # the first token: t_1 in our definition
    sync(ctx)
    t1 = time.perf_counter_ns()
    for _ in range(n - 1):
        one[0] = rng.randrange(engine.vocab_size)
        decode(ctx, get_one(one, 1))
        sync(ctx)
    return (n - 1) * 1e9 / (time.perf_counter_ns() - t1)


def bench_model(model: Path) -> str:
    """The model as llama-bench's -m is given it: absolute (a path that starts with "-" is no
    option), and without a comma, since llama-bench reads -m as a comma-separated list."""
    from macprof.errors import MacprofError

    path = str(Path(model).absolute())
    if "," in path:
        raise MacprofError(f"overhead: {path}: llama-bench reads -m as a comma-separated list of models, and this "
                           f"path has a comma; link the model under a name without one")
    return path


def _llama_bench(binary: Path, model: Path, n: int, depth: int, threads: int) -> float:
    out = subprocess.run([str(binary), "-m", bench_model(model), "-p", "0", "-n", str(n), "-d", str(depth),
                          "-t", str(threads), "-r", "1", "-o", "json"], capture_output=True, text=True, check=True)
    (row,) = json.loads(out.stdout)
    # llama-bench's tg rate is n / (time of n decodes): n intervals, the same rhythm as ours
    return float(row["avg_ts"])


def mlx_reference(model, tokenizer, ids: list[int], n: int) -> float:
    from mlx_lm import stream_generate

    tokenizer._eos_token_ids = set()  # as mlx_lm.benchmark: no early stop
    response = None
    for response in stream_generate(model, tokenizer, ids, max_tokens=n):
        pass
    return response.generation_tps * (n - 1) / n  # type: ignore[union-attr]  # n >= 2 responses; mlx-lm counts n tokens over n - 1 intervals


def measure(engine_name: str, path: Path, n: int, depth: int, pairs: int, threads: int | None,
            llama_bench: Path | None = None, progress=lambda s: None) -> dict:
    from macprof import engines
    from macprof.errors import MacprofError
    from macprof.run.prompts import PromptBuilder

    if engine_name not in ("llama.cpp", "mlx"):  # the fake engine has no loop of its own to compare with
        raise MacprofError(f"{path}: overhead compares macprof's decode loop with the engine's own; "
                           f"engine {engine_name!r} has none")
    engine: Any = engines.create(engine_name)  # the reference loops reach into the adapter (ctx, threads, model)
    engine.load_model(path, EngineSettings(n_ctx=depth + n + 16, threads=threads))
    engine.load_tokenizer()
    ids = list(PromptBuilder(engine, seed=1).prompt("overhead", depth).ids)
    if engine_name == "llama.cpp":
        if llama_bench:
            reference = lambda: _llama_bench(llama_bench, path, n, depth, engine.threads)  # noqa: E731
            ref_name = f"llama-bench tg{n} @ d{depth}"
        else:
            reference = lambda: _llama_tg(engine, ids, n)  # noqa: E731
            ref_name = f"bare llama_decode loop (llama-bench tg{n} @ d{depth} in-process)"
    else:
        reference = lambda: mlx_reference(engine.model, engine.tokenizer, ids, n)  # noqa: E731
        ref_name = "mlx_lm.stream_generate (mlx_lm.benchmark), as (n-1)/(t_n-t_1)"
    _ours(engine, ids, n)  # warm-up both paths
    reference()
    ours, refs, ratios = [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            a, b = _ours(engine, ids, n), reference()
        else:
            b, a = reference(), _ours(engine, ids, n)
        ours.append(a)
        refs.append(b)
        ratios.append(a / b)
        progress(f"{path.name}: pair {i + 1}/{pairs}: macprof {a:.1f} tok/s, reference {b:.1f} tok/s, ratio {a / b:.3f}")
    engine.close()
    low, high = median_interval(ratios)
    return {"path": "loop", "ratio_ci95": [low, high], "engine": engine_name, "model": path.name, "reference": ref_name, "gen_tokens": n, "depth": depth,
            "threads": getattr(engine, "threads", None) or None, "pairs": pairs,
            "macprof_tok_s": ours, "reference_tok_s": refs, "ratios": ratios,
            "median_ratio": summarize(ratios)["median"], "macprof_median": summarize(ours)["median"],
            "reference_median": summarize(refs)["median"]}
