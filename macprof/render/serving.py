"""A local server's figures (engine openai): the concurrency phase's table, and the lines
`show` adds per server model: which server it was (command line, version, start-up), whose
memory the peak RSS is, what the server reported beside the client (its own timings, so that
network + queueing = client minus server shows), and the requests it flagged."""

from __future__ import annotations

from statistics import median
from typing import Sequence

from macprof.model.bounds import INVALID, share_ok
from macprof.model.log import ModelResult
from macprof.model.phases import Request
from macprof.model.serving import ConcurrencyPhase, LoadLevelResult
from macprof.render.exporters import Table, text_table
from macprof.render.text import fmt_rate, fmt_s
from macprof.sanitise import hide_credentials


def _predicted(level: LoadLevelResult) -> str:
    p = level.prediction
    sides = [(w, getattr(p, w, None)) for w in ("spec", "measured")] if p else []
    got = [f"{fmt_rate(s.aggregate_tok_s)} ({w})" for w, s in sides if s is not None and s.aggregate_tok_s]
    return " / ".join(got) or "-"


def _goodput(level: LoadLevelResult) -> str:
    if level.goodput is None:
        return f"- ({level.goodput_reason})" if level.goodput_reason else "-"
    return f"{100 * level.goodput:.0f}%" if share_ok(level.goodput) else INVALID


def concurrency_table(phase: ConcurrencyPhase) -> Table:
    headers = ["level", "sent/planned", "ok", "errors", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "e2e p50",
               "e2e p99", "aggregate tok/s", "goodput", "roofline aggregate at B=C", ""]
    rows = []
    for lv in phase.levels:
        label = f"C={lv.concurrency}" if lv.mode == "closed" else f"{lv.rate:g}/s (seed {lv.seed})"
        rows.append([label, f"{lv.sent}/{lv.planned}", str(lv.ok), str(lv.errors), fmt_s(lv.ttft_s.median),
                     fmt_s(lv.ttft_s.p99), fmt_s(lv.itl_s.median), fmt_s(lv.itl_s.p99), fmt_s(lv.e2e_s.median),
                     fmt_s(lv.e2e_s.p99), fmt_rate(lv.aggregate_tok_s), _goodput(lv), _predicted(lv),
                     "; ".join(sorted(set(lv.error_messages)))[:160]])
    return text_table(headers, rows)


def slo_text(phase: ConcurrencyPhase) -> str:
    slo = {k: v for k, v in (phase.slo or {}).items() if v}
    return ", ".join(f"{k.removesuffix('_s').upper()} <= {fmt_s(v)}" for k, v in slo.items()) or "no SLO given"


def _requests(m: ModelResult) -> list[Request]:
    ph = m.phases
    out = list(ph.warm.requests) if ph.warm else []
    if ph.prefix:
        out += [r for p in ph.prefix.pairs for r in (getattr(p, "reuse", None), getattr(p, "noreuse", None)) if r]
    if ph.concurrency:
        out += [r for lv in ph.concurrency.levels for r in lv.requests]
    return [r for r in out if r.has("server") and r.server]


def server_lines(m: ModelResult) -> list[str]:
    """`show`'s lines for a server model; none for an in-process one."""
    if m.identity.engine != "openai":
        return []
    versions = m.engine_versions or {}
    lines = [f"   server: {hide_credentials(versions.get('openai-endpoint', '?'))} (api {versions.get('api', '?')}, "
             f"model {versions.get('model', '?')}); tokens: {versions.get('tokenizer', '?')}"]
    if versions.get("served_by") == "macprof":
        lines.append(f"   started by macprof: {versions.get('command')} ({versions.get('version')}); answered after "
                     f"{fmt_s(versions.get('startup_s'))}; peak RSS is the server process's (pid {versions.get('pid')})")
        lines.append(f"   cold: first request's TTFT {fmt_s(versions.get('cold_first_request_ttft_s'))}, start to first "
                     f"token {fmt_s(versions.get('cold_start_to_first_token_s'))}"
                     + (f" ({versions['cold_first_request_error']})" if versions.get("cold_first_request_error") else ""))
    else:
        lines.append("   peak RSS: unknown (the server is not a process macprof started; the client's memory "
                     "says nothing about the model's)")
    reqs = _requests(m)
    counted = [r.prompt_tokens for r in reqs if r.prompt_tokens]
    asked = "in tokens (a tokenizer, here)" if "exact" in str(versions.get("tokenizer")) else "in words"
    lines.append(f"   prompt lengths are asked for {asked}; the server counted p50 {median(counted):.0f} tokens"
                 if counted else f"   prompt lengths are asked for {asked}; the server counted none")
    if versions.get("eos"):
        lines.append(f"   EOS: {versions['eos']}")
    sources: dict[str, int] = {}
    for r in reqs:
        if r.server and r.status == "ok":
            key = f"{r.server.count_source or 'nothing'}; per chunk: {r.server.chunk_tokens_source or 'unknown'}"
            sources[key] = sources.get(key, 0) + 1
    lines += [f"   tokens counted by ({n} requests): {k}" for k, n in sorted(sources.items())]
    lines += _timing_lines(reqs)
    flags: dict[str, int] = {}
    for r in reqs:
        for f in r.server.flags if r.server else ():
            key = "fewer or more tokens than asked: EOS was not held off (the tokens received are measured, " \
                  "their counts recorded)" if f.startswith("count:") else f
            flags[key] = flags.get(key, 0) + 1
    lines += [f"   flagged ({n} requests): {f}" for f, n in sorted(flags.items())]
    return lines


def _timing_lines(reqs: Sequence[Request]) -> list[str]:
    """The server's own prompt time beside the client's TTFT (medians over requests that have both)."""
    pairs = [(r.ttft_s, (r.server.timings if r.server else None) or {}) for r in reqs if r.status == "ok" and r.ttft_s]
    own = [(t, float(tm["prompt_s"]), tm.get("source")) for t, tm in pairs if tm.get("prompt_s") is not None]
    if not own:
        return ["   server timings: none reported (the client's figures are all there is; network + queueing "
                "cannot be split from the server's work)"]
    client, server = median(t for t, _, _ in own), median(p for _, p, _ in own)
    return [f"   server timings ({own[0][2]}, {len(own)} requests): client TTFT p50 {fmt_s(client)}, server prompt "
            f"p50 {fmt_s(server)}, network + queueing + first token's decode {fmt_s(client - server)}"]


def overhead_lines(log) -> list[str]:
    """A server beside the same model in-process (``--serve ... --in-process``): warm TTFT and
    ITL p50 of each, and the difference, the server's overhead per token."""
    by_name = {m.identity.name: m for m in log.models}
    out = []
    for m in log.models:
        if m.identity.engine != "openai" or "@" not in m.identity.name:
            continue
        local = by_name.get(m.identity.name.split("@")[0] + "@in-process")
        if local is None or not (m.phases.warm and local.phases.warm):
            continue
        a, b = m.phases.warm.summary, local.phases.warm.summary
        out.append(f"{m.identity.name} vs in-process (warm, same prompt and gen): TTFT {fmt_s(a.ttft_s.median)} vs "
                   f"{fmt_s(b.ttft_s.median)} ({_diff(a.ttft_s.median, b.ttft_s.median)}), ITL p50 "
                   f"{fmt_s(a.itl_s.median)} vs {fmt_s(b.itl_s.median)} ({_diff(a.itl_s.median, b.itl_s.median)} "
                   f"per token: the server's overhead)")
    return out


def _diff(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "unknown: a side has no figure"
    return ("+" if a >= b else "-") + fmt_s(abs(a - b))


def _range(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def length_warnings(m: ModelResult) -> list[str]:
    """A server's requests whose lengths were not the asked ones, said in the summary: the
    prompts' real range (where no tokenizer could be had here, or the server counted otherwise)
    and the replies' (where EOS was not held off); each request's real lengths are in the log."""
    if m.identity.engine != "openai":
        return []
    ph, s, versions = m.phases, m.settings, m.engine_versions or {}
    asked: list[tuple[int, int, Request]] = [(s.prompt_tokens, s.gen_tokens, r) for r in _requests(m)]
    for c in ph.grid.cases if ph.grid else ():
        asked += [(c.prompt_tokens, c.gen_tokens, r) for r in c.requests]
    ok = [(p, g, r) for p, g, r in asked if r.status == "ok" and r.kind == "measured"]
    out = []
    prompts = [(p, r.prompt_tokens) for p, _, r in ok]
    if any(got != want for want, got in prompts if got):
        wanted = sorted({want for want, got in prompts if got and got != want})
        out.append(f"{m.identity.name}: prompts were {_range([got for _, got in prompts if got])} tokens (the server's "
                   f"count) where {', '.join(map(str, wanted))} were asked; tokens: {versions.get('tokenizer', '?')}. "
                   f"Exact lengths need the model's tokenizer: give its file (`path` in models.toml, or --serve) or a "
                   f"server with a tokenize endpoint")
    elif prompts and not any(got for _, got in prompts):
        out.append(f"{m.identity.name}: the prompts' lengths in tokens are unknown (the server counted none and no "
                   f"tokenizer could be had here): {prompts[0][0]} words were asked")
    gens = [(g, r.server.completion_tokens) for _, g, r in ok if r.server and r.server.completion_tokens is not None]
    if any(got != want for want, got in gens):
        wanted = sorted({want for want, got in gens if got != want})
        out.append(f"{m.identity.name}: replies were {_range([got for _, got in gens])} tokens where "
                   f"{', '.join(map(str, wanted))} were asked: EOS was not held off ({versions.get('eos', '?')}); "
                   f"decode is over the tokens received")
    return out

