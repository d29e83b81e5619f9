"""An MLX model directory's config.json, read whole through the one capped reader
(files/filekind.py): a JSON object, or one line naming the file. Read by the model's inspection
(collect/modelinfo.py) and by a served model's local tokenizer (engines/local_tokenizer.py)."""

from __future__ import annotations

import json
from pathlib import Path

from macprof.errors import MacprofError
from macprof.files import filekind

MAX_CONFIG = 16 << 20  # a config.json is a few KB; anything this large is not one


def json_object(path: Path) -> dict:
    """A model directory's config.json: a JSON object, or one line."""
    try:
        cfg = json.loads(filekind.read_regular(path, MAX_CONFIG, "a config.json"))
    except (ValueError, RecursionError) as exc:
        raise MacprofError(f"{path}: invalid JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(cfg, dict):
        raise MacprofError(f"{path}: must be a JSON object, not {type(cfg).__name__}")
    return cfg
