"""An engine setting as it ran: what macprof asked the engine for and what the engine resolved it
to (llama.cpp's context after creation, mlx-lm's cache and stream), each with where the value came
from, or why it is unknown. The engines build these at load (engines/llama_cpp.py,
engines/mlx.py); the worker journals them with its ``loaded`` event; the run log keeps them per
model (``ModelResult.engine_settings``), and `compare` flags rows whose resolved values differ.

A value is a word, a count or a flag, as the engine names it: ``flash_attn`` "enabled" or
"disabled", ``type_k`` "f16", ``n_threads`` 8. ``asked`` is None where macprof asked nothing and
left the engine its own default (said in ``source``)."""

from __future__ import annotations

from macprof.model.kind import OWN, VOCAB
from macprof.model.records import Record

Value = str | int | float | bool | None


class Resolved(Record):
    """One setting: asked, as the engine resolved it (None: unknown, ``unknown`` says why), and
    the call or log line the resolved value was read from."""

    KINDS = {"asked": VOCAB, "value": VOCAB, "source": OWN, "unknown": OWN}

    asked: Value = None
    value: Value = None
    source: str | None = None
    unknown: str | None = None


def known(settings: dict[str, Resolved] | None) -> dict[str, Value]:
    """The settings whose resolved value is known, name -> value (what `compare` holds two rows to)."""
    return {name: r.value for name, r in (settings or {}).items() if r.value is not None}


def as_passed(value: Value, source: str) -> Resolved:
    """A setting the engine takes as given and does not report back: its value is what was passed."""
    return Resolved(asked=value, value=value, source=source)


def word(value: Value) -> str:
    """A resolved value as the tables say it: a flag on/off, anything else as it is."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)
