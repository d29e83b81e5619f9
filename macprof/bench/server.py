"""`macprof overhead --endpoint URL` (or ``--serve KIND MODEL``): does macprof's server path change
what it measures?

Side by side on the same server and the same prompts, alternating which goes first in each pair:
- A: macprof's whole server path: one `macprof run` of the warm phase against the endpoint, in a
  process of its own (its worker, journal and samplers; its counting requests, untimed), its
  TTFT and decode per measured request read from the run log;
- B: a minimal streaming client (``raw_request``: http.client, as an app would stream): the
  same prompt texts (built as the warm phase builds them, run/phases/common.py ``warm_prompts``),
  greedy, the same length, the keys that hold EOS off on this server and nothing else; its TTFT
  is t_1 - t0 and its decode (k - 1) / (t_k - t_1) over the arrivals of its k chunks. Before each
  request it sends the short untimed request that macprof's warm phase sends to empty the
  server's cache (engines/openai.py ``reset``), so that both sides meet the server in the same
  state: what differs is macprof's measuring alone (a server can be quicker after a short
  request than after a long one: llama-cpp-python's TTFT by 15 % here).
Per pair, each side's median over its requests; the pair's ratio is macprof's rate over the
raw client's (TTFT as a rate: the raw client's TTFT over macprof's), so 1 is no difference and
below 1 is macprof measuring slower. Reported per metric: the median ratio over the pairs with
a seeded bootstrap interval. That both sides sent the same prompts shows in their outputs:
greedy, the same text chunk for chunk (``same_outputs``).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from macprof.errors import MacprofError
from macprof.measure.significance import median_interval
from macprof.measure.stats import summarize

PROMPT_SEED = 0  # the worker's PromptBuilder seed (run/worker.py)


def raw_request(url: str, body: dict, timeout: float = 600.0) -> tuple[float | None, float | None, list[str]]:
    """One streamed request, as a minimal app client reads it: (TTFT s, decode tok/s over chunk
    arrivals, the chunks' texts)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
    times, texts = [], []
    t0 = time.perf_counter()
    conn.request("POST", parts.path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status >= 400:
        raise MacprofError(f"overhead: {url}: HTTP {resp.status}: {resp.read(300)!r}")
    for raw in resp:
        line = raw.strip()
        if line == b"data: [DONE]":
            break
        if not line.startswith(b"data:"):
            continue
        choices = json.loads(line[5:]).get("choices") or [{}]
        text = choices[0].get("text") or (choices[0].get("delta") or {}).get("content") or ""
        if text:
            times.append(time.perf_counter())
            texts.append(text)
    conn.close()
    ttft = times[0] - t0 if times else None
    decode = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
    return ttft, decode, texts


def _endpoint_config(folder: Path, url: str, model: str, api: str, file: Path | None) -> list[str]:
    """How `macprof run` names the endpoint: on the command line, or through a models.toml that
    gives its file (a server --serve started: its model's own tokenizer, as the raw side's)."""
    if file is None:
        return [f"--endpoint={url}", f"--model={model}", f"--api={api}"]
    toml = folder / "models.toml"
    # each value a TOML string whatever it holds (a server names its own model): never a key of its own
    toml.write_text(f'[[models]]\nname = "served"\nengine = "openai"\nurl = {_toml(url)}\nmodel = {_toml(model)}\n'
                    f'api = {_toml(api)}\npath = {_toml(str(file))}\n')
    return ["--config", str(toml)]


def _toml(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and DEL, which JSON leaves, is escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _macprof_run(target: list[str], log: Path, n: int, prompt_tokens: int, reps: int) -> list:
    from macprof.store.runlog import load

    cmd = [sys.executable, "-m", "macprof", "run", *target, "--phases", "warm", "--reps", str(reps), "--prompt-tokens",
           str(prompt_tokens), "--gen-tokens", str(n), "--log", str(log)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not log.exists():
        raise MacprofError(f"overhead: `macprof run` failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    (model,) = load(log).models
    reqs = [r for r in (model.phases.warm.requests if model.phases.warm else ()) if r.kind == "measured"]
    if not reqs or any(r.status != "ok" for r in reqs):
        raise MacprofError(f"overhead: the run's requests failed: {[r.error for r in reqs if r.status != 'ok']}")
    return reqs


def measure(url: str, model: str, api: str, file: Path | None, n: int, prompt_tokens: int, pairs: int, reps: int,
            served: dict | None = None, progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Both sides against one endpoint; one result per metric (decode, TTFT)."""
    from macprof.collect import resolve
    from macprof.engines import wire
    from macprof.engines.base import EngineSettings
    from macprof.engines.openai import DISPLACE, OpenAIEngine
    from macprof.run.phases.common import warm_prompts
    from macprof.run.prompts import PromptBuilder

    if api == "ollama":
        raise MacprofError("overhead --endpoint: the raw client speaks the OpenAI API (completions or chat)")
    engine = OpenAIEngine()  # what the run's worker does: the same server, tokenizer and prompts
    # as the run's worker loads it (which is not told who started the server): the same EOS keys
    engine.load_model(Path("."), EngineSettings(endpoint={
        "url": url, "model": model, "api": api, "timeout": 600.0, "file": str(file) if file else None,
        "resolved": None if file else resolve.served_model(model, api)}))
    prompts = warm_prompts(PromptBuilder(engine, seed=PROMPT_SEED), "warm", prompt_tokens, reps)
    bodies = [wire.request_for(api, url, model, p.text, n, engine.eos_keys(n)) for p in prompts]
    # the minimal client's body: the prompt, greedy, the length, EOS held off; nothing else
    raw = [(u, {k: v for k, v in b.items() if k != "stream_options"}) for u, b in bodies]
    reset = wire.request_for(api, url, model, DISPLACE, 1, engine.eos_keys(1))
    engine.close()

    def one(u: str, b: dict) -> tuple:
        raw_request(*reset)  # untimed: the cache emptied, as before each of macprof's
        return raw_request(u, b)

    def client() -> tuple[list, list, list]:
        got = [one(u, b) for u, b in raw]
        return [g[0] for g in got[1:]], [g[1] for g in got[1:]], [g[2] for g in got[1:]]  # the first: warm-up

    with tempfile.TemporaryDirectory(prefix="macprof-overhead-") as tmp:
        target = _endpoint_config(Path(tmp), url, model, api, file)
        client()  # both paths warmed up before the first pair
        sides: dict[str, list] = {"ours_ttft": [], "ours_decode": [], "raw_ttft": [], "raw_decode": []}
        same, compared = 0, 0
        for i in range(pairs):
            if i % 2 == 0:
                ours = _macprof_run(target, Path(tmp) / f"run-{i}.json", n, prompt_tokens, reps)
                ttft, decode, texts = client()
            else:
                ttft, decode, texts = client()
                ours = _macprof_run(target, Path(tmp) / f"run-{i}.json", n, prompt_tokens, reps)
            same += sum(1 for r, t in zip(ours, texts) if list(r.tokens) == t)
            compared += len(ours)
            sides["ours_ttft"].append(_median([r.ttft_s for r in ours]))
            sides["ours_decode"].append(_median([r.decode_tok_s for r in ours]))
            sides["raw_ttft"].append(_median(ttft))
            sides["raw_decode"].append(_median(decode))
            progress(f"{url}: pair {i + 1}/{pairs}: decode {sides['ours_decode'][-1]:.1f} vs {sides['raw_decode'][-1]:.1f} "
                     f"tok/s, TTFT {1e3 * sides['ours_ttft'][-1]:.1f} vs {1e3 * sides['raw_ttft'][-1]:.1f} ms (macprof vs raw)")
    name = (served or {}).get("server") or engine.server
    out = []
    for metric, ours_v, raw_v, ratios in (
            ("decode tok/s", sides["ours_decode"], sides["raw_decode"],
             [a / b for a, b in zip(sides["ours_decode"], sides["raw_decode"])]),
            ("TTFT s", sides["ours_ttft"], sides["raw_ttft"], [b / a for a, b in zip(sides["ours_ttft"], sides["raw_ttft"])])):
        low, high = median_interval(ratios)
        out.append({"path": "server", "server": name, "url": url, "model": model, "metric": metric,
                    "reference": "minimal streaming client (http.client, the same prompts and body less stream_options)",
                    "gen_tokens": n, "prompt_tokens": prompt_tokens, "reps": reps, "pairs": pairs,
                    "macprof": ours_v, "raw": raw_v, "ratios": ratios, "median_ratio": summarize(ratios)["median"],
                    "ratio_ci95": [low, high], "macprof_median": summarize(ours_v)["median"],
                    "raw_median": summarize(raw_v)["median"], "same_outputs": f"{same}/{compared}",
                    "eos": engine.eos_how, "tokenizer": engine.tokenizer_mode})
    return out


def _median(values) -> float:
    got = [v for v in values if v is not None]
    if not got:
        raise MacprofError("overhead: a side measured no figure (fewer than two chunks per request?)")
    return float(summarize(got)["median"])


def table(results: list[dict]) -> str:
    """The server path's results: each metric's medians, the median paired ratio (a rate ratio:
    1 is no difference, below 1 macprof measures slower) and its interval."""
    from macprof.render.text import fmt_s, render_table

    def cell(r: dict, v: float) -> str:
        return fmt_s(v) if r["metric"].startswith("TTFT") else f"{v:.1f}"

    rows = [[f"{r['server']} ({r['model']})", r["metric"], cell(r, r["macprof_median"]), cell(r, r["raw_median"]),
             f"{r['median_ratio']:.3f}", "-" if r["ratio_ci95"][0] is None else
             f"{r['ratio_ci95'][0]:.3f}..{r['ratio_ci95'][1]:.3f}", str(r["pairs"]), r["same_outputs"]]
            for r in results]
    return render_table(["server", "metric", "macprof p50", "minimal client p50", "median paired ratio (rate)",
                         "95% CI", "pairs", "same outputs"], rows)
