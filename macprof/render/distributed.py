"""A distributed model's group in `macprof show`: measured beside predicted, the communication
pass per rank, bytes per token, the other ranks' timelines."""

from __future__ import annotations

from macprof.model.distributed import GroupResult
from macprof.render.text import fmt_bytes, fmt_rate


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "?"


def _ms(x: float | None) -> str:
    return f"{x * 1e3:.2f} ms" if x is not None else "?"


def group_lines(g: GroupResult) -> list[str]:
    lines = [f"   distributed: {g.size} ranks over {', '.join(g.hosts)} ({g.backend}, {g.parallel} parallel); "
             f"decode {fmt_rate(g.decode_tok_s)} tok/s (rank 0, warm median)"]
    p = g.prediction
    if p:
        t = p.get(g.parallel or "tensor", {})
        link = f"link {p['link_gbs']:g} GB/s" if p.get("link_gbs") else f"latency {p['latency_s'] * 1e3:.2f} ms per collective"
        lines.append(f"   group ceiling ({g.parallel}): {fmt_rate(t.get('tok_s'))} tok/s (read {_ms(t.get('read_s'))} + "
                     f"comm {_ms(t.get('comm_s'))}; {link}, {p['link_source']}); efficiency {_pct(g.efficiency)}; "
                     f"{'pipeline' if g.parallel == 'tensor' else 'tensor'} would be "
                     f"{fmt_rate(p.get('pipeline' if g.parallel == 'tensor' else 'tensor', {}).get('tok_s'))} tok/s")
    b = g.bytes_per_token
    if b:
        lines.append(f"   bytes per token: {fmt_bytes(b['payload'])} given to all_sum ({b['payload_formula']}), "
                     f"{fmt_bytes(b['wire_per_rank'])} on the wire per rank; measured {fmt_bytes(b['measured_payload'])}")
    for c in g.comm:
        lines.append(f"   rank {c['rank']} (diagnostic pass): step {_ms(c['step_s'])} = compute {_ms(c['compute_s'])} + "
                     f"comm {_ms(c['comm_s'])} ({_pct(c['comm_share'])} communication, {c['collectives_per_token']:g} "
                     f"collectives per token)")
    for t in g.timelines:
        ok = all(r.get("tokens_match_rank0") for r in t["requests"])
        lines.append(f"   rank {t['rank']} {t['phase']}: {len(t['requests'])} requests stamped; tokens "
                     f"{'equal rank 0' if ok else 'DIFFER from rank 0'}")
    if g.reason:
        lines.append(f"   distributed: {g.reason}")
    return lines
