"""`macprof board`: the results database's rows as one self-contained HTML page, the
cross-machine table.

The rows are the database's ``board`` view (store/database.py). They are grouped here (pure): one
group per machine, model file, engine and version, phase or case, lengths and settings, and the
conditions a row is marked for, so a group's runs differ only in what each run measured. Each
figure of a group is the median over its runs, with its spread (n, min to max). The comparable
figure across machines is the efficiency, decode over that machine's own ceiling, published and
measured (docs/design.md, "Results that travel"); raw tok/s sits beside it, never alone.

The page carries everything inline (CSS, script, data; no network). The data is one JSON document
in a ``<script type="application/json">`` element: per group its key columns, its runs (the other
columns of each row, so the rows are there whole: key + run) and what its cells show, formatted
here with the same formats as every other report (render/text.py). The page's script only builds
the table from it, sorts and filters; it writes every string with textContent, never as HTML, and
the JSON's ``<``, ``>`` and ``&`` are escaped, so a model named ``</script>`` stays text.
"""

from __future__ import annotations

import html
import json
from importlib import resources

from macprof import __version__
from macprof.measure.stats import median
from macprof.phases import NAMES
from macprof.render.text import clean, clean_lines, fmt_bytes, fmt_pct, fmt_rate, fmt_s, fmt_x

# what makes two rows one group: everything but what a run measured and when
KEY_COLUMNS = ("machine_id", "chip", "gpu_cores", "cpu_model", "cores_physical", "memory_bytes", "os", "os_version",
               "model_id", "model_file", "model_sha256", "quant", "n_params", "engine", "engine_version", "phase",
               "case_id", "prompt_tokens", "gen_tokens", "depth_tokens", "batch", "kv_type", "threads")
# the figures a group gives as median and spread over its runs
FIGURES = ("decode_tok_s", "spec_efficiency", "measured_efficiency", "spec_ceiling_tok_s", "measured_ceiling_tok_s",
           "ttft_s", "prefill_tok_s", "aggregate_tok_s", "peak_memory_bytes", "decode_j_per_token", "accuracy",
           "kld_mean", "speedup")
# the resident model's figures first (what a page of results leads with), then the registry's order
PHASE_ORDER = ("warm", "prefix", *(n for n in NAMES if n not in ("warm", "prefix")))
THERMAL_OK = (None, "nominal")


def marks(row: dict) -> tuple[str, ...]:
    """What a row is marked for: measured on battery, in low power mode, under thermal pressure
    or throttling, in an interrupted run, from a log that does not verify, or without a result."""
    out = []
    if "battery" in (row.get("power_source"), row.get("run_power_source")):
        out.append("battery")
    if row.get("low_power_mode") or row.get("power_mode") == "low":
        out.append("low power mode")
    if row.get("thermal_pressure") not in THERMAL_OK:
        out.append(f"thermal pressure {row['thermal_pressure']}")
    state = row.get("thermal_state") if row.get("thermal_state") not in THERMAL_OK else row.get("run_thermal_state")
    if state not in THERMAL_OK:
        out.append(f"thermal state {state}")
    if row.get("throttled"):
        out.append("throttled")
    if row.get("verified") == 0:
        out.append("unverified")
    elif "verified" in row and row["verified"] is None:
        out.append("not verified")  # collected before verification
    if row.get("complete") == 0:
        out.append("incomplete run")
    if row.get("status") not in (None, "ok"):
        out.append(str(row["status"]))
    return tuple(out)


def spread(values: list) -> dict | None:
    """n, min, median and max of the known values; None where none is known."""
    known = [v for v in values if v is not None]
    return {"n": len(known), "min": min(known), "median": median(known), "max": max(known)} if known else None


def groups(rows: list[dict]) -> list[dict]:
    """The rows grouped (in the order of their first row), each group: ``key`` (KEY_COLUMNS),
    ``marks``, ``rows`` (the rows themselves) and ``spread`` of each figure."""
    found: dict[tuple, dict] = {}
    for row in rows:
        mark = marks(row)
        key = tuple(row.get(k) for k in KEY_COLUMNS) + (mark,)
        group = found.get(key)
        if group is None:
            group = found[key] = {"key": {k: row.get(k) for k in KEY_COLUMNS}, "marks": mark, "rows": []}
        group["rows"].append(row)
    out = list(found.values())
    for g in out:
        g["spread"] = {f: spread([r.get(f) for r in g["rows"]]) for f in FIGURES}
    return sorted(out, key=_default_order)


def _default_order(g: dict) -> tuple:
    """Phase by phase; within one, by efficiency against the published ceiling, then the measured
    one, best first (unknown last)."""
    def desc(fig: str) -> tuple:
        s = g["spread"][fig]
        return (s is None, -s["median"] if s else 0)
    phase = g["key"]["phase"]
    return (PHASE_ORDER.index(phase) if phase in PHASE_ORDER else len(PHASE_ORDER), *desc("spec_efficiency"),
            *desc("measured_efficiency"))


# -- what the page shows -----------------------------------------------------------------------
def _range(s: dict | None, runs: int, fmt) -> str:
    """The spread under a median: 'min–max', and how many runs knew it where not all did."""
    if s is None:
        return ""
    part = f"{fmt(s['min'])}–{fmt(s['max'])}" if s["n"] > 1 else ""
    if s["n"] < runs:
        part = f"{s['n']} of {runs} runs" + (f": {part}" if part else "")
    return part


def _figure(g: dict, fig: str, fmt) -> list:
    """[median, its spread, the median as a number, what a hover says]."""
    s, runs = g["spread"][fig], len(g["rows"])
    if s is None:
        return ["", "", None, ""]
    tip = f"median of {s['n']} run(s)" + (f"; min {fmt(s['min'])}, max {fmt(s['max'])}" if s["n"] > 1 else "")
    return [fmt(s["median"]), _range(s, runs, fmt), s["median"], tip]


def _efficiency(g: dict, side: str) -> list:
    """The share of the ceiling, and the ceiling it is a share of under it."""
    cell = _figure(g, f"{side}_efficiency", fmt_pct)
    ceiling = g["spread"][f"{side}_ceiling_tok_s"]
    if cell[0] and ceiling:
        cell[1] = "\n".join(x for x in (f"of {fmt_rate(ceiling['median'])} tok/s", cell[1]) if x)
        cell[3] += f"; the {'published' if side == 'spec' else 'measured'} ceiling {fmt_rate(ceiling['median'])} tok/s"
    return cell


def _fmt_j(x: float) -> str:
    return f"{x:.3g}"


def _fmt_kld(x: float) -> str:
    return f"{x:.4f}"


def _machine(k: dict) -> list:
    if k["chip"]:
        name = k["chip"] + (f", {k['gpu_cores']}-core GPU" if k["gpu_cores"] else "")
    else:
        name = (k["cpu_model"] or "unknown CPU") + (f", {k['cores_physical']} cores" if k["cores_physical"] else "")
    system = " ".join(str(x) for x in (k["os"], k["os_version"]) if x)
    sub = " · ".join(x for x in (fmt_bytes(k["memory_bytes"]) if k["memory_bytes"] else "", system) if x)
    tip = " · ".join(str(x) for x in (k["cpu_model"], k["cores_physical"] and f"{k['cores_physical']} CPU cores",
                                      k["memory_bytes"] and f"{k['memory_bytes']} bytes", system) if x)
    return [name, sub, name, tip]


def _test(k: dict) -> list:
    name = k["phase"] + (f" {k['case_id']}" if k["case_id"] else "")
    parts = []
    if k["prompt_tokens"] is not None and k["gen_tokens"] is not None:
        parts.append(f"{k['prompt_tokens']} → {k['gen_tokens']}")
    if k["depth_tokens"]:
        parts.append(f"depth {k['depth_tokens']}")
    if k["batch"] and k["batch"] > 1:
        parts.append(f"batch {k['batch']}")
    if k["kv_type"] and k["kv_type"] != "f16":
        parts.append(f"K/V {k['kv_type']}")
    if k["threads"]:
        parts.append(f"{k['threads']} threads")
    return [name, ", ".join(parts), name, "prompt → generated tokens, tokens cached before each request, "
                                          "sequences together, K/V cache type, threads"]


def _names(g: dict) -> list[str]:
    """The names the group's runs gave its model (one file may be named otherwise in each log)."""
    return list(dict.fromkeys(str(r["model_name"]) for r in g["rows"] if r.get("model_name"))) or \
        [g["key"]["model_file"] or "?"]


def _model(g: dict) -> list:
    k = g["key"]
    names = " / ".join(_names(g))
    tip = " · ".join(x for x in (k["model_file"] or "", k["model_sha256"] and f"sha256 {k['model_sha256']}") if x)
    return [names, f"{k['n_params'] / 1e6:.1f}M params" if k["n_params"] else "", names, tip]


# (id, title, what a hover says, numeric) in the table's order; cells() fills each
COLUMNS = (
    ("machine", "Machine", "chip and GPU cores (Apple Silicon), else the CPU; memory and OS", False),
    ("model", "Model", "as the runs named it; parameters, file and sha256", False),
    ("quant", "Quant", "quantization the model file declares", False),
    ("engine", "Engine", "engine and its version", False),
    ("test", "Test", "phase or case, prompt → generated tokens, cache depth, batch", False),
    ("runs", "Runs", "runs (logs) in this row", True),
    ("marks", "Conditions", "battery, low power mode, thermal pressure or state, throttling, unverified log, "
                            "interrupted run", False),
    ("decode_tok_s", "Decode tok/s", "median decode, (n − 1) / (t_n − t_1); shown beside the ceilings, never "
                                     "compared across machines alone", True),
    ("spec_efficiency", "% of published ceiling", "decode / the ceiling at the chip's published bandwidth: the "
                                                  "figure that compares across machines", True),
    ("measured_efficiency", "% of measured ceiling", "decode / the ceiling at the bandwidth measured on that "
                                                     "machine", True),
    ("ttft_s", "TTFT", "median time to first token (cold: from launch)", True),
    ("prefill_tok_s", "Prefill tok/s", "median computed prompt tokens / prefill time", True),
    ("aggregate_tok_s", "Aggregate tok/s", "a batch's decode, all sequences", True),
    ("peak_memory_bytes", "Peak memory", "the phase's peak (footprint+mapped on macOS, RSS elsewhere)", True),
    ("decode_j_per_token", "J/token", "net decode energy per token", True),
    ("accuracy", "Task accuracy", "tasks solved within the attempts allowed", True),
    ("kld_mean", "Mean KLD", "quality: KL divergence from the reference, nats per token", True),
    ("speedup", "Speed-up", "speculative decoding over plain", True),
)


def cells(g: dict) -> list[list]:
    """Each column's [text, the lines under it, sort value, what a hover says] for one group: its
    text from a log cleaned as every report cleans it (no escape sequence, control or bidi
    character; the page writes it as text whatever it holds)."""
    return [[clean(main), clean_lines(sub), value, clean(tip)] for main, sub, value, tip in _cells(g)]


def _cells(g: dict) -> list[list]:
    k = g["key"]
    return [_machine(k), _model(g), [k["quant"] or "", "", k["quant"], ""],
            [k["engine"], k["engine_version"] or "", f"{k['engine']} {k['engine_version'] or ''}", ""], _test(k),
            [str(len(g["rows"])), "", len(g["rows"]), ""], ["", "", " ".join(g["marks"]), ""],
            _figure(g, "decode_tok_s", fmt_rate), _efficiency(g, "spec"), _efficiency(g, "measured"),
            _figure(g, "ttft_s", fmt_s), _figure(g, "prefill_tok_s", fmt_rate),
            _figure(g, "aggregate_tok_s", fmt_rate), _figure(g, "peak_memory_bytes", fmt_bytes),
            _figure(g, "decode_j_per_token", _fmt_j), _figure(g, "accuracy", fmt_pct),
            _figure(g, "kld_mean", _fmt_kld), _figure(g, "speedup", fmt_x)]


def page_data(rows: list[dict], source: str) -> dict:
    """The JSON the page embeds: the columns, and per group its key, its runs (the rest of each
    row, in ``run_columns`` order), its marks, the filters' values and its cells."""
    run_columns = [c for c in (rows[0] if rows else {}) if c not in KEY_COLUMNS]
    out = []
    for g in groups(rows):
        k = g["key"]
        out.append({"key": [k[c] for c in KEY_COLUMNS], "runs": [[r[c] for c in run_columns] for r in g["rows"]],
                    "marks": list(g["marks"]),
                    "facets": {name: [clean(v) for v in values] for name, values in (
                        ("phase", [k["phase"]]), ("chip", [_machine(k)[0]]), ("model", _names(g)),
                        ("quant", [k["quant"] or "?"]), ("engine", [k["engine"]]))},
                    "cells": cells(g)})
    logs = {r["log_id"] for r in rows}
    return {"macprof": __version__, "source": source, "logs": len(logs), "rows": len(rows),
            "key_columns": list(KEY_COLUMNS), "run_columns": run_columns,
            "columns": [{"id": c, "title": t, "tip": tip, "numeric": num} for c, t, tip, num in COLUMNS],
            "groups": out}


def embedded_json(data: dict) -> str:
    """JSON that cannot end its <script> element or open another: <, > and & as \\u escapes
    (the same string to JSON.parse), and no NaN."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("macprof.render").joinpath("board_assets", name).read_text(encoding="utf-8")


def board_page(rows: list[dict], source: str) -> str:
    """The whole page; ``source`` says where the rows came from (a database, N logs)."""
    data = page_data(rows, source)
    title = f"macprof board: {data['logs']} run(s), {len(data['groups'])} row(s)"
    return "\n".join([
        "<!doctype html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # nothing from the network, ever: the page is its own
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>{html.escape(title)}</title>", f"<style>\n{_asset('board.css')}</style>", "</head>", "<body>",
        _asset("board.html").replace("{{source}}", html.escape(source)).replace("{{version}}", html.escape(__version__)),
        f'<script type="application/json" id="board-data">{embedded_json(data)}</script>',
        f"<script>\n{_asset('board.js')}</script>", "</body>", "</html>", ""])
