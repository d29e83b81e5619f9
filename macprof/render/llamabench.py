"""llama-bench's output formats (json, jsonl, csv, sql, md) for macprof's logs: one row per test
(analyse/llamabench.py says which measurements are tests), with llama-bench's field names, order
and types (test::get_fields, test::get_field_type) and each printer's own layout and escaping, as
tools/llama-bench/llama-bench.cpp in the llama.cpp that llama-cpp-python vendors writes them, so
that scripts/compare-llama-bench.py reads macprof's rows beside llama-bench's own.

Where a field comes from, for each engine, is docs/export.md's table; a field macprof does not
know takes what llama-bench writes by default (its cmd_params_defaults), or is said there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from macprof.analyse.llamabench import BenchTest, bench_tests
from macprof.model.log import ModelResult, RunLog
from macprof.render.exporters import Column, Table, csv_text, md_escape, one_line

# test::get_fields(), in order
FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type", "model_size",
    "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll", "type_k", "type_v",
    "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings", "no_op_offload", "no_host", "repack",
    "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
    "stddev_ts")
# test::get_field_type(): every other field is STRING
_INT = {"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params", "n_gpu_layers",
        "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload", "n_cpu_moe", "fit_target",
        "fit_min_ctx", "flash_attn"}
_BOOL = {"no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"}
_FLOAT = {"avg_ts", "stddev_ts"}
TYPES = {f: "INT" if f in _INT else "BOOL" if f in _BOOL else "FLOAT" if f in _FLOAT else "STRING" for f in FIELDS}

# llama-bench's defaults (cmd_params_defaults, llama.cpp's context and model defaults) for the
# fields macprof leaves as llama.cpp has them: macprof attaches no threadpool of its own, so
# llama.cpp's default one runs (mask 0x0, not strict, poll 50), as llama-bench's own defaults.
DEFAULTS: dict[str, Any] = {
    "build_number": 0, "cpu_mask": "0x0", "cpu_strict": False, "poll": 50, "n_batch": 2048, "n_ubatch": 512,
    "n_gpu_layers": -1, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
    "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
    "load_mode": "auto", "lazy_mode": "auto", "embeddings": False, "no_op_offload": 0, "no_host": False,
    "repack": True, "fit_target": 0, "fit_min_ctx": 0, "type_k": "f16", "type_v": "f16"}
# ggml's type names for MLX's K/V dtypes (a quantized MLX cache keeps MLX's own name: q8, q4)
_MLX_KV = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _resolved(m: ModelResult, name: str, asked: bool = False) -> Any:
    r = (m.engine_settings or {}).get(name)
    return None if r is None else (r.asked if asked else r.value)


def _llama_cpp_fields(m: ModelResult) -> dict:
    v = m.engine_versions or {}
    load = v.get("load") or {}
    devices = [d for d in load.get("devices") or () if isinstance(d, dict)]
    regs = v.get("backends")
    if regs is not None:  # test::get_backend: every registry but the CPU's (RPC once, where it has devices)
        backends = ",".join([r["name"] for r in regs if r["name"] != "CPU" and not r["name"].startswith("RPC")]
                            + (["RPC"] if any(r["name"].startswith("RPC") and r["devices"] > 0 for r in regs)
                               else [])) or "CPU"
    else:  # a log from before the registries were recorded: only a CPU device means only the CPU's
        backends = "CPU" if devices and all(d.get("type") == 0 for d in devices) else "unknown"
    fa = _resolved(m, "flash_attn")
    return {
        # ggml_commit(): the vendored llama.cpp's short hash ("-dirty": its tree had changes when built)
        "build_commit": (v.get("ggml_commit") or "unknown").removesuffix("-dirty"),
        "cpu_info": ", ".join(d["description"] for d in devices if d.get("type") in (0, 3)),
        "gpu_info": ", ".join(d["description"] for d in devices if d.get("type") in (1, 2)),
        "backends": backends,
        # llama_model_desc, llama_model_size, llama_model_n_params; for a log from before they were
        # recorded, the GGUF header's architecture and file type, tensor bytes and parameters
        "model_type": v.get("model_desc") or _described(m),
        "model_size": v.get("model_size") or (m.shape or {}).get("tensor_bytes"),
        "model_n_params": v.get("model_n_params") or m.identity.n_params,
        "n_batch": _resolved(m, "n_batch", asked=True), "n_ubatch": _resolved(m, "n_ubatch", asked=True),
        "n_threads": _resolved(m, "n_threads") or v.get("threads"),
        "type_k": _resolved(m, "type_k") or m.settings.kv_type, "type_v": _resolved(m, "type_v") or m.settings.kv_type,
        "n_gpu_layers": _resolved(m, "n_gpu_layers", asked=True) if m.engine_settings else load.get("n_gpu_layers"),
        "split_mode": _resolved(m, "split_mode"), "main_gpu": _resolved(m, "main_gpu"),
        "no_kv_offload": _resolved(m, "no_kv_offload"), "embeddings": _resolved(m, "embeddings"),
        "no_op_offload": None if _resolved(m, "no_op_offload") is None else int(_resolved(m, "no_op_offload")),
        "no_host": _resolved(m, "no_host"), "repack": _resolved(m, "repack"),
        # llama-bench writes what it was asked (-1: auto); macprof what llama.cpp resolved
        "flash_attn": {"enabled": 1, "disabled": 0}.get(fa or "", -1),
        "load_mode": _resolved(m, "mmap", asked=True) or load.get("load_mode"),
    }


def _described(m: ModelResult) -> str:
    """The architecture and the quantization (as the model's config or header declares it)."""
    quant = m.identity.quant
    return " ".join(x for x in (m.identity.architecture, quant) if x)


def _mlx_fields(m: ModelResult, log: RunLog) -> dict:
    v, machine = m.engine_versions or {}, log.machine
    gpu = (_resolved(m, "device") or ("gpu" if "gpu" in str(v.get("device")) else "cpu")) == "gpu"
    kv = _resolved(m, "type_k")
    step = _resolved(m, "prefill_step_size")
    return {
        "build_commit": v.get("mlx_lm") or (log.software or {}).get("mlx_lm") or "unknown",
        "cpu_info": machine.cpu_model if machine else "",
        "gpu_info": (machine.chip or "") if machine and gpu else "",
        "backends": "MLX",
        "model_type": _described(m),
        "model_size": (m.shape or {}).get("tensor_bytes"),
        "model_n_params": m.identity.n_params,
        # mlx-lm's prompt chunk (prefill_step_size) stands for llama.cpp's batch sizes
        "n_batch": step, "n_ubatch": step,
        "n_threads": 0,  # mlx-lm takes no thread count
        "type_k": _MLX_KV.get(kv, kv), "type_v": _MLX_KV.get(kv, kv),
        "n_gpu_layers": -1 if gpu else 0,
        "flash_attn": {"enabled": 1, "disabled": 0}.get(_resolved(m, "flash_attn") or "", -1),
    }


def _fake_fields(m: ModelResult, log: RunLog) -> dict:
    """The fast tier's fake engine: its own backend and macprof's version as the build."""
    return {"build_commit": (m.engine_versions or {}).get("fake") or "unknown", "backends": "fake",
            "cpu_info": log.machine.cpu_model if log.machine else "", "gpu_info": "",
            "model_type": _described(m), "model_size": (m.shape or {}).get("tensor_bytes"),
            "model_n_params": m.identity.n_params,
            "n_threads": _resolved(m, "n_threads"), "n_gpu_layers": 0}


_ENGINE_FIELDS = {"llama.cpp": lambda m, log: _llama_cpp_fields(m), "mlx": _mlx_fields, "fake": _fake_fields}


def _test_time(log: RunLog) -> str:
    """The run's start as llama-bench's RFC 3339 test_time (%FT%TZ, UTC)."""
    try:
        return datetime.fromisoformat(log.started_utc or "").strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return log.started_utc or ""


def row(log: RunLog, m: ModelResult, t: BenchTest) -> dict:
    """One test of one model as llama-bench's row: every field, in its types, and the samples."""
    engine = _ENGINE_FIELDS[m.identity.engine](m, log)
    given = {k: v for k, v in engine.items() if v is not None}
    f = t.figures
    out = {**DEFAULTS, **given,
           "model_filename": m.identity.path or (m.identity.files[0].name if m.identity.files else m.identity.name),
           "n_prompt": t.n_prompt, "n_gen": t.n_gen, "n_depth": t.n_depth, "test_time": _test_time(log),
           "avg_ns": f.avg_ns, "stddev_ns": f.stddev_ns, "avg_ts": f.avg_ts, "stddev_ts": f.stddev_ts,
           "samples_ns": list(f.samples_ns), "samples_ts": list(f.samples_ts),
           # macprof's own, for its tables: not llama-bench fields, no printer writes them
           "_model": m.identity.name, "_source": t.source, "_engine": m.identity.engine,
           "_threads_default": m.settings.threads is None}
    out.setdefault("model_type", "")
    out.setdefault("model_size", 0)
    out.setdefault("model_n_params", 0)
    out.setdefault("n_threads", 0)
    return out


def rows(logs: list[tuple[str, RunLog]]) -> tuple[list[dict], list[str]]:
    """Every test of every model of the logs as a row, and the missing figures' lines."""
    out: list[dict] = []
    missing: list[str] = []
    for source, log in logs:
        for m in log.models:
            tests, lost = bench_tests(m)
            missing += [f"{source}: {line}" for line in lost]
            out += [{**row(log, m, t), "_log": source} for t in tests]
    return out, missing


def tables(logs: list[tuple[str, RunLog]]) -> tuple[list[Table], list[str]]:
    found, missing = rows(logs)
    if not found:
        return [], missing
    return [Table("llama-bench", _md_columns(found), tuple(found), FIELDS, types=TYPES,
                  meta={"builds": sorted({(r["build_commit"], r["build_number"]) for r in found})})], missing


# -- values as llama-bench's get_values() writes them -------------------------------------------
def text(field: str, value: Any) -> str:
    """A value as get_values() prints it: std::to_string of ints and bools (0/1), of floats
    ("%f"), the strings as they are."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if TYPES[field] == "FLOAT":
        return f"{float(value):f}"
    return str(value)


def _json_value(field: str, value: Any) -> str:
    """format_json_value: a STRING quoted and escaped (escape_json: quote, backslash, control
    characters as \\u00XX), a BOOL true/false, a number as printed."""
    kind = TYPES[field]
    if kind == "STRING":
        return '"' + "".join('\\"' if c == '"' else "\\\\" if c == "\\" else f"\\u{ord(c):04x}" if ord(c) <= 0x1F
                             else c for c in str(value)) + '"'
    if kind == "BOOL":
        return "true" if value else "false"
    return text(field, value)


def _ts(value: float) -> str:
    """A samples_ts entry as an ostream writes a double: 6 significant digits (%g)."""
    return f"{value:g}"


def to_json(table: Table) -> str:
    """json_printer: a JSON array, each test an object of every field, then samples_ns and samples_ts."""
    tests = []
    for r in table.rows:
        body = "".join(f'    "{f}": {_json_value(f, r[f])},\n' for f in table.fields)
        tests.append("  {\n" + body + f'    "samples_ns": [ {", ".join(map(str, r["samples_ns"]))} ],\n'
                     f'    "samples_ts": [ {", ".join(map(_ts, r["samples_ts"]))} ]\n  }}')
    return "[\n" + ",\n".join(tests) + "\n]"


def to_jsonl(table: Table) -> str:
    """jsonl_printer: one object per line (its spacing: ", " between fields, none before samples_ts)."""
    return "\n".join("{" + "".join(f'"{f}": {_json_value(f, r[f])}, ' for f in table.fields)
                     + f'"samples_ns": [ {", ".join(map(str, r["samples_ns"]))} ],'
                     + f'"samples_ts": [ {", ".join(map(_ts, r["samples_ts"]))} ]}}' for r in table.rows)


def to_csv(table: Table) -> str:
    """csv_printer: the field names, then every value in double quotes (a quote doubled). A
    string from a log is one line and no spreadsheet formula (exporters.csv_text), which a
    llama-bench value never is."""
    def cell(f: str, v: Any) -> str:
        value = csv_text(text(f, v)) if TYPES[f] == "STRING" else text(f, v)
        return '"' + value.replace('"', '""') + '"'

    lines = [",".join(table.fields)] + [",".join(cell(f, r[f]) for f in table.fields) for r in table.rows]
    return "\n".join(lines)


def to_sql(table: Table) -> str:
    """sql_printer: CREATE TABLE IF NOT EXISTS llama_bench with each field's SQL type (TEXT,
    INTEGER, REAL), then one INSERT per test with every value single-quoted. A quote inside a
    value is doubled (SQL's escape), where llama-bench's own output would be invalid SQL."""
    sql = {"STRING": "TEXT", "BOOL": "INTEGER", "INT": "INTEGER", "FLOAT": "REAL"}
    head = "CREATE TABLE IF NOT EXISTS llama_bench (\n" + ",\n".join(
        f"  {f} {sql[TYPES[f]]}" for f in table.fields) + "\n);\n"
    inserts = [f"INSERT INTO llama_bench ({', '.join(table.fields)}) VALUES ("
               + ", ".join("'" + one_line(text(f, r[f])).replace("'", "''") + "'" for f in table.fields) + ");"
               for r in table.rows]
    return head + "\n" + "\n".join(inserts)


# -- the markdown printer ------------------------------------------------------------------------
def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.2f} MiB" if n < 1024 ** 3 else f"{n / 1024 ** 3:.2f} GiB"


def _params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n < 1_000_000_000 else f"{n / 1e9:.2f} B"


def _test(r: dict) -> str:
    from macprof.measure.llamabench import bench_name

    return bench_name(r["n_prompt"], r["n_gen"], r["n_depth"])


# (field, display name, width: negative left-aligned), as markdown_printer's get_field_width and
# get_field_display_name give them
_MD = {"n_gpu_layers": ("ngl", 3), "n_threads": ("threads", 7), "n_batch": ("n_batch", 7),
       "n_ubatch": ("n_ubatch", 8), "type_k": ("type_k", 6), "type_v": ("type_v", 6), "flash_attn": ("fa", 3),
       "no_kv_offload": ("nkvo", 13), "split_mode": ("sm", 6), "main_gpu": ("main_gpu", 10)}


def _field(f: str) -> Callable[[dict], str]:
    return lambda r: text(f, r[f])


def _md_columns(found: list[dict]) -> tuple[Column, ...]:
    """markdown_printer's columns: model, size, params, backend; ngl where a backend is not the
    CPU; each setting llama-bench shows when it was not its default or took several values (here:
    when a row's value is not llama-bench's default, or the rows differ), threads always on a CPU
    backend or where asked; then test and t/s."""
    cols = [Column("model", lambda r: str(r["model_type"]), -30), Column("size", lambda r: _size(r["model_size"]), 10),
            Column("params", lambda r: _params(r["model_n_params"]), 10),
            Column("backend", lambda r: str(r["backends"]), -10)]
    cpu = any(any(b in r["backends"] for b in ("CPU", "BLAS", "ZenDNN")) for r in found)
    shown = [f for f in ("n_gpu_layers",) if not cpu]
    if cpu or any(not r["_threads_default"] for r in found) or len({r["n_threads"] for r in found}) > 1:
        shown.append("n_threads")
    shown += [f for f in ("n_batch", "n_ubatch", "type_k", "type_v", "main_gpu", "split_mode", "no_kv_offload",
                          "flash_attn")
              if len({r[f] for r in found}) > 1 or any(r[f] != DEFAULTS[f] for r in found)]
    cols += [Column(_MD[f][0], _field(f), _MD[f][1]) for f in shown]
    cols += [Column("test", _test, 15),
             Column("t/s", lambda r: f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}", 20)]
    return tuple(cols)


def _pad(value: str, width: int) -> str:
    return value.ljust(-width) if width < 0 else value.rjust(width)


def to_md(table: Table) -> str:
    """markdown_printer: " %*s |" cells (its widths and alignments), a separator of dashes ending
    in ":" for a right-aligned column, one row per test, then "build: COMMIT (NUMBER)" per build."""
    head = "|" + "".join(f" {_pad(c.name, c.width)} |" for c in table.columns)
    rule = "|" + "".join(f" {'-' * (abs(c.width) - 1)}{':' if c.width > 0 else '-'} |" for c in table.columns)
    body = ["|" + "".join(f" {_pad(md_escape(c.show(r)), c.width)} |" for c in table.columns) for r in table.rows]
    builds = [f"build: {md_escape(commit)} ({number})" for commit, number in table.meta.get("builds", ())]
    return "\n".join([head, rule, *body]) + "\n\n" + "\n".join(builds)


WRITERS = {"llama-bench-json": to_json, "llama-bench-jsonl": to_jsonl, "llama-bench-csv": to_csv,
           "llama-bench-sql": to_sql, "llama-bench-md": to_md}


def join(texts: list[str]) -> str:
    return "\n".join(texts)
