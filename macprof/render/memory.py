"""The headline memory column, shared by the summary and `compare`: named after the figure it
shows ("peak footprint" on macOS, "peak RSS" elsewhere; macprof/analyse/headline.py says why),
and where rows of both kinds share a table, each cell says which it is."""

from __future__ import annotations

from macprof.render.exporters import Column, Row
from macprof.render.text import fmt_bytes

# what JSON and CSV carry beside peak_rss_bytes: the headline figure, which one it is, the footprint,
# the mapped weights' resident bytes added to it, how the engine held its weights and whether the
# headline counts them (analyse/headline.py)
MEMORY_FIELDS = ("peak_memory_bytes", "memory_figure", "peak_footprint_bytes", "mapped_weights_bytes", "weights_held",
                 "memory_weights")


def memory_column(rows: tuple[Row, ...] | list[Row]) -> Column:
    kinds = {r.get("memory_figure") for r in rows} - {None}
    if len(kinds) <= 1:
        kind = next(iter(kinds), "RSS")
        return Column(f"peak {kind}", lambda r: fmt_bytes(r.get("peak_memory_bytes")))

    def show(r: Row) -> str:
        kind = r.get("memory_figure")
        return fmt_bytes(r.get("peak_memory_bytes")) + (f" ({kind})" if kind else "")
    return Column("peak memory", show)
