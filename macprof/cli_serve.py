"""`macprof run`'s local-server options: a running server (``--endpoint URL --model NAME
--api``), a server macprof starts and stops itself (``--serve mlx|llama.cpp|llama-server MODEL``,
macprof/run/serve.py), and the concurrency phase's levels and SLOs (``--concurrency``,
``--rate``, ``--slo``). Kept apart from cli.py, whose `run` only threads them through.
Imports stay lazy, as in cli.py: `macprof --help` starts no engine."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import click

from macprof.errors import MacprofError
from macprof.options import csv_ints

# phases a server can run when none are asked for: a cold start is --serve's start-up, and
# recorded as such (a running server's model cannot be unloaded over its API)
ENDPOINT_PHASES = ["warm", "prefix"]


def _rates(ctx, param, value):
    if value is None:
        return None
    try:
        return [float(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected requests per second such as 0.5 or 2,4, got {value!r}") from None


def parse_slo(text: str) -> dict:
    """``ttft:1s,itl:100ms`` -> {"slo_ttft": 1.0, "slo_itl": 0.1}; a bare number is seconds."""
    out = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"(ttft|itl)\s*[:=]\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s)?", part, re.IGNORECASE)
        if not m:
            raise MacprofError(f"--slo: {part!r} is not ttft:DURATION or itl:DURATION (e.g. ttft:1s,itl:100ms)")
        value = float(m.group(2)) / (1000.0 if (m.group(3) or "s").lower() == "ms" else 1.0)
        if value <= 0:
            raise MacprofError(f"--slo: {part!r}: the limit must be positive")
        out[f"slo_{m.group(1).lower()}"] = value
    return out


OPTIONS = (
    click.option("--endpoint", help="A running local server to measure as a model: its OpenAI base URL, e.g. "
                                    "http://127.0.0.1:8080/v1 (Ollama: http://127.0.0.1:11434 with --api ollama)."),
    click.option("--model", "served_model", help="With --endpoint: the model name to request [the first it lists]."),
    click.option("--api", type=click.Choice(["completions", "chat", "ollama"]),
                 help="With --endpoint: the server's API [completions]."),
    click.option("--serve", nargs=2, metavar="mlx|llama.cpp|llama-server MODEL",
                 help="Start mlx_lm.server, llama-cpp-python's server or llama.cpp's llama-server (from PATH) on "
                      "MODEL on a free loopback port, measure it, stop it."),
    click.option("--in-process", "in_process", is_flag=True,
                 help="With --serve: also measure the same model in-process, for the server's overhead per token."),
    click.option("--concurrency", callback=csv_ints,
                 help="Closed-loop levels against a server: concurrent clients, e.g. 1,2,4,8."),
    click.option("--rate", "rates", callback=_rates, help="Open-loop levels: seeded Poisson arrivals, requests/s."),
    click.option("--slo", help="Goodput limits for the concurrency phase, e.g. ttft:1s,itl:100ms."),
    click.option("--load-requests", type=int, help="Requests per concurrency level [2 x level, at least --reps]."),
    click.option("--load-seconds", type=float, help="Time limit per concurrency level [120]."),
)


def server_options(f):
    for option in reversed(OPTIONS):
        f = option(f)
    return f


def overrides(opts: dict, phases_given: bool) -> dict:
    """The settings the server options set. Levels alone run only the concurrency phase (as
    sweep options run only their sweeps); an endpoint alone runs warm and prefix."""
    out: dict = {"concurrency": opts.get("concurrency") or None, "rates": opts.get("rates") or None,
                 "load_requests": opts.get("load_requests"), "load_seconds": opts.get("load_seconds"),
                 **(parse_slo(opts["slo"]) if opts.get("slo") else {})}
    if not phases_given and (out["concurrency"] or out["rates"]):
        out["phases"] = ["concurrency"]
    elif not phases_given and (opts.get("endpoint") or opts.get("serve")):
        out["phases"] = list(ENDPOINT_PHASES)
    return out


@contextmanager
def models(ctx: click.Context, config_path: Path, opts: dict, settings: dict,
           other: Callable[[], tuple], recorded: dict | None = None) -> Iterator[tuple]:
    """The models to measure: the --endpoint, the server --serve started (stopped when the block
    ends, however it ends), else ``other()`` (models.toml or MODEL arguments). ``settings``:
    the command line's, over the [settings] of --config when it is given, or over ``recorded``
    (a bare --resume: the settings its journal records, cli_models.bare_resume)."""
    from macprof import config
    from macprof.cli_models import _config_given, recorded_settings

    given = config_path.resolve() if _config_given(ctx) else None

    def settings_of():
        if recorded is not None:
            return recorded_settings(recorded, settings)
        return config.settings_for(given, settings)

    if opts.get("endpoint") and opts.get("serve"):
        raise MacprofError("--endpoint and --serve both name a server: give one")
    if opts.get("in_process") and not opts.get("serve"):
        raise MacprofError("--in-process applies to --serve (the model's file is what both measure)")
    if not opts.get("endpoint") and not opts.get("serve"):
        for key in ("served_model", "api"):
            if opts.get(key):
                raise MacprofError(f"--{'model' if key == 'served_model' else key} applies to --endpoint")
        yield other()
        return
    if opts.get("endpoint"):
        spec = endpoint_spec(opts["endpoint"], opts.get("served_model"), opts.get("api") or "completions", settings_of())
        assert spec.endpoint is not None
        origin = {"endpoint": spec.endpoint.url, "model": spec.endpoint.model, "api": spec.endpoint.api}
        yield (replace(spec, config=given, endpoint=replace(spec.endpoint, origin=origin)),)
        return
    from macprof.collect import resolve
    from macprof.run import serve

    kind, ref = opts["serve"]
    if kind not in serve.KINDS:
        raise MacprofError(f"--serve: {kind!r} is not one of {', '.join(serve.KINDS)}")
    path = resolve.resolve(ref).path
    settings = settings_of()
    need = getattr(settings, "prompt_tokens", 512) + getattr(settings, "gen_tokens", 128)
    with serve.serving(kind, path, n_ctx=max(2048, 2 * need), threads=getattr(settings, "threads", None)) as server:
        served = endpoint_spec(server.url, server.model, "completions", settings, file=path, served=server.info,
                               name=f"{Path(path).stem}@{kind if kind.endswith('server') else kind + '-server'}")
        assert served.endpoint is not None
        served = replace(served, config=given, endpoint=replace(served.endpoint, origin={"serve": kind, "ref": ref}))
        yield (served, *(_in_process(ref, kind, settings) if opts.get("in_process") else ()))


def _in_process(ref: str, kind: str, settings) -> tuple:
    """The served model in-process, named ``STEM@in-process`` (the summary pairs it with the
    server by the stem): the same phases but concurrency, which only a server has."""
    from dataclasses import replace

    from macprof.collect import resolve

    phases = tuple(p for p in settings.phases if p != "concurrency") or ("warm",)
    engine = "llama.cpp" if kind == "llama-server" else kind  # llama.cpp's own server runs a GGUF, as llama.cpp does
    spec = resolve.specs((ref,), engine, replace(settings, phases=phases))[0]
    return (replace(spec, name=f"{Path(spec.path).stem}@in-process"),)


def endpoint_spec(url: str, model: str | None, api: str, settings, file: Path | None = None,
                  served: dict | None = None, name: str | None = None):
    from macprof.config import ModelSpec
    from macprof.endpoint import Endpoint

    if not url.startswith("http://"):
        raise MacprofError(f"--endpoint: {url!r} is not an http:// URL of a local server")
    model = model or _first_model(url, api)
    return ModelSpec(name or model, "openai", file or Path(url.split("://", 1)[1]), None, settings,
                     endpoint=Endpoint(url, model, api, file, served))


def _first_model(url: str, api: str) -> str:
    from macprof.engines import openai, wire

    root = url.rstrip("/").removesuffix("/v1").removesuffix("/api")
    try:
        listed = wire.get_json(root + "/api/tags" if api == "ollama" else url.rstrip("/") + "/models", timeout=10.0)
    except wire.ServerError as exc:
        raise MacprofError(f"--endpoint {url}: no model list ({exc}); name the model with --model") from None
    names = openai.model_ids(listed)
    if not names:
        raise MacprofError(f"--endpoint {url}: the server lists no model; name one with --model")
    return names[0]


def server_overhead(endpoint: str | None, model: str | None, api: str, serve: tuple | None, gen_tokens: int,
                    depth: int, pairs: int, reps: int, threads: int | None, refs: tuple, progress) -> list[dict]:
    """`macprof overhead --endpoint URL` / `--serve KIND MODEL` (macprof/bench/server.py): the
    server --serve starts lives for the whole benchmark and is stopped however it ends."""
    from macprof.bench import server as bench

    if endpoint and serve:
        raise MacprofError("--endpoint and --serve both name a server: give one")
    if refs:
        raise MacprofError("overhead --endpoint/--serve measures a server: MODEL arguments apply to the in-process paths")
    if pairs < 1 or reps < 1:
        raise MacprofError("overhead: --pairs and --reps must be at least 1")
    if endpoint:
        if not endpoint.startswith("http://"):
            raise MacprofError(f"--endpoint: {endpoint!r} is not an http:// URL of a local server")
        return bench.measure(endpoint, model or _first_model(endpoint, api), api, None, gen_tokens, depth, pairs, reps,
                             progress=progress)
    from macprof.collect import resolve
    from macprof.run import serve as serving

    kind, ref = serve or ("", "")
    if kind not in serving.KINDS:
        raise MacprofError(f"--serve: {kind!r} is not one of {', '.join(serving.KINDS)}")
    path = resolve.resolve(ref).path
    with serving.serving(kind, path, n_ctx=max(2048, 2 * (depth + gen_tokens)), threads=threads) as server:
        return bench.measure(server.url, server.model, api, path, gen_tokens, depth, pairs, reps, served=server.info,
                             progress=progress)

