"""Command-line values that need parsing beyond click's types (integer lists, numbers with a
suffix: 8B, 1.5M), and the click options of `macprof run`, made from the declarations of
macprof/config/settings.py: each setting's flags and the run options, nothing written here."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import click

from macprof.config import settings as spec


def csv_ints(ctx, param, value):
    if value is None:
        return None
    try:
        out = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected an integer, got {value!r}") from None
    return out


def csv_rates(ctx, param, value):
    if value is None:
        return None
    try:
        return [float(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected requests per second such as 0.5 or 2,4, got {value!r}") from None


def number(ctx, param, value):
    """Accepts 8e9, 8000000000, 8B, 70b, 1.5M, 500k."""
    if value is None:
        return None
    text = str(value).strip().replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}.get(text[-1:].lower(), 1)
    try:
        return float(text[:-1] if mult != 1 else text) * mult
    except ValueError:
        raise click.BadParameter(f"expected a number such as 8e9 or 8B, got {value!r}") from None


def _click_kwargs(flag: spec.Flag, help: str, choices: tuple[str, ...]) -> dict[str, Any]:
    """How click reads a flag of this kind (config/settings.py Flag)."""
    kind = flag.kind
    kwargs: dict[str, Any] = {"help": help}
    if kind == "int":
        kwargs["type"] = int
    elif kind == "float":
        kwargs["type"] = float
    elif kind == "ints":
        kwargs["callback"] = csv_ints
    elif kind == "rates":
        kwargs["callback"] = csv_rates
    elif kind == "choice":
        kwargs["type"] = click.Choice(list(choices))
    elif kind == "file":
        kwargs["type"] = click.Path(path_type=Path, exists=True, dir_okay=False)
    elif kind == "path":
        kwargs["type"] = click.Path(path_type=Path)
    elif kind == "switch":
        kwargs["default"] = None  # not given: None, so models.toml's value stands
    elif kind == "flag":
        kwargs["is_flag"] = True
    elif kind == "pair":
        kwargs["nargs"] = 2
    elif kind == "many":
        kwargs["multiple"] = True
    if flag.default is not None:
        kwargs["default"] = flag.default
    if flag.show_default:
        kwargs["show_default"] = True
    if flag.metavar:
        kwargs["metavar"] = flag.metavar
    return kwargs


def run_options(f: Callable) -> Callable:
    """Every option of `macprof run`, from the declarations. The command is called with
    ``args`` (RunArgs), ``server`` (ServerArgs) and ``given`` (the settings the command line
    sets, None where not given) instead of the options' values; an option of the command that
    no declaration claims stops the command (config/settings.py run_groups) rather than being
    passed on as something it is not."""
    flags = spec.run_flags()
    declared = {param for param, _, _, _ in flags}

    @functools.wraps(f)
    def command(**params: Any) -> Any:
        options = {p.name for p in click.get_current_context().command.params if isinstance(p, click.Option)}
        values = {name: params.pop(name) for name in options | declared if name in params}
        args, server, given = spec.run_groups(values)
        return f(**params, args=args, server=server, given=given)

    for param, flag, help, choices in reversed(flags):
        command = click.option(flag.decl, param, **_click_kwargs(flag, help, choices))(command)
    return command
