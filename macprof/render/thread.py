"""The row llama.cpp's discussion "Performance of llama.cpp on Apple Silicon M-series" collects:
per machine, its chip, the chip's published memory bandwidth (GB/s) and GPU cores, then PP and
TG tok/s for each quantization: F16, Q8_0 and Q4_0 as the thread's columns, any other one of the
log's (Q4_K_M...) as columns after them. PP is llama-bench's pp512 and TG its tg128 (the thread
runs `llama-bench -p 512 -n 128 -ngl 99`), taken from the same rows `--format llama-bench-*`
writes (render/llamabench.py), so only exact tests: a log without them (a default run; run
`macprof run --preset llama-bench`) says so in one line per missing figure. The bandwidth is
macprof's chip table's (model/chips.py) for the log's chip and GPU core count.
"""

from __future__ import annotations

from typing import Callable

from macprof.model.chips import normalize_chip, spec_bandwidth
from macprof.model.log import RunLog
from macprof.render.exporters import Column, Table, md_escape
from macprof.render.llamabench import rows as bench_rows

THREAD_QUANTS = ("F16", "Q8_0", "Q4_0")  # the thread's columns, in its order
PP, TG = (512, 0), (0, 128)  # (n_prompt, n_gen) of its two tests, at depth 0


def _figure(rows: list[dict], model: str, test: tuple[int, int]) -> float | None:
    found = [r["avg_ts"] for r in rows if r["_model"] == model and (r["n_prompt"], r["n_gen"]) == test
             and r["n_depth"] == 0]
    return found[0] if found else None


def tables(logs: list[tuple[str, RunLog]]) -> tuple[list[Table], list[str]]:
    lines: list[str] = []
    found, _ = bench_rows(logs)
    out_rows: list[dict] = []
    quants: list[str] = list(THREAD_QUANTS)
    for source, log in logs:
        machine = log.machine
        chip = normalize_chip(machine.chip) if machine else None
        row: dict = {"chip": chip or (machine.cpu_model if machine else None) or "unknown",
                     "gpu_cores": machine.gpu_cores if machine else None}
        bw = spec_bandwidth(chip, row["gpu_cores"])
        row["bandwidth_gbs"] = bw["gbs"]
        if not chip:
            lines.append(f"{source}: not Apple Silicon ({row['chip']}): no published bandwidth or GPU cores")
        elif bw["gbs"] is None:
            lines.append(f"{source}: BW: {bw['reason']}")
        mine = [r for r in found if r["_log"] == source]
        seen: dict[str, str] = {}
        for m in log.models:
            if m.identity.engine != "llama.cpp":
                lines.append(f"{source}: {m.identity.name}: not a llama.cpp model: the thread's table is llama.cpp's "
                             f"(mlx-md lists MLX models)")
                continue
            quant = (m.identity.quant or "?").upper()
            if quant in seen:
                lines.append(f"{source}: {m.identity.name}: a second {quant} model ({seen[quant]} is the row's)")
                continue
            seen[quant] = m.identity.name
            if quant not in quants:
                quants.append(quant)
            for test, key in ((PP, "PP"), (TG, "TG")):
                value = _figure(mine, m.identity.name, test)
                row[f"{quant} {key}"] = value
                if value is None:
                    name = "pp512" if key == "PP" else "tg128"
                    lines.append(f"{source}: {m.identity.name} ({quant}) {key}: no {name} test in the log "
                                 f"(`macprof run --preset llama-bench` measures it)")
        lines += [f"{source}: {q} PP and TG: no {q} model in the log" for q in THREAD_QUANTS if q not in seen]
        if any(row.get(f"{q} {k}") is not None for q in seen for k in ("PP", "TG")):
            out_rows.append(row)  # a machine with no figure at all gives no row
    if not out_rows:
        return [], lines
    columns = [Column("Chip", lambda r: str(r["chip"])),
               Column("BW [GB/s]", lambda r: "" if r["bandwidth_gbs"] is None else f"{r['bandwidth_gbs']:g}"),
               Column("GPU Cores", lambda r: "" if r["gpu_cores"] is None else str(r["gpu_cores"]))]
    for q in quants:
        for key in ("PP", "TG"):
            columns.append(Column(f"{q} {key} [t/s]", _rate(f"{q} {key}")))
    fields = ("chip", "bandwidth_gbs", "gpu_cores", *(f"{q} {k}" for q in quants for k in ("PP", "TG")))
    return [Table("Apple Silicon", tuple(columns), tuple(out_rows), fields)], lines


def _rate(key: str) -> Callable[[dict], str]:
    return lambda r: "" if r.get(key) is None else f"{r[key]:.2f}"


def to_md(table: Table) -> str:
    """The thread's markdown row layout: "| a | b |", its rule, one row per machine; an empty cell
    where a figure is missing (as the thread leaves one), the reason said on stderr."""
    headers, cells = table.texts(md_escape)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---:" if i else "---" for i in range(len(headers)))
             + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


WRITERS = {"apple-silicon-md": to_md}


def join(texts: list[str]) -> str:
    return "\n\n".join(texts)
