"""models.toml + command-line options -> frozen dataclasses.

Format (documented in README.md):

    [settings]                 # optional: defaults for every model
    gen_tokens = 64

    [[models]]
    name = "llama-3.1-8b-q4_k_m"
    engine = "llama.cpp"       # or "mlx" ("fake": the test tier's deterministic engine)
    path = "~/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"   # ~ and relative paths allowed
    quant = "Q4_K_M"           # optional label
    reps = 3                   # optional per-model settings (any key of [settings])
    [models.linux]             # optional per-platform overrides: linux, macos
    gen_tokens = 16

Sweeps (macprof/cases.py): ``prompt_grid``, ``gen_grid``, ``shapes``, ``depths``, ``batches``,
run by the phases ``grid``, ``depth`` and ``batch``.

Each setting (its type, default, check, flags...) is declared once, in macprof/config/settings.py;
this module reads models.toml and merges its layers.

A path of the form ``demo:SIZE/VARIANT`` names a demo model in macprof's cache; `macprof run`
builds it when missing. Precedence: command-line option > model's platform table > model >
[settings] > built-in default. Every error names the file, the model entry and the key.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from macprof.config.dist import finish as _finish_distributed
from macprof.config.endpoint import Endpoint
from macprof.errors import MacprofError
from macprof.config.settings import TOML_KEYS, TUPLE_KEYS, Settings, check_value

PLATFORM_KEYS = {"linux": "linux", "darwin": "macos"}
# a models.toml entry's keys: its own, the settings models.toml may set, its platform tables
_MODEL_KEYS = {"name", "engine", "path", "quant", "url", "model", "api"} | TOML_KEYS | set(PLATFORM_KEYS.values())


@dataclass(frozen=True)
class ModelSource:
    """Where a model named on the command line came from (macprof/collect/resolve.py)."""

    ref: str  # the reference as typed
    store: str  # "path", "hf", "llama.cpp", "ollama", "lmstudio", "demo"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    engine: str
    path: Path
    quant: str | None
    settings: Settings
    demo: str | None = None  # "SIZE/VARIANT" when the path is a demo:... path
    source: ModelSource | None = None  # a model named on the command line, not in models.toml
    endpoint: Endpoint | None = None  # engine "openai": the server
    config: Path | None = None  # the models.toml it came from, or whose [settings] it took: a bare --resume reads it again

    @property
    def files(self) -> list[Path]:
        """The files that make up the model (a GGUF file, or an MLX directory's files)."""
        if self.endpoint is not None and self.endpoint.file is None:
            return []
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir() if p.is_file())
        return [self.path]


@dataclass(frozen=True)
class Config:
    path: Path
    models: tuple[ModelSpec, ...]

    def select(self, names: list[str] | None) -> tuple[ModelSpec, ...]:
        if not names:
            return self.models
        known = {m.name: m for m in self.models}
        missing = [n for n in names if n not in known]
        if missing:
            raise MacprofError(f"{self.path}: no model named {', '.join(map(repr, missing))} "
                               f"(models: {', '.join(known)})")
        return tuple(known[n] for n in names)


def _settings_from(where: str, table: dict) -> dict:
    out = {}
    for key, value in table.items():
        if key not in TOML_KEYS:
            raise MacprofError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(TOML_KEYS))})")
        out[key] = check_value(where, key, value)
    return out


def check_settings(where: str, s: Settings) -> Settings:
    """Cross-field sense checks that no single value shows."""
    if "prefix" in s.phases and s.prefix_tokens >= s.prompt_tokens:
        raise MacprofError(f"{where}: prefix_tokens ({s.prefix_tokens}) must be smaller than "
                           f"prompt_tokens ({s.prompt_tokens}): the suffix needs at least one token")
    if "depth" in s.phases and not s.depths:
        raise MacprofError(f"{where}: phase 'depth' needs depths (--depth 0,1024,4096 or depths = [...])")
    if "quality" in s.phases and s.quality_tokens < s.quality_ctx:
        raise MacprofError(f"{where}: quality_tokens ({s.quality_tokens}) must hold at least one chunk of "
                           f"quality_ctx ({s.quality_ctx}) tokens")
    if "batch" in s.phases and not s.batches:
        raise MacprofError(f"{where}: phase 'batch' needs batch sizes (--batch 1,2,4,8 or batches = [...])")
    if "concurrency" in s.phases and not (s.concurrency or s.rates):
        raise MacprofError(f"{where}: phase 'concurrency' needs levels (--concurrency 1,2,4,8 or --rate R)")
    refusal = draft_room_refusal(s.gen_tokens, s.draft_tokens) if "speculative" in s.phases else None
    if refusal:
        raise MacprofError(f"{where}: {refusal}")
    if isinstance(s.distributed, dict):
        return replace(s, distributed=_finish_distributed(where, s.distributed))
    return s


def draft_room(gen_tokens: int) -> int:
    """The most tokens a speculative round drafts in a request of ``gen_tokens``: the first token
    is the prefill's and every round ends with the target's own (measure/speculative.py
    draft_budget), so a round drafts at most gen_tokens - 2."""
    return max(0, gen_tokens - 2)


def draft_room_refusal(gen_tokens: int, ks, gen: str = "gen_tokens", k: str = "draft_tokens") -> str | None:
    """Why a draft length of ``ks`` cannot run in a request of ``gen_tokens``, or None (``gen``
    and ``k`` name the two as the user gave them): a k past what a round can draft would be
    labelled, predicted and sized for while no round drafted it (k100000 measured at k7)."""
    room = draft_room(gen_tokens)
    over = [x for x in ks if x > room]
    if not over:
        return None
    if room == 0:
        return f"{gen} {gen_tokens} leaves no token to draft (a speculative round drafts at most {gen} - 2): give " \
               f"{gen} of at least 3"
    return (f"{k} {over[0]} is more than a round can draft with {gen} {gen_tokens} (at most {gen} - 2 = {room}: the "
            f"first token is the prefill's, every round ends with the target's own): give {k} of at most {room}, or "
            f"more {gen}")


def following_prefix(prompt_tokens: int) -> int:
    """The shared prefix of a prompt this long when no prefix_tokens is set: the defaults' share
    (448 of 512), at least one token, and one token short of the prompt at most."""
    share = prompt_tokens * Settings.prefix_tokens // Settings.prompt_tokens
    return max(1, min(share, prompt_tokens - 1))


def merge(base: Settings, *layers: dict) -> Settings:
    values: dict[str, Any] = {"distributed": base.distributed.to_dict()} if base.distributed else {}
    for layer in layers:
        # a distributed table merges key by key: --parallel pipeline keeps models.toml's hosts
        table = {**values.get("distributed", {}), **(layer.get("distributed") or {})}
        values.update({k: v for k, v in layer.items() if v is not None})
        if table:
            values["distributed"] = table
    merged = replace(base, **values)
    # a prefix no layer sets follows the prompt (--prompt-tokens 128 alone: 112, not the default
    # 448 that would not fit); one set anywhere stays as set, and check_settings judges it. So
    # does a base's prefix that is not its prompt's share (a resumed run's recorded settings)
    if "prefix_tokens" not in values and base.prefix_tokens == following_prefix(base.prompt_tokens):
        merged = replace(merged, prefix_tokens=following_prefix(merged.prompt_tokens))
    return merged


def resolve_path(raw: str, config_path: Path) -> tuple[Path, str | None]:
    if raw.startswith("demo:"):
        from macprof.demo.build import SPECS, VARIANTS, default_dir

        ref = raw[len("demo:"):]
        size, _, variant = ref.partition("/")
        for suffix, _, rel, _ in VARIANTS:
            if size in SPECS and suffix == variant:
                return default_dir() / rel.format(size=size), ref
        raise ValueError(f"unknown demo model {ref!r} (sizes: {', '.join(SPECS)}; "
                         f"variants: {', '.join(v[0] for v in VARIANTS)})")
    p = Path(raw).expanduser()
    return (p if p.is_absolute() else (config_path.parent / p)), None


MAX_CONFIG_BYTES = 1 << 20  # a models.toml of a hundred models is a few tens of KB


def _read_toml(path: Path) -> dict:
    from macprof.files import filekind

    try:  # the one reader: a FIFO or a device in its place is refused, never read for ever
        return tomllib.loads(filekind.read_text(path, MAX_CONFIG_BYTES, "a models.toml file"))
    except FileNotFoundError:
        raise MacprofError(f"{path}: no such file (give one with --config, or run `macprof demo`)") from None
    except PermissionError:
        raise MacprofError(f"{path}: permission denied") from None
    except OSError as exc:
        raise MacprofError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise MacprofError(f"{path}: invalid TOML: {exc}") from None


def _top_level(path: Path, data: dict, overrides: dict | None) -> tuple[dict, dict]:
    """The file's [settings] and the command line's, each checked."""
    unknown = set(data) - {"settings", "models"}
    if unknown:
        raise MacprofError(f"{path}: unknown top-level key '{sorted(unknown)[0]}' (expected [settings] and [[models]])")
    settings_table = data.get("settings", {})
    if not isinstance(settings_table, dict):
        raise MacprofError(f"{path}: 'settings' must be a table")
    file_settings = _settings_from(f"{path}: [settings]", settings_table)
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key, value in cli.items():
        check_value("command line", key, value)
    return file_settings, cli


def settings_for(path: Path | None, overrides: dict | None = None) -> Settings:
    """The settings of models named on the command line: built-in defaults < the [settings]
    of ``path`` (its [[models]] are not read) < the command line."""
    data = _read_toml(Path(path)) if path is not None else {}
    file_settings, cli = _top_level(Path(path or "command line"), data, overrides)
    return check_settings(str(path or "command line"), merge(Settings(), file_settings, cli))


def load(path: Path | str, overrides: dict | None = None, check_engines: bool = True) -> Config:
    """Parse models.toml. ``overrides`` are command-line settings (None = not given)."""
    path = Path(path)
    data = _read_toml(path)
    file_settings, cli = _top_level(path, data, overrides)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise MacprofError(f"{path}: no models: add at least one [[models]] table")
    models: list[ModelSpec] = []
    seen_names: dict[str, int] = {}
    seen_paths: dict[tuple[str, Path, str], str] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: models[{i}]"
        if not isinstance(entry, dict):
            raise MacprofError(f"{where}: must be a table ([[models]])")
        if isinstance(entry.get("name"), str):
            where = f'{path}: models[{i}] ("{entry["name"]}")'
        if entry.get("engine") == "openai":
            models.append(endpoint_spec(where, entry, path, merge(Settings(), file_settings, *_entry_settings(where, entry), cli)))
            continue
        _check_entry_keys(where, entry)
        name, engine = entry["name"], entry["engine"]
        if name in seen_names:
            raise MacprofError(f"{where}: duplicate name '{name}' (also models[{seen_names[name]}])")
        seen_names[name] = i
        model_path, demo = checked_path(where, entry, path, check_engines)
        key = (engine, model_path.resolve(), repr(entry.get("distributed")))  # sharded and whole: two models
        if key in seen_paths:
            raise MacprofError(f"{where}: key 'path': the same model is already listed as '{seen_paths[key]}'")
        seen_paths[key] = name
        settings = check_settings(where, merge(Settings(), file_settings, *_entry_settings(where, entry), cli))
        if settings.distributed is not None and engine != "mlx":
            raise MacprofError(f"{where}: key 'distributed': only engine \"mlx\" shards over MLX's distributed runtime")
        models.append(ModelSpec(name, engine, model_path, entry.get("quant"), settings, demo, config=path.resolve()))
    return Config(path, tuple(models))


def _check_entry_keys(where: str, entry: dict) -> None:
    for key in entry:
        if key not in _MODEL_KEYS:
            raise MacprofError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(_MODEL_KEYS))})")
    for key in ("name", "engine", "path"):
        if key not in entry:
            raise MacprofError(f"{where}: missing key '{key}'")
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise MacprofError(f"{where}: key '{key}' must be a non-empty string, not {entry[key]!r}")
    if "quant" in entry and not isinstance(entry["quant"], str):
        raise MacprofError(f"{where}: key 'quant' must be a string, not {entry['quant']!r}")


def checked_path(where: str, entry: dict, config_path: Path, check_engines: bool) -> tuple[Path, str | None]:
    """The entry's engine is known (and installed) and its path fits its format: a .gguf file
    (llama.cpp, fake), a model directory (mlx). Returns the path and the demo reference, if any."""
    from macprof import engines

    engine = entry["engine"]
    if engine not in engines.names():
        raise MacprofError(f"{where}: key 'engine': unknown engine {engine!r} (choose {' or '.join(engines.names())})")
    if check_engines and not engines.is_installed(engine):
        raise MacprofError(f"{where}: key 'engine': {engine!r} is not installed: pip install {engines.ENGINES[engine][2]}")
    try:
        model_path, demo = resolve_path(entry["path"], config_path)
    except ValueError as exc:
        raise MacprofError(f"{where}: key 'path': {exc}") from None
    if demo is None and not model_path.exists():
        raise MacprofError(f"{where}: key 'path': {model_path} does not exist")
    if demo is None and engines.MODEL_FORMAT[engine] == "gguf" and model_path.is_dir():
        raise MacprofError(f"{where}: key 'path': {model_path} is a directory; {engine} needs a .gguf file")
    if demo is None:
        _check_file_kinds(where, model_path)
    if demo is None and engines.MODEL_FORMAT[engine] == "mlx" and not model_path.is_dir():
        raise MacprofError(f"{where}: key 'path': {model_path} is a file; {engine} needs a model directory "
                           f"(config.json + *.safetensors)")
    return model_path, demo


def _check_file_kinds(where: str, model_path: Path) -> None:
    """Regular files only: open() on a FIFO blocks, /dev/zero hashes forever, a socket cannot
    be read. An MLX directory's entries are checked one by one."""
    from macprof.files import filekind

    try:
        filekind.model_files(model_path)
    except MacprofError as exc:
        raise MacprofError(f"{where}: key 'path': {exc}") from None
    except OSError as exc:
        raise MacprofError(f"{where}: key 'path': {exc.filename or model_path}: {exc.strerror}") from None


def _entry_settings(where: str, entry: dict) -> tuple[dict, dict]:
    """The entry's own settings, and those of its table for this platform ([models.linux]...)."""
    model_settings = _settings_from(where, {k: v for k, v in entry.items() if k in TOML_KEYS})
    platform_settings: dict = {}
    for pk in PLATFORM_KEYS.values():
        if pk in entry:
            if not isinstance(entry[pk], dict):
                raise MacprofError(f"{where}: key '{pk}' must be a table of settings")
            table = _settings_from(f"{where}.{pk}", entry[pk])
            if pk == PLATFORM_KEYS.get(sys.platform):
                platform_settings = table
    return model_settings, platform_settings


def settings_dict(s: Settings) -> dict:
    out = {f.name: (list(getattr(s, f.name)) if f.name in TUPLE_KEYS else getattr(s, f.name)) for f in fields(s)}
    if s.distributed is None:  # a one-machine model's settings keep the layout they always had
        del out["distributed"]
    else:
        out["distributed"] = s.distributed.to_dict()
    return out


def settings_from_dict(d: dict) -> Settings:
    """The inverse of settings_dict (a worker's job, a log's settings)."""
    known = {f.name for f in fields(Settings)}
    values: dict[str, Any] = {k: tuple(v) if k in TUPLE_KEYS else v for k, v in d.items() if k in known}
    if values.get("distributed") is not None:
        values["distributed"] = _finish_distributed("settings", values["distributed"])
    return Settings(**values)


def endpoint_spec(where: str, entry: dict, config_path: Path, settings: Settings) -> ModelSpec:
    """A models.toml entry with engine "openai": name, url, model; optional api and path."""
    from macprof.engines import APIS

    for key in entry:
        if key not in _MODEL_KEYS:
            raise MacprofError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(_MODEL_KEYS))})")
    for key in ("name", "url", "model"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise MacprofError(f"{where}: key '{key}' must be a non-empty string (engine openai needs name, url, model)")
    if not entry["url"].startswith("http://"):
        raise MacprofError(f"{where}: key 'url': {entry['url']!r} is not an http:// URL of a local server")
    api = entry.get("api", "completions")
    if api not in APIS:
        raise MacprofError(f"{where}: key 'api' must be one of {', '.join(APIS)}, not {api!r}")
    file = None
    if "path" in entry:
        file, _ = resolve_path(str(entry["path"]), config_path)
        if not file.exists():
            raise MacprofError(f"{where}: key 'path': {file} does not exist")
    endpoint = Endpoint(entry["url"], entry["model"], api, file)
    return ModelSpec(entry["name"], "openai", file or endpoint.named_path, entry.get("quant"),
                     check_settings(where, settings), endpoint=endpoint, config=config_path.resolve())
