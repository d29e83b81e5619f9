"""The community's formats of whole run logs (`macprof export`, docs/export.md): per format, the
module of its family, which builds the format's tables from the logs (``tables(logs) -> (tables,
missing figures)``) and writes each table (``WRITERS[fmt]``, a Table -> str as every exporter of
render/exporters.py). Names only: the command line reads them without importing a family."""

LOG_FORMATS: dict[str, str] = {
    **{f"llama-bench-{kind}": "macprof.render.llamabench" for kind in ("json", "jsonl", "csv", "sql", "md")},
    "mlx-md": "macprof.render.mlxbench",
    "apple-silicon-md": "macprof.render.thread",
}
