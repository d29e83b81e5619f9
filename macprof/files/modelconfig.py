"""An MLX model directory's JSON files, read whole through the one capped reader
(files/filekind.py): a JSON value, or one line naming the file. config.json is read by the model's
inspection (collect/modelinfo.py) and a served model's local tokenizer (engines/local_tokenizer.py);
tokenizer_config.json by engines/mlx.py for the model's chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from macprof.errors import MacprofError
from macprof.files import filekind

# a model directory's JSON file (config.json a few KB, tokenizer_config.json up to a few MB with its
# added tokens): anything this large is not one
MAX_CONFIG = 16 << 20


def json_value(path: Path, raw: str | bytes) -> Any:
    """``raw``, the file at ``path`` as read, parsed as JSON, or one line naming the file."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise MacprofError(f"{path}: invalid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None


def json_object(path: Path) -> dict:
    """A model directory's config.json: a JSON object, or one line."""
    cfg = json_value(path, filekind.read_regular(path, MAX_CONFIG, "a config.json"))
    if not isinstance(cfg, dict):
        raise MacprofError(f"{path}: must be a JSON object, not {type(cfg).__name__}")
    return cfg
