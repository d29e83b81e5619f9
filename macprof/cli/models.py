"""Models named by reference (macprof/collect/resolve.py): the `macprof models` command, and the
models a `run` or `overhead` measures when MODEL arguments name them instead of models.toml.
Imports are lazy, as in cli/__init__.py: `macprof --help` imports no store library."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from macprof.errors import MacprofError
from macprof.sanitise import clean

if TYPE_CHECKING:
    from macprof.analyse.estimate import ModelFile
    from macprof.config.settings import ServerArgs


def _config_given(ctx: click.Context) -> bool:
    from click.core import ParameterSource

    return ctx.meta.get(_RECOVERED_CONFIG, False) or ctx.get_parameter_source("config_path") == ParameterSource.COMMANDLINE


_RECOVERED_CONFIG = "macprof.config_recovered"  # a bare --resume took --config from its journal


def bare_resume(ctx: click.Context, refs: tuple[str, ...], resume: Path | None, server: ServerArgs,
                config_path: Path) -> tuple[ServerArgs, Path, dict | None]:
    """A bare `--resume JOURNAL` (no MODEL, --config, --endpoint or --serve) continues what the
    journal's run_start records: the server that run started (``server`` with its --serve, or
    its --endpoint, --model and --api) and the models.toml it read. Returns the server options
    and the config path to use and, for a server run, the served model's recorded settings
    (the options of that run, which this command line may repeat but need not);
    (server, config_path, None) when it is no bare resume or the journal records nothing of
    the kind (older journals)."""
    if resume is None or refs or _config_given(ctx) or server.named:
        return server, config_path, None
    recorded = _run_start_models(resume)
    origin = next((m["server"] for m in recorded if isinstance(m.get("server"), dict)), None)
    configs = {m.get("config") for m in recorded if "source" not in m}  # a model named by reference reads none
    (only,) = configs if len(configs) == 1 else (None,)
    if isinstance(only, str):
        config_path = Path(only)
        ctx.meta[_RECOVERED_CONFIG] = True
    if origin is None:
        return server, config_path, None
    if "serve" in origin:
        server = replace(server, serve=(origin["serve"], origin["ref"]), in_process=any("source" in m for m in recorded))
    else:
        server = replace(server, endpoint=origin.get("endpoint"), served_model=origin.get("model"), api=origin.get("api"))
    served = next(m for m in recorded if m.get("server") is origin)
    return server, config_path, served["settings"] if isinstance(served.get("settings"), dict) else None


def selected_models(ctx: click.Context, refs: tuple[str, ...], engine: str | None, config_path: Path,
                    names: list[str], overrides: dict | None, resume: Path | None = None) -> tuple:
    """The models to measure: those MODEL arguments name (with the [settings] of --config when
    it is given), else models.toml's (only --models NAMES). A `--resume` of a run whose models
    were named on the command line finds them in its journal when no MODEL or --config is given."""
    from macprof import config
    from macprof.collect import resolve

    if not refs and resume is not None and not _config_given(ctx):
        recorded = _recorded(resume)
        if recorded:
            return _from_journal(recorded, overrides)
    if not refs:
        if engine:
            raise MacprofError("--engine applies to MODEL arguments (a models.toml entry names its own engine)")
        if resume is not None and ctx.meta.get(_RECOVERED_CONFIG):  # a bare --resume: that run's models and options
            return _from_config(config_path, _run_start_models(resume), names, overrides)
        return config.load(config_path, overrides).select(names)
    if names:
        raise MacprofError("--models selects from models.toml; with MODEL arguments every model named is measured")
    settings = config.settings_for(config_path if _config_given(ctx) else None, overrides)
    return resolve.specs(refs, engine, settings)


def _run_start_models(journal: Path) -> list[dict]:
    """The models a journal's run_start records ([] when it records none, or is no journal)."""
    from macprof.model.events import RunStart
    from macprof.store.runlog import read_journal

    try:
        start = next((e for e in read_journal(journal) if isinstance(e, RunStart)), None)
    except (MacprofError, OSError):
        return []  # the resume itself says what is wrong with the journal
    return [m for m in (start.models or ()) if isinstance(m, dict)] if start is not None else []


def _recorded(journal: Path) -> list[dict] | None:
    """The models a journal's run_start records, when every one was named by reference."""
    models = _run_start_models(journal)
    return models if models and all(isinstance(m.get("source"), dict) for m in models) else None


def recorded_settings(recorded: dict, overrides: dict | None):
    """A recorded model's settings under this command line's options (each checked as for any run)."""
    from macprof import config

    config.settings_for(None, overrides)
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    return config.check_settings("command line", config.merge(config.settings_from_dict(recorded), cli))


def _from_config(config_path: Path, recorded: list[dict], names: list[str], overrides: dict | None) -> tuple:
    """The models a bare --resume's journal recorded from ``config_path`` (or those of them
    --models names), each with its recorded settings under this command line's options."""
    from macprof import config

    settings = {m["name"]: m["settings"] for m in recorded if isinstance(m.get("settings"), dict)}
    specs = config.load(config_path).select(names or list(settings))
    return tuple(replace(m, settings=recorded_settings(settings[m.name], overrides)) if m.name in settings else m
                 for m in specs)


def _from_journal(recorded: list[dict], overrides: dict | None) -> tuple:
    from macprof.collect import resolve

    out = []
    for m in recorded:
        (spec,) = resolve.specs([m["source"]["ref"]], m["engine"], recorded_settings(m["settings"], overrides))
        out.append(replace(spec, name=m["name"]))
    return tuple(out)


def model_path(ref: str) -> Path:
    """The file or directory a reference names (`inspect`, `estimate`)."""
    from macprof.collect import resolve

    return resolve.resolve(ref).path


def model_file(ref: str, kv_type: str) -> ModelFile:
    """A reference's model file, its shape read from its metadata at ``kv_type``: what `estimate`
    computes from (analyse/estimate.py reads no file)."""
    from macprof.analyse.estimate import ModelFile
    from macprof.collect import modelinfo

    path = model_path(ref)
    return ModelFile(path, modelinfo.inspect(path, kv_type))


@click.command(name="models")
@click.argument("folders", nargs=-1, type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--select", "patterns", multiple=True,
              help="Only the models whose reference or name matches this glob (repeat for more), e.g. '*Q4_K_M*'.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown", "csv"]), default="table",
              show_default=True)
@click.option("--write", "write", type=click.Path(path_type=Path, dir_okay=False),
              help="Write a models.toml listing the models selected (never over a file, unless --force-overwrite).")
@click.option("--force-overwrite", is_flag=True, help="Replace the file at --write.")
def models(folders, patterns, fmt, write, force_overwrite) -> None:
    """List the GGUF files and MLX models of the local stores (Hugging Face hub cache, llama.cpp's
    cache, Ollama, LM Studio) and of FOLDERS: the reference `macprof run` takes, engine, declared
    quantization, parameters, size, decode ceiling on this machine and whether it fits in memory."""
    from macprof import catalog as cat
    from macprof.collect import stores
    from macprof.render.models import render_models

    entries = cat.select(stores.discover(folders), patterns)
    result = cat.catalog(entries, stores.locations(folders))
    click.echo(render_models(result, fmt))
    if write is not None:
        readable = [r for r in result["rows"] if r["file_bytes"] is not None]
        cat.write_config(readable, write, force_overwrite)
        left = len(result["rows"]) - len(readable)
        click.echo(clean(f"wrote {write}: {len(readable)} model(s)" + (f"; {left} unreadable left out" if left else "")),
                   err=True)


def ensure_demo_models(models) -> None:
    """Build the demo models a run names (demo:SIZE/VARIANT) that are not in the cache yet."""
    sizes = sorted({m.demo.split("/")[0] for m in models if m.demo and not m.path.exists()})
    if not sizes:
        return  # the common case: the builder (and numpy with it) is not even imported
    from macprof.demo import build

    for size in sizes:
        click.echo(f"building the {size} demo models (first run only)...", err=True)
        build.build(size, progress=lambda s: click.echo(f"  {s}", err=True))
