"""mlx-lm's BENCHMARKS.md table (mlx_lm/BENCHMARKS.md in ml-explore/mlx-lm) for macprof's MLX
models: per model (its precisions side by side, one row each), a ``<details>`` block with the
table ``Precision | Prompt (P) tok/sec | Generation (G) tok/sec | Memory GB | Repo`` and the lines
under it (the machine, the mlx and mlx-lm versions, the OS). Its MMLU Pro column is left out:
macprof does not run that evaluation.

The figures are mlx_lm.benchmark's, from the warm phase's raw stamps (mlx-lm's stream_generate
defines them; its benchmark prints the mean over its trials):
- Prompt: ``prompt_tps = prompt tokens / (time from the ids to the first token)``: macprof's
  P / (t_1 - t_tokenized) per request (mlx_lm.benchmark passes ids: no tokenization either);
- Generation: ``generation_tps = n / (t_n - t_1)``: n tokens over the time after the first, the
  first one counted (macprof's own decode divides n - 1);
- Memory GB: ``mx.get_peak_memory() / 1e9``, a running maximum mlx_lm.benchmark never resets: the
  largest MLX peak over the warm phase's requests, its warm-up included.
The lengths in the headers are the warm phase's (mlx-lm's table: 2048 and 128); its prompts are
text, where mlx_lm.benchmark draws random ids (which ids does not change the work done).
"""

from __future__ import annotations

import math

from macprof.model.log import ModelResult, RunLog
from macprof.render.exporters import Column, Table, md_escape


def precision(label: str | None) -> str:
    """mlx-lm's precision names: q4, q8 (group size 64, its default; the log does not keep another
    group size), bf16, fp16, fp32."""
    if label and label.endswith("bit") and label[:-3].isdigit():
        return f"q{label[:-3]}"
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(label or "", label or "?")


def figures(m: ModelResult) -> tuple[dict | None, list[str]]:
    """One model's row figures, or None and why, one line per figure it cannot give."""
    name, warm = m.identity.name, m.phases.warm
    if warm is None:
        return None, [f"{name}: no warm phase: no Prompt, Generation or Memory figure"]
    measured = [r for r in warm.requests if r.kind == "measured"]
    failed = [r for r in measured if r.status != "ok"]
    if not measured or failed:
        return None, [f"{name}: warm phase: {len(failed)} of {len(measured)} measured requests failed: no row"]
    prompt = [r.prefill_tok_s for r in measured]
    gen = [r.n_tokens * 1e9 / (r.token_times[-1] - r.token_times[0]) if len(r.token_times) >= 2
           and r.token_times[-1] > r.token_times[0] else None for r in measured]
    peaks = [(r.engine_memory or {}).get("mlx_peak_bytes") for r in warm.requests]
    lines = []
    if None in prompt or m.settings.prompt_tokens != measured[0].prompt_tokens:
        lines.append(f"{name}: Prompt: a warm request has no prefill rate: no Prompt figure")
    if None in gen:
        lines.append(f"{name}: Generation: a warm request generated fewer than 2 tokens: no Generation figure")
    if None in peaks:
        lines.append(f"{name}: Memory GB: MLX's peak memory was not recorded for every warm request")
    return {"precision": precision(m.identity.quant),
            "prompt": None if None in prompt else math.fsum(p for p in prompt if p) / len(prompt),
            "generation": None if None in gen else math.fsum(g for g in gen if g) / len(gen),
            "memory_gb": None if None in peaks else max(p for p in peaks if p is not None) / 1e9,
            "repo": (m.identity.source.ref if m.identity.source else None) or m.identity.name}, lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def tables(logs: list[tuple[str, RunLog]]) -> tuple[list[Table], list[str]]:
    out: list[Table] = []
    missing: list[str] = []
    for source, log in logs:
        groups: dict[tuple, list[dict]] = {}
        for m in log.models:
            if m.identity.engine != "mlx":
                missing.append(f"{source}: {m.identity.name}: not an MLX model: mlx-lm's table lists MLX precisions "
                               f"(llama-bench-md and apple-silicon-md list GGUF ones)")
                continue
            found, lines = figures(m)
            missing += [f"{source}: {line}" for line in lines]
            if found is not None:
                key = (m.identity.architecture, m.identity.n_params, m.settings.prompt_tokens, m.settings.gen_tokens)
                groups.setdefault(key, []).append({**found, "_name": m.identity.name})
        for (arch, params, p, g), rows in groups.items():
            out.append(Table(_title(arch, params, rows), (
                Column("Precision", lambda r: r["precision"]),
                Column(f"Prompt ({p}) tok/sec", lambda r: _cell(r["prompt"])),
                Column(f"Generation ({g}) tok/sec", lambda r: _cell(r["generation"])),
                Column("Memory GB", lambda r: _cell(r["memory_gb"])),
                Column("Repo", lambda r: r["repo"])), tuple(rows),
                ("precision", "prompt", "generation", "memory_gb", "repo"), meta={"lines": _machine_lines(log)}))
    return out, missing


def _title(arch: str | None, params: int | None, rows: list[dict]) -> str:
    """The models' shared name (their names up to where they part), else the architecture and size."""
    names = [r["_name"] for r in rows]
    common = names[0]
    for n in names[1:]:
        while not n.startswith(common):
            common = common[:-1]
    common = common.rstrip("-_ .")
    if len(names) == 1 or len(common) >= 3:
        return common if len(names) > 1 else names[0]
    return " ".join(x for x in (arch, f"{params / 1e9:.1f}B" if params else None) if x) or "MLX models"


def _machine_lines(log: RunLog) -> list[str]:
    """The lines under mlx-lm's tables: the machine, mlx, mlx-lm, the OS."""
    machine, sw = log.machine, log.software or {}
    memory = f"{round(machine.memory_bytes / 2 ** 30)}GB " if machine and machine.memory_bytes else ""
    what = (machine.chip or machine.cpu_model or "unknown machine") if machine else "unknown machine"
    system = ("macOS" if machine and machine.os == "Darwin" else machine.os if machine else None) or "unknown OS"
    return [f"Performance benchmark on {memory}{what}", f"mlx {sw.get('mlx') or 'unknown'}",
            f"mlx-lm {sw.get('mlx_lm') or 'unknown'}", f"{system} {machine.os_version if machine else ''}".strip()]


def to_md(table: Table) -> str:
    """BENCHMARKS.md's block: <details>, the summary, the table (" | " between cells, its rule of
    dashes), the machine lines, </details>."""
    headers, cells = table.texts(md_escape)
    rule = " | ".join("-" * max(3, len(h)) for h in headers)
    lines = ["<details>", "", f" <summary> {md_escape(table.title)} </summary>", "", " | ".join(headers), rule]
    lines += [" | ".join(row) for row in cells]
    lines += [""] + [f"- {md_escape(line)}" for line in table.meta.get("lines", ())] + ["", "</details>"]
    return "\n".join(lines)


WRITERS = {"mlx-md": to_md}


def join(texts: list[str]) -> str:
    return "\n\n".join(texts)
