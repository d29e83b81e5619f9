"""Command-line values that need parsing beyond click's types (integer lists, numbers with a
suffix: 8B, 1.5M), and the click options made from the declarations of
macprof/config/settings.py: every option of `macprof run` (each setting's flags and the run
options, nothing written here), and another command's option that sets what a declaration
declares (``declared_option``: `overhead`'s, `estimate`'s and `inspect`'s)."""

from __future__ import annotations

import dataclasses
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


class DeclaredOption(click.Option):
    """A command's option made from a declaration by ``declared_option``: what it is made from,
    what it overrides and why (tests/test_declared_once.py reads them)."""

    def __init__(self, *args: Any, declared: str, overrides: tuple[str, ...], why: str | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.declared, self.overrides, self.why = declared, overrides, why


def declared_option(name: str, decl: str | None = None, dest: str | None = None, why: str | None = None,
                    **override: Any) -> Callable[[Callable], Callable]:
    """The click option of a command other than `run` that sets what the setting (or the run
    option) ``name`` declares: its flag (``decl``, where the setting has several), help,
    choices and default as declared, an integer or a number bounded as its check bounds it
    (click says the range). What the command reads otherwise is an ``override`` of the flag's
    fields (kind, help, default, choices, show_default, metavar), with ``why``: a difference is
    explicit and says its reason where the command is declared. ``dest``: the parameter's name
    in that command [the flag's]."""
    if override and not why:
        raise TypeError(f"declared_option({name!r}): an override needs its reason (why=)")
    overrides = tuple(sorted(override))
    if name in spec.SPECS:
        s = spec.SPECS[name]
        flag = next(f for f in s.flags if decl is None or f.name == decl)
        param, check = flag.param, s.check
        help, choices, default = spec.flag_help(s, flag), spec.flag_choices(s, flag), spec.DEFAULTS[name]
    else:  # a run option: its field's name is its parameter's, as in `run`
        flag = next(f.metadata["flag"] for cls in (spec.RunArgs, spec.ServerArgs) for f in dataclasses.fields(cls)
                    if f.name == name)
        param, check, help, choices, default = name, None, flag.help or "", flag.choices, flag.default
    if "help" in override:
        override["help"] = override["help"].format(**spec.HELP_FIELDS)
    # a list setting read here as one value (kind="int") defaults to the setting's own default
    kind = override.get("kind", flag.kind)
    flag = dataclasses.replace(flag, **{"help": help, "choices": choices,
                                        "default": default if kind not in _LISTS else None, **override})
    kwargs = _click_kwargs(flag, flag.help or "", flag.choices)
    bounded = _bounded(flag.kind, check)
    if bounded is not None:
        kwargs["type"] = bounded
    return click.option(flag.decl, dest or param, cls=DeclaredOption, declared=name, overrides=overrides, why=why,
                        **kwargs)


_LISTS = ("ints", "rates", "many")  # kinds whose click value is a list, not the setting's default tuple


def _bounded(kind: str, check: spec.Check | None) -> click.ParamType | None:
    """click's type for one integer or number within the check's range (of a list's items,
    where the setting is a list read here as one value), or None."""
    if check is None or kind not in ("int", "float"):
        return None
    node = check.schema.get("items", check.schema)
    low = node.get("minimum", node.get("exclusiveMinimum"))
    if kind == "int" and node.get("type") == "integer":
        return click.IntRange(low, node.get("maximum"))
    if kind == "float" and node.get("type") == "number":
        return click.FloatRange(low, node.get("maximum"), min_open="exclusiveMinimum" in node)
    return None
