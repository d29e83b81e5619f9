"""Text helpers shared by every renderer: number formats, plain tables, terminal-safe strings."""

from __future__ import annotations

from macprof.model.bounds import INVALID, count_ok, share_ok
from macprof.model.phases import Ceiling
from macprof.sanitise import clean, clean_lines  # noqa: F401 - re-exported: every renderer's sanitisers


def fmt_s(x: float | None) -> str:
    """A duration; the unit follows its magnitude, so a negative one (a first request that was
    quicker than the warm median) reads -117.2 ms, not -117198 µs."""
    if x is None:
        return "-"
    sign, x = ("-", -x) if x < 0 else ("", x)
    if x < 1e-3:
        return f"{sign}{x * 1e6:.0f} µs"
    if x < 1:
        return f"{sign}{x * 1e3:.1f} ms"
    return f"{sign}{x:.2f} s"


def fmt_signed_s(x: float | None) -> str:
    """A difference of durations: always signed (+93.9 ms, -117.2 ms)."""
    return "-" if x is None else ("+" if x >= 0 else "") + fmt_s(x)


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def fmt_pct(x: float | None) -> str:
    """93%, 4.2%, 0.11%: two significant digits below 10%, so a tiny share never reads 0%."""
    if x is None:
        return "-"
    return f"{x:.0%}" if x >= 0.1 else f"{100 * x:.2g}%"


def fmt_share(x: float | None) -> str:
    """A proportion as fmt_pct; one no measurement gives (outside 0..1: a hand-edited log, a
    server's lie) is never shown as a figure: INVALID (`macprof verify` names it)."""
    return fmt_pct(x) if share_ok(x) else INVALID


def fmt_of(k: int | None, n: int | None) -> str:
    """'k/n' (identical outputs of those checked); INVALID where k is no count of at most n."""
    return f"{k}/{n}" if count_ok(k, n) and count_ok(n) else INVALID


def fmt_x(ratio: float | None) -> str:
    """A ratio as x1.24."""
    return "-" if ratio is None else f"x{ratio:.2f}"


def fmt_bytes(x: float | None) -> str:
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return "-"


def render_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def ceiling_text(roof: Ceiling | None) -> str:
    """'93% of 62.4 (spec) / 97% of 60.0 (measured)', with '-' where a ceiling is unknown."""
    if not roof or roof.reason:
        return "-"
    parts = []
    for which, r in (("spec", roof.spec), ("measured", roof.measured)):
        if not r or r.ceiling_tok_s is None:
            parts.append(f"? ({which})")
        elif r.efficiency is None:
            parts.append(f"{r.ceiling_tok_s:.1f} ({which})")
        else:
            parts.append(f"{fmt_pct(r.efficiency)} of {r.ceiling_tok_s:.1f} ({which})")
    return " / ".join(parts)
