"""The type checker's view of the log's settings (model/log.py ModelSettings). That record is
made from the declarations at import (config/settings.py), which mypy cannot follow: without a
stub every ``m.settings.X`` would be Any, unchecked. logged_settings.pyi beside this file is the
stub, generated here from the record as it is made (its fields, in their order, typed as the log
holds them), so it says nothing the declarations do not; tests/test_model_schema.py fails when it
differs from what ``text()`` gives. Regenerate it with ``python -m macprof.model.settings_stub``."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("logged_settings.pyi")


def _written(hint: Any, imports: set[tuple[str, str]]) -> str:
    """``hint`` as Python source, each class it names outside the builtins added to ``imports``."""
    if hint is type(None):
        return "None"
    if hint is Ellipsis:
        return "..."
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_written(a, imports) for a in args)
    if origin in (tuple, list, dict):
        return f"{origin.__name__}[{', '.join(_written(a, imports) for a in args)}]"
    if origin is not None or not isinstance(hint, type):  # Literal, Annotated ...: teach this function first
        raise TypeError(f"settings_stub: cannot write the type {hint!r}")
    if hint.__module__ != "builtins":
        imports.add((hint.__module__, hint.__name__))
    return hint.__name__


def text() -> str:
    from macprof.model.log import ModelSettings
    from macprof.model.records import record_fields

    hints = typing.get_type_hints(ModelSettings)
    imports: set[tuple[str, str]] = set()
    fields = [f"    {f.name}: {_written(hints[f.name], imports)} = ...\n" for f in record_fields(ModelSettings)]
    lines = [f"from {module} import {name}\n" for module, name in sorted(imports)]
    return ("# Generated from the settings' declarations (macprof/config/settings.py) by\n"
            "# `python -m macprof.model.settings_stub`: do not edit. What mypy sees of model/log.py ModelSettings.\n"
            + "".join(lines) + "from macprof.model.log import _LoggedSettings\n\n\n"
            "class ModelSettings(_LoggedSettings):\n" + "".join(fields))


def write(path: Path = FILE) -> Path:
    path.write_text(text(), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"wrote {write()}")
