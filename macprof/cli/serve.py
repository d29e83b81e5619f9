"""`macprof run`'s local servers: a running server (``--endpoint URL --model NAME --api``) or a
server macprof starts and stops itself (``--serve mlx|llama.cpp|llama-server MODEL``,
macprof/run/serve.py), as the models a run measures; and `macprof overhead --endpoint/--serve`.
The options (ServerArgs) and the concurrency phase's settings (--concurrency, --rate, --slo...)
are declared in macprof/config/settings.py. Imports stay lazy, as in cli/__init__.py: `macprof --help`
starts no engine."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import click

from macprof.errors import MacprofError
from macprof.config.settings import ServerArgs, flag_of


@contextmanager
def measured_models(ctx: click.Context, config_path: Path, opts: ServerArgs, settings: dict,
           other: Callable[[], tuple], recorded: dict | None = None) -> Iterator[tuple]:
    """The models to measure: the --endpoint, the server --serve started (stopped when the block
    ends, however it ends), else ``other()`` (models.toml or MODEL arguments). ``settings``:
    the command line's, over the [settings] of --config when it is given, or over ``recorded``
    (a bare --resume: the settings its journal records, cli/models.py bare_resume)."""
    from macprof import config
    from macprof.cli.models import _config_given, recorded_settings

    given = config_path.resolve() if _config_given(ctx) else None

    def settings_of():
        if recorded is not None:
            return recorded_settings(recorded, settings)
        return config.settings_for(given, settings)

    if opts.endpoint and opts.serve:
        raise MacprofError("--endpoint and --serve both name a server: give one")
    if opts.in_process and not opts.serve:
        raise MacprofError("--in-process applies to --serve (the model's file is what both measure)")
    if not opts.named:
        for key in ("served_model", "api"):
            if getattr(opts, key):
                raise MacprofError(f"{flag_of(ServerArgs, key).name} applies to --endpoint")
        yield other()
        return
    if opts.endpoint:
        spec = endpoint_spec(opts.endpoint, opts.served_model, opts.api or "completions", settings_of())
        assert spec.endpoint is not None
        origin = {"endpoint": spec.endpoint.url, "model": spec.endpoint.model, "api": spec.endpoint.api}
        yield (replace(spec, config=given, endpoint=replace(spec.endpoint, origin=origin)),)
        return
    from macprof.collect import resolve
    from macprof.run import serve

    assert opts.serve is not None
    kind, ref = opts.serve
    if kind not in serve.KINDS:
        raise MacprofError(f"--serve: {kind!r} is not one of {', '.join(serve.KINDS)}")
    path = resolve.resolve(ref).path
    settings = settings_of()
    need = _context(settings)
    with serve.serving(kind, path, n_ctx=max(2048, 2 * need), threads=getattr(settings, "threads", None),
                       slots=getattr(settings, "serve_slots", 1)) as server:
        served = endpoint_spec(server.url, server.model, "completions", settings, file=path, served=server.info,
                               name=f"{Path(path).stem}@{kind if kind.endswith('server') else kind + '-server'}")
        assert served.endpoint is not None
        served = replace(served, config=given, endpoint=replace(served.endpoint, origin={"serve": kind, "ref": ref}))
        yield (served, *(_in_process(ref, kind, settings) if opts.in_process else ()))


def _context(settings) -> int:
    """One sequence's context for the server: the longest request of the phases it is to run
    (macprof/phases.py: a conversation's grows turn by turn), as a worker's in-process engine gets."""
    from macprof.phases import REGISTRY, cases_of

    return max((REGISTRY[p].context(settings, cases_of(p, settings)) for p in settings.phases if p in REGISTRY),
               default=settings.prompt_tokens + settings.gen_tokens)


def _in_process(ref: str, kind: str, settings) -> tuple:
    """The served model in-process, named ``STEM@in-process`` (the summary pairs it with the
    server by the stem): the same phases but concurrency, which only a server has."""
    from dataclasses import replace

    from macprof.collect import resolve

    phases = tuple(p for p in settings.phases if p != "concurrency") or ("warm",)
    engine = "llama.cpp" if kind == "llama-server" else kind  # llama.cpp's own server runs a GGUF, as llama.cpp does
    spec = resolve.specs((ref,), engine, replace(settings, phases=phases))[0]
    return (replace(spec, name=f"{Path(spec.path).stem}@in-process"),)


def local_url(url: str) -> str:
    """--endpoint's URL without its credentials (never sent: dropped before anything holds or
    prints it), which must be a local server's http:// one."""
    from macprof.config.endpoint import without_credentials

    url = without_credentials(url)
    if not url.startswith("http://"):
        raise MacprofError(f"--endpoint: {url!r} is not an http:// URL of a local server")
    return url


def endpoint_spec(url: str, model: str | None, api: str, settings, file: Path | None = None,
                  served: dict | None = None, name: str | None = None):
    from macprof.config import ModelSpec
    from macprof.config.endpoint import Endpoint

    url = local_url(url)
    model = model or _first_model(url, api)
    endpoint = Endpoint(url, model, api, file, served)
    return ModelSpec(name or model, "openai", file or endpoint.named_path, None, settings, endpoint=endpoint)


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
        endpoint = local_url(endpoint)
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

