"""The settings' types: what each key of models.toml's [settings] (and of a model's entry)
may hold, checked with one line naming the file, the entry and the key when it does not."""

from __future__ import annotations

from typing import Any

from macprof.config_dist import Distributed
from macprof.config_dist import partial as _distributed_table
from macprof.errors import MacprofError

PHASES = ("cold", "warm", "prefix", "grid", "depth", "batch", "quality", "concurrency")

_POSITIVE_INT = (int, lambda v: v > 0, "a positive integer")


def _int_list(minimum: int, what: str) -> tuple:
    return (list, lambda v: bool(v) and all(isinstance(x, int) and not isinstance(x, bool) and x >= minimum for x in v)
            and len(set(v)) == len(v), what)


def _shape_names() -> tuple[str, ...]:
    from macprof.cases import SHAPES

    return tuple(SHAPES)
SETTING_TYPES: dict[str, tuple] = {
    "phases": (list, lambda v: bool(v) and all(p in PHASES for p in v) and len(set(v)) == len(v),
               f"a non-empty list of distinct phases from {', '.join(PHASES)}"),
    "prompt_tokens": _POSITIVE_INT,
    "gen_tokens": _POSITIVE_INT,
    "prefix_tokens": _POSITIVE_INT,
    "reps": _POSITIVE_INT,
    "cold_trials": _POSITIVE_INT,
    "threads": _POSITIVE_INT,
    "timeout": ((int, float), lambda v: v > 0, "a positive number of seconds"),
    "delay": ((int, float), lambda v: v >= 0, "a number of seconds >= 0"),
    "drop_cache": (bool, lambda v: True, "true or false"),
    "force": (bool, lambda v: True, "true or false"),
    "prompt_grid": _int_list(1, "a non-empty list of distinct positive integers"),
    "gen_grid": _int_list(1, "a non-empty list of distinct positive integers"),
    "shapes": (list, lambda v: bool(v) and all(x in _shape_names() for x in v) and len(set(v)) == len(v),
               "a non-empty list of distinct shapes from rag, chat, code"),
    "depths": _int_list(0, "a non-empty list of distinct integers >= 0"),
    "batches": _int_list(1, "a non-empty list of distinct positive integers"),
    "kv_type": (str, lambda v: v in ("f16", "q8_0", "q4_0"), "one of f16, q8_0, q4_0"),
    "distributed": ((dict, Distributed), lambda v: True, "a table"),  # checked key by key in config_dist
    "quality_tokens": _POSITIVE_INT,
    "quality_ctx": (int, lambda v: v >= 4 and v % 2 == 0, "an even integer >= 4"),
    "reference": (str, lambda v: bool(v.strip()), "a model name"),
    "text": (str, lambda v: bool(v.strip()), "the path of a UTF-8 text file"),
    "concurrency": _int_list(1, "a non-empty list of distinct positive integers"),
    "rates": (list, lambda v: bool(v) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                                              for x in v), "a non-empty list of positive requests per second"),
    "load_requests": (int, lambda v: v >= 0, "an integer >= 0 (0: automatic)"),
    "load_seconds": ((int, float), lambda v: v > 0, "a positive number of seconds"),
    "slo_ttft": ((int, float), lambda v: v > 0, "a positive number of seconds"),
    "slo_itl": ((int, float), lambda v: v > 0, "a positive number of seconds"),
}
TUPLE_KEYS = {"phases", "prompt_grid", "gen_grid", "shapes", "depths", "batches", "concurrency", "rates"}


def check_value(where: str, key: str, value: Any) -> Any:
    types, check, what = SETTING_TYPES[key]
    if isinstance(value, bool) and types is not bool:
        ok = False
    else:
        ok = isinstance(value, types) and check(value)
    if not ok:
        raise MacprofError(f"{where}: key '{key}' must be {what}, not {value!r}")
    if key == "distributed":
        return _distributed_table(where, value)
    return tuple(value) if key in TUPLE_KEYS else value
