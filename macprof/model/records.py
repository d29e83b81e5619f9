"""Frozen records and their JSON: msgspec Structs (frozen, keyword-only), so the run log and the
journal have one typed vocabulary, nothing reads them through string paths, and one library
(C, well kept) decodes, checks and encodes them; the JSON Schema is generated from these types
(macprof/store/schema).

- A record is a subclass of ``Record``: fields as annotations, defaults as values, no decorator.
  Decoding checks every value against its type (a string where a count belongs, a negative
  count, an unknown phase), so the types are the log's schema.
- Some keys are written only sometimes (a field of another phase, a log of an older version,
  a journal event before the orchestrator adds the model). Their default is ``ABSENT``
  (msgspec.UNSET): the attribute reads None, like a null, but the key stays absent when the
  record is written back (msgspec omits UNSET), so a log or a journal line reads and writes to
  the same JSON. ``has(name)`` tells an absent key from a null.
- ``REQUIRED_KEYS`` names the keys every file has that code may leave to their defaults: the
  schema requires them (a field without a default is required anyway).
- ``KINDS`` gives the kind of each string field (model/kind.py), what `macprof share` removes.
- A figure that may be fractional is ``Number`` (int | float), not float: msgspec would read
  512 as 512.0 and write it back so; the log keeps what was measured, as it was written.
- An event (model/event_base.py) is one arm of a tagged union on the ``"event"`` key, its tag
  the class's ``KIND``.
- An event that journals a record (a task attempt, a request, a chunk scored) declares it as a
  base, ``Journals[TheRecord]``: its fields are the record's, copied when the class is made
  (their types, constraints and defaults), so the two cannot drift. The record's ``BUILT``
  fields (what its builder computes from the journal) are not journaled; a field the event
  declares itself is its own (another key, or the same key typed otherwise), its ``REQUIRED``
  are the record's fields a journal line must have (the record gives them defaults for code) and
  its ``DEFAULTS`` what a line lacking a field holds where that is not the record's default.
"""

from __future__ import annotations

import functools
import numbers
import re
import typing
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar, dataclass_transform

import msgspec
from msgspec import UNSET, Meta, UnsetType

from macprof.errors import MacprofError
from macprof.sanitise import clean

# Typed as Any so that it can be the default of a field of any type; read back, it is None.
ABSENT: Any = UNSET
Number = int | float  # a figure: 512 stays 512, 0.5 stays 0.5
Count = Annotated[int, Meta(ge=0)]  # tokens, bytes, requests: never negative
Positive = Annotated[int, Meta(ge=1)]  # a batch, a draft length, an attempt's number
NonNegative = Annotated[int, Meta(ge=0)] | Annotated[float, Meta(ge=0)]  # a temperature
Sha256 = Annotated[str, Meta(pattern="^[0-9a-f]{64}$")]


class _Absentable:
    """A field whose key may be absent, as Python reads it: ABSENT reads None. msgspec itself
    (decode, encode, replace, equality, repr) reads the slot beneath, so the key stays absent."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        value = self.slot.__get__(obj, owner)
        return None if value is UNSET else value


class _RecordMeta(msgspec.StructMeta):
    """Every record keyword-only (msgspec's kw_only is per class, not inherited), every event
    tagged with its KIND, every field defaulting to ABSENT read as None: a record is declared as
    a plain class."""

    def __new__(mcls, name: str, bases: tuple, namespace: dict, **kwargs: Any) -> Any:
        kwargs.setdefault("kw_only", True)
        if "KIND" in namespace:
            kwargs.setdefault("tag", namespace["KIND"])
        source = next((typing.get_args(b)[0] for b in namespace.get("__orig_bases__", ())
                       if typing.get_origin(b) is Journals), None)
        if source is not None:
            namespace = _with_fields_of(source, bases, namespace)
        cls = super().__new__(mcls, name, bases, namespace, **kwargs)
        # the defaults are the last fields' (msgspec's layout); structs.fields would evaluate every
        # annotation, most of the data model's import time
        names, defaults = cls.__struct_fields__, cls.__struct_defaults__
        for name, default in zip(names[len(names) - len(defaults):], defaults):
            slot = cls.__dict__.get(name)  # a base's fields are wrapped in the base
            if default is UNSET and slot is not None and not isinstance(slot, _Absentable):
                type.__setattr__(cls, name, _Absentable(slot))
        return cls


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(msgspec.field,))
class Record(msgspec.Struct, metaclass=_RecordMeta, frozen=True):
    """Base of every record: keyword construction with the fields' defaults, immutability,
    equality over the fields (a record of the very same class; an absent key is not a null),
    repr (ABSENT shows as UNSET): msgspec's."""

    # Keys every log of this record has, though code may construct it without them (a default
    # for code, not for a file): the schema's "required" beside the fields that have no default.
    # A log lacking one is refused on load (store/runlog.py validates against the schema).
    REQUIRED_KEYS: ClassVar[tuple[str, ...]] = ()
    # What each string field of this record holds (model/kind.py), beside the fields, so that a
    # field and its kind are written together: `macprof share` removes by it (model/kinds.py),
    # and tests/test_share_kinds.py fails on a string field of the run log that has none.
    KINDS: ClassVar[dict[str, str]] = {}
    # The fields its builder computes (from the journal's other events or keys): an event that
    # journals this record (Journals) does not carry them.
    BUILT: ClassVar[tuple[str, ...]] = ()

    def has(self, name: str) -> bool:
        """Whether the key ``name`` is there (a null is there; an absent key is not)."""
        field = getattr(type(self), name, None)
        return not isinstance(field, _Absentable) or field.slot.__get__(self) is not UNSET

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``; a key this record lacked is present in the copy (ABSENT
        as a change makes it absent)."""
        return msgspec.structs.replace(self, **changes)

    @classmethod
    def from_json(cls, data: Any, where: str | None = None) -> Self:
        """The record of ``data`` (JSON as read); a value of the wrong type or a missing key
        raises MacprofError naming ``where`` (the file, say) and the place in it."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise MacprofError(f"{where or cls.__name__}: {misfit(exc)}") from None

    def to_json(self) -> dict:
        """The record as JSON values (lists, not the tuples it holds), as json.loads gives them."""
        return _DECODE(_ENCODE(self))


R = TypeVar("R", bound=Record)


class Journals(Generic[R]):
    """The base that makes an event (or any record) the journal's form of the record ``R``: the
    records' metaclass copies R's fields into the class (module docstring). The type checker
    does not see the copied fields: a writer makes the event with ``of``, a reader reads
    ``record()``, both typed by R."""

    __slots__ = ()
    FIELDS_OF: ClassVar[type]  # R, set when the class is made
    REQUIRED: ClassVar[tuple[str, ...]] = ()  # R's fields a journal line must have
    DEFAULTS: ClassVar[dict[str, Any]] = {}  # R's fields whose default in the journal is not R's

    @classmethod
    def of(cls, record: R, **own: Any) -> Self:
        """The event of ``record`` (its built fields left out), with the event's ``own`` fields."""
        return cls(**_present(record, _copied(cls)), **own)

    def record(self, **built: Any) -> R:
        """The record this event journals, its ``built`` fields given (the others at their defaults)."""
        made: R = type(self).FIELDS_OF(**_present(self, _copied(type(self))), **built)
        return made


def _present(struct: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``struct``'s fields of ``names`` that hold a value: an absent one is left to the other
    class's default (absent there too, or what a line lacking it holds)."""
    values = msgspec.structs.asdict(struct)
    return {name: values[name] for name in names if values[name] is not UNSET}


def derived_from(cls: type, name: str) -> type:
    """The class whose declaration gives ``cls`` its field ``name``: the base that declares it,
    or, for a field a Journals class copied, the record's own declaration of it."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):  # a Journals class's holds the fields it copied
            return derived_from(vars(klass)["FIELDS_OF"], name) if name in vars(klass).get("__struct_copied__", ()) else klass
    return cls


def _copied(cls: type) -> tuple[str, ...]:
    return next(vars(k)["__struct_copied__"] for k in cls.__mro__ if "__struct_copied__" in vars(k))


def _with_fields_of(source: type, bases: tuple, namespace: dict) -> dict:
    """``namespace`` with the fields of the record ``source`` declared ahead of its own: each
    with the record's type and default (none, where REQUIRED names it; the class's own, where
    DEFAULTS gives one), less the record's BUILT fields, those the class declares itself and
    those its bases declare (an event's model, worker, seq; its tag is ``event``). An annotation
    is copied as written, to be read in its own module when msgspec first needs it: evaluating
    them here would be most of the data model's import time."""
    own = namespace.get("__annotations__", {})
    inherited = {f for b in bases for f in getattr(b, "__struct_fields__", ())} | {"event"}
    required, defaults = namespace.get("REQUIRED", ()), namespace.get("DEFAULTS", {})
    built = getattr(source, "BUILT", ())
    names, values = getattr(source, "__struct_fields__"), getattr(source, "__struct_defaults__")  # a Struct's layout
    default_of = dict(zip(names[len(names) - len(values):], values))
    annotations: dict[str, Any] = {}
    fields = {}
    for name in names:
        if name in own or name in inherited or name in built:
            continue
        annotations[name] = _annotation(source, name)
        if name in required:
            continue
        if name in defaults:
            fields[name] = defaults[name]
        elif isinstance(default_of.get(name), msgspec._core.Factory):  # how a Struct keeps a default_factory
            fields[name] = msgspec.field(default_factory=default_of[name].factory)
        elif name in default_of:
            fields[name] = default_of[name]
    unknown = (set(required) | set(defaults)) - set(annotations)
    if unknown:
        raise TypeError(f"{namespace['__qualname__']}: REQUIRED or DEFAULTS name {sorted(unknown)}, no field it copies")
    return {**namespace, **fields, "__annotations__": {**annotations, **own}, "FIELDS_OF": source,
            "__struct_copied__": tuple(annotations)}


def _annotation(cls: type, name: str) -> Any:
    """The field's annotation as the class that declares it wrote it, a string to be read in
    that class's module."""
    for klass in cls.__mro__:
        written = vars(klass).get("__annotations__", {})
        if name in written:
            value = written[name]
            return typing.ForwardRef(value, module=klass.__module__) if isinstance(value, str) else value
    raise AttributeError(f"{cls.__qualname__} declares no field {name!r}")


@functools.cache  # msgspec resolves the class's annotations on every call: 0.4 ms a record, 14 per verify
def record_fields(cls: type) -> tuple[msgspec.structs.FieldInfo, ...]:
    """The fields of a record class (each has ``name``, ``type``, ``default``), in key order."""
    return msgspec.structs.fields(cls)


def _number(value: Any) -> Any:
    """A figure msgspec does not know as one: a numpy scalar (numpy registers its numbers as
    numbers.Real), as json.dumps wrote it."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"a record holds a {type(value).__name__}, which is no JSON value")


# to_builtins keeps tuples; the JSON's own decoder gives lists, and is as fast
_ENCODE, _DECODE = msgspec.json.Encoder(enc_hook=_number).encode, msgspec.json.Decoder().decode


def json_line(record: Record) -> str:
    """The record as one line of compact JSON (the journal's, a worker's): a non-finite float
    is written null (NaN and Infinity are not JSON), non-ASCII text as UTF-8."""
    return _ENCODE(record).decode() + "\n"



_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<at>.*)`)?$", re.S)
_WORDS = {"object": "an object", "array": "an array", "str": "a string", "int": "an integer", "float": "a number",
          "bool": "true or false", "null": "null"}


def misfit(exc: msgspec.ValidationError) -> str:
    """msgspec's message as 'PLACE: what', the place as a JSON pointer without its leading
    slash (``models/0/identity``), the types in JSON's words."""
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    at = re.sub(r"\[(\d+)\]", r"/\1", m["at"] or "").replace("[", "/").replace("]", "").replace(".", "/")
    at = at.strip("/").replace('"', "") or "(top level)"
    what = m["what"]
    missing = re.fullmatch(r"Object missing required field `(.+)`", what)
    if missing:
        return f"{at}: no {missing[1]!r}"
    typed = re.fullmatch(r"Expected `([^`]+)`(.*?)(?:, got `([^`]+)`)?", what)
    if typed:
        want = " or ".join(_WORDS.get(w, w) for w in typed[1].split(" | ")).replace("an integer or a number", "a number")
        found = f", found {_WORDS.get(typed[3], typed[3])}" if typed[3] else ""
        return f"{at}: expected {want}{typed[2]}{found}"
    return f"{at}: {what[:1].lower()}{what[1:]}"


# What a JSON value read from a file may be before any record is made of it. A run log nests
# about 11 deep (tiny-sweeps.json); 64 leaves room for what free-form fields hold, and keeps
# every recursive walk after it (the codec, `share`, deepcopy) far from Python's recursion
# limit: a log nested 600 deep ended `share` in a RecursionError. No figure macprof records
# needs more than 64 bits (nanosecond stamps, bytes); 10^300 ended `plot` in an OverflowError.
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
            if type(value) is list and value and set(map(type, value)) == {int}:  # ids, stamps: at C speed
                if max(value).bit_length() <= MAX_INT_BITS and min(value).bit_length() <= MAX_INT_BITS:
                    continue
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
    """A place in a JSON value for a one-line message: its start, where it is very long; a key's
    line break or control character (a key is any string) never breaks the line."""
    at = clean(at)
    return (at[:limit] + "...") if len(at) > limit else at or "(top level)"


def plain(hint: Any) -> Any:
    """``X | None | UnsetType`` -> X (the type a field holds when it holds a value)."""
    import types
    import typing

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(hint) if a is not type(None) and a is not UnsetType]
        return arms[0] if len(arms) == 1 else typing.Union[tuple(arms)]
    return hint
