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
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Self, dataclass_transform

from macprof.errors import MacprofError


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


# Typed as Any so that it can be the default of a field of any type; read back, it is None.
ABSENT: Any = _Absent()

def _plain(hint: Any) -> Any:
    """``X | None`` -> X (a record field is nullable where the schema says so; the codec reads
    null as None whatever the type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None)]
        return arms[0] if len(arms) == 1 else hint
    return hint


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(cls: type) -> Any:
    """A Record subclass as ``@dataclass(frozen=True, kw_only=True)`` makes it, for readers and
    type checkers (the fields, ``dataclasses.fields``/``replace``, keyword-only construction,
    immutability, equality over the fields), with no method generated per class: ``__init__``,
    ``__setattr__``, ``__eq__``, ``__hash__`` and ``__repr__`` are Record's, written once over the
    fields. A generated method is Python source compiled at import, six per class for some 130
    records: most of the 140 ms that every macprof process, each run's workers included, spent
    importing its data model."""
    return dataclass(init=False, repr=False, eq=False, kw_only=True)(cls)


@record
class Record:
    """Base of every record. ``_absent`` names the keys this record lacks (see ABSENT); it is
    carried over by ``dataclasses.replace``, so use ``record.replace`` to give such a key a value.
    Construction, immutability, equality, hashing and repr are a frozen dataclass's: keyword
    arguments with the fields' defaults, FrozenInstanceError on assignment, equal only to a record
    of the very same class, over the fields with compare (repr) set."""

    _absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __init__(self, **values: Any) -> None:
        for name, default, factory in _shape(type(self)).init:
            if name in values:
                value = values.pop(name)
            elif default is not dataclasses.MISSING:
                value = default
            elif factory is not dataclasses.MISSING:
                value = factory()
            else:
                raise TypeError(f"{type(self).__qualname__}() missing required keyword argument: {name!r}")
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {next(iter(values))!r}")
        self.__post_init__()

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

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
        shape = _shape(type(self))
        absent = set()
        for name in shape.names:
            value = getattr(self, name)
            if value is ABSENT or (value is None and name in self._absent):
                absent.add(name)
                object.__setattr__(self, name, None)
            elif isinstance(value, list) and name in shape.tuples:
                object.__setattr__(self, name, tuple(value))  # frozen all the way down the sequence
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
        absent = self._absent
        return {name: encode(getattr(self, name)) for name in _shape(type(self)).names if name not in absent}


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


# What a JSON value read from a file may be before any record is made of it. A run log nests
# about 11 deep (tiny-sweeps.json); 64 leaves room for what free-form fields hold, and keeps
# every recursive walk after it (the schema, the codec, `share`, deepcopy) far from Python's
# recursion limit: a log nested 600 deep ended `share` in a RecursionError. No figure macprof
# records needs more than 64 bits (nanosecond stamps, bytes); 10^300 ended `plot` in an
# OverflowError.
MAX_DEPTH = 64
MAX_INT_BITS = 63


def json_refusal(data: Any) -> str | None:
    """Why ``data`` (JSON as read) is no record's, as 'PLACE: what', or None: arrays and
    objects nested past MAX_DEPTH, an integer past 64 bits. Iterative, so a value nested
    deeper than Python's recursion limit is refused rather than raising."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "")]
    while stack:
        value, depth, at = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"{_place(at)}: nested more than {MAX_DEPTH} deep"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, v in items:
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1, f"{at}/{key}"))
                elif type(v) is int and v.bit_length() > MAX_INT_BITS:  # never str() it: 5,000 digits raise
                    return f"{_place(f'{at}/{key}')}: an integer of {v.bit_length()} bits (at most {MAX_INT_BITS} and a sign)"
        elif type(value) is int and value.bit_length() > MAX_INT_BITS:
            return f"{_place(at)}: an integer of {value.bit_length()} bits (at most {MAX_INT_BITS} and a sign)"
    return None


def _place(at: str, limit: int = 100) -> str:
    """A place in a JSON value for a one-line message: its start, where it is very long."""
    return (at[:limit] + "...") if len(at) > limit else at or "(top level)"


class _Misfit(Exception):
    def __init__(self, at: str, what: str) -> None:
        self.at, self.what = at, what


# A field's decoder: None keeps the JSON value as read; else a function of (value, place).
Decoder = Callable[[Any, str], Any] | None


class _Shape(NamedTuple):
    """What the codec needs of a record class, worked out once per class (from its fields and
    type hints) rather than per value: a log holds tens of thousands of values."""

    names: tuple[str, ...]  # the JSON keys, in field order
    tuples: frozenset[str]  # fields typed as tuples: a list given to them is made a tuple
    fields: tuple[tuple[str, bool, Decoder], ...]  # (name, required, decoder)
    init: tuple[tuple[str, Any, Any], ...]  # (name, default, default_factory), _absent included: Record.__init__'s


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _make_shape(cls)
    return shape


def _make_shape(cls: type) -> _Shape:
    hints = typing.get_type_hints(cls)
    keys = record_fields(cls)
    return _Shape(names=tuple(f.name for f in keys),
                  tuples=frozenset(f.name for f in keys if typing.get_origin(_plain(hints[f.name])) is tuple),
                  fields=tuple((f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                                _decoder(hints[f.name])) for f in keys),
                  init=tuple((f.name, f.default, f.default_factory) for f in fields(cls)))


def _decoder(hint: Any) -> Decoder:
    """How a value typed ``hint`` is read: records, and tuples and dicts of them, recursively;
    a number, string or flag checked to be one (a journal is not checked against the schema: a
    list where a timestamp belongs would reach the arithmetic as a TypeError); anything else
    (free-form values) as read. A null is None whatever the type."""
    hint = _plain(hint)
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        record_cls = hint  # looked up when a value is read: a record may contain its own kind
        return lambda value, at: _decode_record(record_cls, value, at)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return _sequence(_decoder(item), nullable=_plain(item) is not item)
    if origin is dict:
        return _mapping(_decoder(typing.get_args(hint)[1]))
    return _SCALARS.get(hint)


def _scalar(test: Callable[[Any], bool], what: str) -> Decoder:
    def read(value: Any, at: str) -> Any:
        if not test(value):
            raise _Misfit(at, f"expected {what}, found {_json_type(value)}")
        return value
    return read


def _json_type(value: Any) -> str:
    """A value's kind in JSON's words (a list, not a Python ``list``)."""
    for kind, name in ((bool, "true/false"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


# bool is an int to Python, never to JSON: true is no count and no timestamp
_TESTS: dict[Any, tuple[Callable[[Any], bool], str]] = {
    int: (lambda v: type(v) is int, "an integer"),
    float: (lambda v: type(v) in (int, float), "a number"),
    str: (lambda v: type(v) is str, "a string"),
    bool: (lambda v: type(v) is bool, "true or false"),
}
_SCALARS: dict[Any, Decoder] = {hint: _scalar(test, what) for hint, (test, what) in _TESTS.items()}
_SCALAR_ITEMS = {_SCALARS[hint]: test for hint, (test, _) in _TESTS.items()}  # decoder -> its test


def _sequence(item: Decoder, nullable: bool = False) -> Decoder:
    def read(value: Any, at: str) -> tuple:
        if not isinstance(value, list):
            raise _Misfit(at, f"expected an array, found {_json_type(value)}")
        if item is None:  # free-form items: a token list of thousands is copied, not walked
            return tuple(value)
        if item in _SCALAR_ITEMS:  # numbers: checked in one pass, each item named only when one is wrong
            test = _SCALAR_ITEMS[item]
            wrong = next((i for i, v in enumerate(value) if not test(v) and not (nullable and v is None)), None) \
                if not all(map(test, value)) else None
            if wrong is not None:
                item(value[wrong], f"{at}/{wrong}")
            return tuple(value)
        return tuple(None if v is None else item(v, f"{at}/{i}") for i, v in enumerate(value))
    return read


def _mapping(item: Decoder) -> Decoder:
    def read(value: Any, at: str) -> dict:
        if not isinstance(value, dict):
            raise _Misfit(at, f"expected an object, found {_json_type(value)}")
        if item is None:
            return dict(value)
        return {k: None if v is None else item(v, f"{at}/{k}") for k, v in value.items()}
    return read


def _decode_record(cls: type, data: Any, at: str):
    if not isinstance(data, dict):
        raise _Misfit(at, f"expected an object, found {_json_type(data)}")
    values = {}
    for name, required, decode in _shape(cls).fields:
        if name in data:
            value = data[name]
            values[name] = value if value is None or decode is None else decode(value, f"{at}/{name}" if at else name)
        elif required:
            raise _Misfit(at, f"no {name!r}")
    return cls(**values)
