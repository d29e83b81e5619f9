"""Frozen records and their JSON, as pyperf's _bench.py is for pyperf: one generic codec driven
by the dataclass fields and their type hints, so the run log and the journal have one typed
vocabulary and nothing reads them through string paths.

- A field typed as a record, a tuple of records or a dict of records is read recursively;
  anything else (numbers, strings, free-form dicts such as an engine's memory figures or the
  model's metadata) is kept as read. The JSON Schema, checked before a log is read, decides
  what a value may be; the codec only refuses a value of the wrong kind for a record.
- Some keys are written only sometimes (a field of another phase, a log of an older version,
  a journal event before the orchestrator adds the model). Their default is ``ABSENT``: the
  attribute reads None, like a null, but the key stays absent when the record is written back,
  so a log or a journal line reads and writes to the same JSON.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Self, dataclass_transform

from macprof.errors import MacprofError


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


# Typed as Any so that it can be the default of a field of any type; read back, it is None.
ABSENT: Any = _Absent()

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _plain(hint: Any) -> Any:
    """``X | None`` -> X (a record field is nullable where the schema says so; the codec reads
    null as None whatever the type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return arms[0] if len(arms) == 1 else hint
    return hint


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(cls: type) -> Any:
    """``@dataclass(frozen=True, kw_only=True)`` for a Record subclass, whose ``__eq__``,
    ``__hash__`` and ``__repr__`` are Record's, written once over the fields, instead of three
    methods generated (compiled) per class: with some 130 records, that is 40 ms of every macprof
    process's start-up, the run's workers included."""
    return dataclass(frozen=True, kw_only=True, eq=False, repr=False)(cls)


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Record:
    """Base of every record. ``_absent`` names the keys this record lacks (see ABSENT); it is
    carried over by ``dataclasses.replace``, so use ``record.replace`` to give such a key a value.
    Equality, hashing and repr are a dataclass's: over the fields with compare (repr) set, and
    equal only to a record of the very same class."""

    _absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]  # the same class

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        absent = set()
        for f in fields(self):
            value = getattr(self, f.name)
            if value is ABSENT or (value is None and f.name in self._absent):
                absent.add(f.name)
                object.__setattr__(self, f.name, None)
            elif isinstance(value, list) and typing.get_origin(_plain(hints[f.name])) is tuple:
                object.__setattr__(self, f.name, tuple(value))  # frozen all the way down the sequence
        object.__setattr__(self, "_absent", frozenset(absent))

    def has(self, name: str) -> bool:
        """Whether the key ``name`` is there (a null is there; an absent key is not)."""
        return name not in self._absent

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``; a key this record lacked is present in the copy."""
        new = dataclasses.replace(self, **changes)
        object.__setattr__(new, "_absent", new._absent - changes.keys())
        return new

    @classmethod
    def from_json(cls, data: Any, where: str | None = None) -> Self:
        """The record of ``data``; a value of the wrong kind or a missing key raises
        MacprofError naming ``where`` (the file, say) and the place in it."""
        try:
            return _decode_record(cls, data, "")
        except _Misfit as exc:
            raise MacprofError(f"{where or cls.__name__}: {exc.at or '(top level)'}: {exc.what}") from None

    def to_json(self) -> dict:
        return {f.name: encode(getattr(self, f.name)) for f in fields(self)
                if f.name != "_absent" and f.name not in self._absent}


def record_fields(cls: type) -> list[dataclasses.Field]:
    """The fields that are JSON keys (not the bookkeeping of absent keys)."""
    return [f for f in fields(cls) if f.name != "_absent"]


def encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


class _Misfit(Exception):
    def __init__(self, at: str, what: str) -> None:
        self.at, self.what = at, what


def _decode_record(cls: type, data: Any, at: str):
    if not isinstance(data, dict):
        raise _Misfit(at, f"expected an object, found {type(data).__name__}")
    hints = _hints(cls)
    values = {}
    for f in record_fields(cls):
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{at}/{f.name}" if at else f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _Misfit(at, f"no {f.name!r}")
    return cls(**values)


def _decode(hint: Any, value: Any, at: str) -> Any:
    """``value`` read from JSON as ``hint``: records, tuples and dicts of records recursively."""
    if value is None:
        return None
    hint = _plain(hint)
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        return _decode_record(hint, value, at)
    if origin is tuple:
        if not isinstance(value, list):
            raise _Misfit(at, f"expected an array, found {type(value).__name__}")
        item = typing.get_args(hint)[0]
        return tuple(_decode(item, v, f"{at}/{i}") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _Misfit(at, f"expected an object, found {type(value).__name__}")
        item = typing.get_args(hint)[1]
        return {k: _decode(item, v, f"{at}/{k}") for k, v in value.items()}
    return value
