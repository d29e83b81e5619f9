"""`macprof overhead --path speculative`: is macprof's speculative loop slower than the engine's own?

One process, one loaded target and draft, the same prompt, k and token count, greedy, EOS
ignored, alternating A/B then B/A:
- A: macprof's loop (run/phases/speculative.py ``speculative_tokens``: the draft's propose or
  the n-gram lookup, the target's verify, both caches rewound), as `macprof run` measures it;
- B: the engine's own speculative decoding (capability "native_draft": mlx-lm's
  ``stream_generate(draft_model=..., num_draft_tokens=k)``, llama-cpp-python's
  ``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=k))``).
Each request's decode rate is counted after its first burst (measure/speculative.py
``decode_rate``), its output checked against plain greedy decoding of the target. Reported:
the median of the paired ratios A / B with its bootstrap interval (noise on a shared machine
moves both sides of a pair together), each side's median, and what each side accepted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from macprof.engines.base import Engine, EngineSettings, in_process
from macprof.engines.capabilities import NATIVE_DRAFT, able, lacks
from macprof.errors import MacprofError
from macprof.measure.significance import median_interval
from macprof.measure.speculative import decode_rate, flag_rounds
from macprof.measure.stats import summarize

NGRAM = "ngram"
REPEATS = 4  # the n-gram prompt: a text repeated, so that prompt lookup finds what comes next


def _load(engine_name: str, path: Path, n_ctx: int, threads: int | None) -> Engine:
    from macprof import engines

    engine = in_process(engines.create(engine_name), f"overhead --path speculative: engine {engine_name} is a server: "
                                                     f"its loop and the engine's own are measured in this process")
    engine.load_model(path, EngineSettings(n_ctx=n_ctx, threads=threads))
    engine.load_tokenizer()
    engine.reset()
    return engine


def _stamped(tokens) -> tuple[list[int], list[int]]:
    out, times = [], []
    for t in tokens:
        times.append(time.perf_counter_ns())
        out.append(t)
    return out, times


def measure(engine_name: str, path: Path, draft: str, draft_engine: str | None, draft_path: Path | None, k: int,
            n: int, depth: int, pairs: int, threads: int | None, ngram: int = 2,
            progress: Callable[[str], None] = lambda s: None) -> dict:
    """``draft`` is "ngram" or the draft's name (``draft_engine`` / ``draft_path`` then load it)."""
    from macprof.run.phases.speculative import Drafter, ModelDraft, NgramDraft, speculative_tokens, tokenizer_mismatch
    from macprof.run.prompts import PromptBuilder

    n_ctx = depth + n + k + 64
    target = _load(engine_name, path, n_ctx, threads)
    d_engine: Engine | None = None
    try:
        native = able(target, NATIVE_DRAFT)
        why = lacks(target, "verify") or lacks(target, "cache_cut")
        if why or isinstance(native, str):
            raise MacprofError(f"overhead --path speculative: {path.name}: {why or native}")
        drafter: Drafter
        if draft == NGRAM:
            drafter = NgramDraft(ngram)
        else:
            if not draft_engine or not draft_path:
                raise MacprofError("overhead --path speculative: the draft has no engine and path")
            d_engine = _load(draft_engine, draft_path, n_ctx, threads)
            mismatch = tokenizer_mismatch(target, d_engine, path.name, draft)
            if mismatch:
                raise MacprofError(f"overhead: {mismatch}")
            drafter = ModelDraft(d_engine)
        refused = native.native_refusal(d_engine)
        if refused:
            raise MacprofError(f"overhead --path speculative: {path.name} with draft {draft}: {refused}")
        native.open_native(d_engine, ngram)
        builder = PromptBuilder(target, seed=1)
        if draft == NGRAM:  # prompt lookup needs a prompt that repeats itself
            text = builder.prompt("overhead", max(8, depth // REPEATS)).text
            ids = target.tokenize(" ".join([text] * REPEATS))
        else:
            ids = list(builder.prompt("overhead", depth).ids)
        target.reset()
        plain = list(target.generate(ids, n))

        def ours() -> dict:
            target.reset()
            drafter.reset()
            rounds: list = []
            out, times = _stamped(speculative_tokens(target, drafter, ids, n, k, rounds))
            return {"rate": decode_rate(times), "identical": out == plain, "drafted": sum(r.drafted for r in rounds),
                    "accepted": sum(r.accepted for r in rounds), "rounds": len(rounds)}

        def own() -> dict:
            out, times = _stamped(native.native_generate(ids, n, k))
            told = native.native_report()
            accepted = told.accepted if told.accepted is not None else flag_rounds(told.from_draft or ())
            return {"rate": decode_rate(times, told.from_draft), "identical": out == plain,
                    "drafted": sum(told.drafted) if told.drafted is not None else None,
                    "accepted": sum(accepted), "rounds": len(accepted), "impl": told.impl, "unknown": told.unknown}

        ours()  # warm-up both paths
        own()
        a_runs, b_runs, ratios = [], [], []
        for i in range(pairs):
            if i % 2 == 0:
                a, b = ours(), own()
            else:
                b, a = own(), ours()
            if not a["rate"] or not b["rate"]:
                raise MacprofError("overhead --path speculative: a side measured no decode rate (fewer than two "
                                   "emissions: raise --gen-tokens)")
            a_runs.append(a)
            b_runs.append(b)
            ratios.append(a["rate"] / b["rate"])
            progress(f"{path.name}: pair {i + 1}/{pairs}: macprof loop {a['rate']:.1f} tok/s, "
                     f"{engine_name} own {b['rate']:.1f} tok/s, ratio {ratios[-1]:.3f}")
        low, high = median_interval(ratios)
        return {"path": "speculative", "engine": engine_name, "model": path.name, "draft": draft, "k": k,
                "reference": b_runs[0]["impl"], "gen_tokens": n, "depth": len(ids), "pairs": pairs,
                "threads": getattr(target, "threads", None) or None,
                "macprof_tok_s": [r["rate"] for r in a_runs], "reference_tok_s": [r["rate"] for r in b_runs],
                "ratios": ratios, "median_ratio": summarize(ratios)["median"], "ratio_ci95": [low, high],
                "macprof_median": summarize([r["rate"] for r in a_runs])["median"],
                "reference_median": summarize([r["rate"] for r in b_runs])["median"],
                "macprof": _side(a_runs), "native": {**_side(b_runs), "unknown": b_runs[0]["unknown"]}}
    finally:
        if d_engine is not None:
            d_engine.close()
        target.close()


def _side(runs: list[dict]) -> dict:
    """What one side drafted and accepted over its measured requests, and whether every output
    was the plain one."""
    drafted = [r["drafted"] for r in runs]
    accepted, rounds = sum(r["accepted"] for r in runs), sum(r["rounds"] for r in runs)
    known = all(d is not None for d in drafted)
    total = sum(d for d in drafted if d is not None)
    return {"identical": sum(1 for r in runs if r["identical"]), "requests": len(runs),
            "drafted": total if known else None, "accepted": accepted, "rounds": rounds,
            "acceptance": accepted / total if known and total else None}


def speculative_overhead(model, draft: str | None, k: int, ngram: int, n: int, depth: int, pairs: int,
                         threads: int | None, progress: Callable[[str], None] = lambda s: None) -> dict:
    """`macprof overhead --path speculative` for one selected model (a config.ModelSpec): the
    draft resolved as `macprof run --draft` resolves it (run/phases/speculative.py draft_spec)."""
    from dataclasses import replace

    from macprof.run.phases.speculative import draft_spec

    if not draft:
        raise MacprofError("overhead --path speculative: no draft given (--draft MODEL or --draft ngram)")
    if k < 1 or pairs < 1 or n < 2:
        raise MacprofError("overhead --path speculative: --draft-tokens and --pairs must be at least 1, --gen-tokens 2")
    spec = draft_spec(replace(model, settings=replace(model.settings, draft=draft, ngram=ngram)))
    if spec.kind == NGRAM:
        return measure(model.engine, model.path, NGRAM, None, None, k, n, depth, pairs, threads, ngram, progress)
    return measure(model.engine, model.path, draft, spec.engine, Path(spec.path or ""), k, n, depth, pairs, threads,
                   ngram, progress)


def notes(results: list[dict]) -> list[str]:
    """A line per speculative result: what each side accepted and whether its outputs were plain greedy's."""
    out = []
    for r in results:
        if r.get("path") != "speculative":
            continue
        sides = []
        for name, side in (("macprof", r["macprof"]), ("native", r["native"])):
            alpha = "α unknown" if side["acceptance"] is None else f"α {side['acceptance']:.3f}"
            tpr = (r["gen_tokens"] * side["requests"]) / side["rounds"] if side["rounds"] else None
            sides.append(f"{name}: {alpha}, {side['accepted']} accepted in {side['rounds']} rounds"
                         f"{f' (~{tpr:.2f} tokens/round)' if tpr else ''}, identical {side['identical']}/{side['requests']}")
        out.append(f"{r['model']} draft {r['draft']} k={r['k']}: " + "; ".join(sides))
        if r["native"].get("unknown"):
            out.append(f"  native: {r['native']['unknown']}")
    return out
