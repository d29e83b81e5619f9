"""What each string field of the run log holds, by kind, so that `macprof share` removes what
identifies a person or a machine by what a value is, never by the name of its key ("source" is
a hardware table's name in one record and the path of the user's text in another).

Every field of every record the run log holds that can hold a string (a ``str``, a tuple of
them, a free-form dict or list) has its kind in its record's ``KINDS`` (the kinds: model/kind.py);
tests/test_share_kinds.py walks the records and fails on a field that has none, so a field
added later is classified before it can be shared, never kept by default.

A key that a record does not declare (a log of another version) is TEXT. Inside free-form
values, FREE_KEYS gives the kind of keys macprof itself writes there (a rank's ``host_id``).
"""

from __future__ import annotations

import functools
import typing
from typing import Any

from macprof.model.kind import HOST_ID, KINDS  # noqa: F401  # KINDS: the test of every field's kind reads it here
from macprof.model.log import RunLog
from macprof.model.records import Record, plain, record_fields

# keys macprof writes inside free-form values, and their kind (any other key's strings: TEXT)
FREE_KEYS = {"host_id": HOST_ID}  # GroupResult.ranks: each rank's machine facts


def _records_in(hint: Any) -> type | None:
    """The record class a field holds (itself, or in a tuple or a dict), or None."""
    hint = plain(hint)
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint
    if origin is tuple:
        return _records_in(typing.get_args(hint)[0])
    if origin is dict:
        return _records_in(typing.get_args(hint)[1])
    return None


class Field(typing.NamedTuple):
    kind: str | None  # None: a field of records, or one its record's KINDS does not declare
    record: type | None = None  # the record class it holds
    mapping: bool = False  # a dict of records (else one, or a tuple of them)


@functools.cache
def fields_of(cls: type) -> dict[str, Field]:
    """Per JSON key of ``cls``: its kind, or the record class it holds."""
    hints = typing.get_type_hints(cls)
    declared: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's fields after its bases'
        declared.update(vars(klass).get("KINDS", {}))
    out: dict[str, Field] = {}
    for f in record_fields(cls):
        inner = _records_in(hints[f.name])
        mapping = typing.get_origin(plain(hints[f.name])) is dict
        out[f.name] = Field(None, inner, mapping) if inner is not None else Field(declared.get(f.name))
    return out


def holds_text(hint: Any) -> bool:
    """Whether a field typed ``hint`` can hold a string: str, Any, or a container of either."""
    hint = plain(hint)
    if hint in (str, Any):
        return True
    if typing.get_origin(hint) is typing.Literal:  # a word of model/vocab.py
        return any(isinstance(a, str) for a in typing.get_args(hint))
    return any(holds_text(a) for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis)


def reachable(root: type = RunLog) -> list[type]:
    """Every record class a run log can hold, ``root`` first."""
    seen: list[type] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        todo += [f.record for f in fields_of(cls).values() if f.record is not None]
    return seen
