"""`macprof models`' table: its content; each format is an exporter's (macprof/render/exporters.py)."""

from __future__ import annotations

from macprof.render.exporters import Column, Table, cell, export
from macprof.render.text import clean, fmt_bytes, fmt_rate

FIELDS = ("ref", "name", "store", "engine", "quant", "n_params", "file_bytes", "weight_bytes_per_token",
          "ceiling_published_tok_s", "ceiling_measured_tok_s", "fits", "note", "path")


def fmt_params(n: int | None) -> str:
    if n is None:
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def _fits(r: dict) -> str:
    if r["fits"] is None:
        return "-"
    return ("yes" if r["fits"] else "no") + (f": {r['note']}" if r["note"] and r["file_bytes"] is not None else "")


def _ceiling(key: str):
    return lambda r: fmt_rate(r[key]) if r[key] is not None else ("-" if r["file_bytes"] is None else "n/a")


def models_table(result: dict) -> Table:
    bw = result["bandwidth"]
    published = f"{bw['published_gbs']:g} GB/s, {bw['published_source']}" if bw["published_gbs"] else \
        f"unknown ({bw['published_source']})"
    measured = f"{bw['measured_gbs']:.1f} GB/s, {bw['measured_source']}" if bw["measured_gbs"] else bw["measured_source"]
    unreadable = [f"{r['ref']}: {r['note']}" for r in result["rows"] if r["file_bytes"] is None]
    notes = (f"decode ceiling = bandwidth / weight bytes read per token, at an empty context; published bandwidth: "
             f"{published}; measured bandwidth: {measured}",
             f"fits: the model's files against the {fmt_bytes(result['available_bytes'])} of memory available now "
             f"(of {fmt_bytes(result['memory_bytes'])}); the KV cache and the engine need more",
             *(["unreadable: " + "; ".join(unreadable)] if unreadable else []))
    columns = (Column("reference", cell("ref")), Column("engine", cell("engine")),
               Column("quant", cell("quant", lambda v: v or "-")), Column("params", cell("n_params", fmt_params)),
               Column("size", cell("file_bytes", fmt_bytes)),
               Column("ceiling tok/s (published)", _ceiling("ceiling_published_tok_s")),
               Column("ceiling tok/s (measured)", _ceiling("ceiling_measured_tok_s")), Column("fits", _fits))
    meta = {"bandwidth": bw, "available_bytes": result["available_bytes"], "memory_bytes": result["memory_bytes"],
            "searched": result["searched"]}
    return Table("models", columns, tuple(result["rows"]), FIELDS, notes, meta)


def render_models(result: dict, fmt: str) -> str:
    if not result["rows"] and fmt in ("table", "markdown"):
        return clean("no models found (searched: " + "; ".join(result["searched"]) + ")")
    return export(models_table(result), fmt)
