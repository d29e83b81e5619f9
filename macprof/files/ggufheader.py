"""A GGUF header reader that reads only what modelinfo needs, at the speed of the header.

gguf.GGUFReader builds a numpy array per key, per vocabulary string and per tensor: 30 s and
700 MB for a 262,144-token vocabulary. Here arrays of strings are walked by their lengths,
numeric arrays are skipped unless asked for, and no tensor data is touched.

Layout (GGUF v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor count, u64 key/value
count; key/values (string key, u32 value type, value); tensor infos (string name, u32 n_dims,
u64 dims[n_dims], u32 type, u64 offset); padding to ``general.alignment`` (default 32); data.
Every length or count is checked against the bytes left in the file before anything is read or
allocated, so a corrupt or hostile header is one line, not a MemoryError.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from macprof.files import ggufconst
from macprof.files.filekind import linked, open_regular
from macprof.errors import MacprofError

CHUNK = 1 << 20
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses more
MAX_NESTING = 4  # arrays of arrays: none in practice; bounded so a header cannot recurse without end
MAX_VALUES = 1 << 16  # numeric arrays read when asked for (per-layer values); longer ones only counted
MAX_TEXT = 1 << 16  # strings kept when asked for; a longer one is skipped (no key modelinfo reads is long)
STRING, ARRAY, BOOL = 8, 9, 7
# value type -> (name, struct code); strings and arrays are read by hand
SCALARS = {0: ("UINT8", "B"), 1: ("INT8", "b"), 2: ("UINT16", "H"), 3: ("INT16", "h"), 4: ("UINT32", "I"),
           5: ("INT32", "i"), 6: ("FLOAT32", "f"), 7: ("BOOL", "?"), 10: ("UINT64", "Q"), 11: ("INT64", "q"),
           12: ("FLOAT64", "d")}
INTEGERS = {0, 1, 2, 3, 4, 5, 10, 11}
_MIN_KV = 8 + 4 + 1  # key length, value type, the smallest value
_MIN_TENSOR = 8 + 4 + 4 + 8  # name length, n_dims, type, offset
_U32, _U64, _QQ, _IQ = (struct.Struct(f) for f in ("<I", "<Q", "<QQ", "<IQ"))
_SCALAR_STRUCTS = {t: struct.Struct("<" + code) for t, (_, code) in SCALARS.items()}


def type_name(vtype: int) -> str:
    return {STRING: "a string", ARRAY: "an array"}.get(vtype) or SCALARS.get(vtype, ("?",))[0]


@dataclass(frozen=True)
class Array:
    elem_type: int
    count: int
    values: tuple | None  # numeric values when asked for and short enough, else None


Scalar = int | float | bool  # what struct unpacks for the SCALARS


@dataclass(frozen=True)
class Value:
    vtype: int
    value: Scalar | str | Array | None  # a number, a str (strings asked for), None (strings skipped) or an Array


class TensorInfo(NamedTuple):  # a tuple: 200,000 of them are built in well under a second
    name: str
    dims: tuple[int, ...]  # GGUF order: dims[0] is the row length, dims[-1] the row count
    type_name: str  # GGMLQuantizationType name: F16, Q4_K...
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class Header:
    path: Path
    version: int
    kv: dict[str, Value]
    tensors: list[TensorInfo]

    def _wrong(self, key: str, what: str) -> MacprofError:
        return MacprofError(f"{self.path}: GGUF key {show_key(key)} must be {what}, not {describe(self.kv[key])}")

    def string(self, key: str) -> str | None:
        v = self.kv.get(key)
        if v is None:
            return None
        if v.vtype != STRING:
            raise self._wrong(key, "a string")
        if not isinstance(v.value, str):  # skipped: longer than any name (MAX_TEXT)
            raise MacprofError(f"{self.path}: GGUF key {show_key(key)} holds a string of more than {MAX_TEXT} bytes")
        return v.value

    def count(self, key: str) -> int | None:
        """A non-negative integer. A per-layer array of them (OpenELM, hybrid models) gives its
        value when all layers agree, else None: no single figure describes the model."""
        v = self.kv.get(key)
        if v is None:
            return None
        if isinstance(v.value, Array) and v.value.elem_type in INTEGERS:
            values = v.value.values or ()
            if any(x < 0 for x in values):
                raise self._wrong(key, "an array of non-negative integers")
            return values[0] if values and len(set(values)) == 1 else None
        if v.vtype not in INTEGERS or not isinstance(v.value, int) or v.value < 0:
            raise self._wrong(key, "a non-negative integer")
        return v.value

    def layers(self, key: str) -> int | tuple[int, ...] | None:
        """A non-negative integer, or a per-layer array of integers or booleans as a tuple
        (head_count_kv of hybrids, sliding_window_pattern, recurrent_layers), or None."""
        v = self.kv.get(key)
        if v is None:
            return None
        if isinstance(v.value, Array) and v.value.elem_type in INTEGERS | {BOOL}:
            values = v.value.values
            if values is None or any(x < 0 for x in values):
                raise self._wrong(key, f"an array of at most {MAX_VALUES} non-negative integers")
            return tuple(int(x) for x in values)
        if v.vtype == BOOL:
            return int(bool(v.value))
        return self.count(key)

    def array_length(self, key: str) -> int | None:
        v = self.kv.get(key)
        if v is None:
            return None
        if not isinstance(v.value, Array):
            raise self._wrong(key, "an array")
        return v.value.count


def describe(v: Value) -> str:
    if isinstance(v.value, Array):
        return f"an array of {show(v.value.count)} {type_name(v.value.elem_type)}"
    if v.vtype == STRING:
        return "a string" + (f" ({v.value[:40]!r})" if isinstance(v.value, str) else "")
    return f"{type_name(v.vtype)} {v.value!r}"


def show(n: int) -> str:
    """Counts as a person reads them: 2^62 rather than 4611686018427387904."""
    return f"2^{n.bit_length() - 1}" if n >= 1 << 32 and n & (n - 1) == 0 else str(n)


def show_key(key: str) -> str:
    return key if key.isprintable() and " " not in key and key else repr(key)


class _Cursor:
    """Sequential reads from a file through a buffer of CHUNK bytes, each bounded by the file."""

    def __init__(self, fh, path: Path, size: int):
        self.fh, self.path, self.size = fh, path, size
        self.buf, self.base, self.pos = b"", 0, 0  # buf holds the file from offset base

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def fail(self, what: str) -> MacprofError:
        return MacprofError(f"{self.path}: GGUF header: {what}")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.offset:
            raise self.fail(f"{what} exceeds the file's {self.size} bytes (truncated or corrupt GGUF file)")

    def _fill(self, n: int) -> None:
        if self.pos + n <= len(self.buf):
            return
        self.fh.seek(self.offset)
        self.base, self.pos = self.offset, 0
        self.buf = self.fh.read(max(n, CHUNK))
        if len(self.buf) < n:  # the size was checked: the file shrank while being read
            raise self.fail(f"the file ended at byte {self.base + len(self.buf)} while reading it "
                            f"(it changed while being read)")

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        self.need(st.size, what)
        self._fill(st.size)
        out = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return out

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        self._fill(n)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        if self.pos + n <= len(self.buf):
            self.pos += n
        else:  # beyond the buffer: move there, read on demand
            self.base, self.pos, self.buf = self.offset + n, 0, b""

    def text(self, what: str, keep: bool = True) -> str | None:
        (n,) = self.unpack(_U64, f"the length of {what}")
        if not keep or n > MAX_TEXT:
            self.skip(n, f"{what} ({show(n)} bytes)")
            return None
        raw = self.take(n, f"{what} ({show(n)} bytes)")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def skip_strings(self, count: int, where: str) -> None:
        """Walk ``count`` strings by their lengths without building any (the vocabulary)."""
        unpack, buf, pos = _U64.unpack_from, self.buf, self.pos
        for i in range(count):
            if pos + 8 > len(buf):
                self.pos = pos
                self.need(8, f"string #{i} of the array {where}")
                self._fill(8)
                buf, pos = self.buf, self.pos
            (n,) = unpack(buf, pos)
            pos += 8
            if pos + n > len(buf):
                self.pos = pos
                self.skip(n, f"string #{i} ({show(n)} bytes) of the array {where}")
                buf, pos = self.buf, self.pos
            else:
                pos += n
        self.pos = pos


def _value(cur: _Cursor, vtype: int, key: str, keep: bool, depth: int = 0) -> Value:
    where = f"at key {show_key(key)}"
    if vtype in SCALARS:
        return Value(vtype, cur.unpack(_SCALAR_STRUCTS[vtype], f"the value {where}")[0])
    if vtype == STRING:
        return Value(vtype, cur.text(f"the string {where}", keep))
    if vtype != ARRAY:
        raise cur.fail(f"unknown value type {vtype} {where}")
    if depth >= MAX_NESTING:
        raise cur.fail(f"arrays nested more than {MAX_NESTING} deep {where}")
    elem, count = cur.unpack(_IQ, f"the array header {where}")
    if elem in SCALARS:
        size = _SCALAR_STRUCTS[elem].size
    elif elem in (STRING, ARRAY):
        size = 8 if elem == STRING else 12  # the least each element can take: its length (and type)
    else:
        raise cur.fail(f"array of unknown value type {elem} {where}")
    cur.need(count * size, f"array of {show(count)} elements {where}")
    values = None
    if elem in SCALARS and keep and count <= MAX_VALUES:
        values = cur.unpack(struct.Struct(f"<{count}{SCALARS[elem][1]}"), f"the array {where}")
    elif elem in SCALARS:
        cur.skip(count * size, f"the array {where}")
    elif elem == STRING:
        cur.skip_strings(count, where)
    else:  # an array of arrays: each element is an array value (type, count, elements) of its own
        for _ in range(count):
            _value(cur, ARRAY, key, False, depth + 1)
    return Value(vtype, Array(elem, count, values))


# -- the header ---------------------------------------------------------------------------
def read_header(path: Path | str, wanted: Callable[[str], bool], tensors: bool = True) -> Header:
    """Key/values (strings and numeric arrays only where ``wanted(key)``) and tensor infos,
    with every tensor's bytes checked to lie inside the file. ``tensors=False`` stops after the
    key/values (no tensor list; gguf, and numpy with it, are then never imported)."""
    path = Path(path)
    with open_regular(path) as fh:
        cur = _Cursor(fh, path, os.fstat(fh.fileno()).st_size)
        version = _preamble(cur)
        n_tensors, n_kv = cur.unpack(_QQ, "the tensor and key/value counts")
        cur.need(n_kv * _MIN_KV, f"a key/value count of {show(n_kv)} (at least {_MIN_KV} bytes each)")
        kv: dict[str, Value] = {}
        for i in range(n_kv):
            key = cur.text(f"key #{i}")
            if key is None:  # kept text is at most MAX_TEXT bytes: no key is that long
                raise cur.fail(f"key #{i} is longer than {MAX_TEXT} bytes")
            if key in kv:
                raise cur.fail(f"key {show_key(key)} appears twice")
            (vtype,) = cur.unpack(_U32, f"the value type at key {show_key(key)}")
            kv[key] = _value(cur, vtype, key, wanted(key))
        if not tensors:
            return Header(path, version, kv, [])
        cur.need(n_tensors * _MIN_TENSOR, f"a tensor count of {show(n_tensors)} (at least {_MIN_TENSOR} bytes each)")
        raw = _tensor_infos(cur, n_tensors)
        alignment = _alignment(cur, kv)
        data_start = cur.offset + (-cur.offset % alignment)
        infos = _tensors(cur, raw, data_start, alignment)
    return Header(path, version, kv, infos)


def _preamble(cur: _Cursor) -> int:
    path = cur.path
    if cur.size == 0:
        raise MacprofError(f"{path}: empty file (0 bytes), not a GGUF model")
    magic = cur.take(min(4, cur.size), "the magic")
    if magic != b"GGUF":
        # the bytes are not quoted: they may be anything's (a snapshot linked to /etc/passwd)
        raise MacprofError(f"{path}{linked(path)}: not a GGUF file (it does not begin with the GGUF magic)")
    (version,) = cur.unpack(_U32, "the version")
    if version and not version & 0xFFFF:  # 3 stored big-endian reads as 0x03000000
        raise MacprofError(f"{path}: a big-endian GGUF file (version {struct.unpack('>I', struct.pack('<I', version))[0]} "
                           f"byte-swapped); llama.cpp on this machine reads little-endian files")
    if version not in (2, 3):
        raise MacprofError(f"{path}: unsupported GGUF version {version} (llama.cpp reads versions 2 and 3)")
    return version


_DIMS = [struct.Struct(f"<{n}Q") for n in range(MAX_DIMS + 1)]


def _tensor_infos(cur: _Cursor, count: int) -> list[tuple]:
    """(name, dims, type, offset) per tensor. A record wholly inside the buffer is parsed in
    place (the common case, 200,000 tensors in about a second); one that crosses the
    buffer's end, or is faulty, goes through the checked reads of _tensor_info."""
    u64, u32, iq = _U64.unpack_from, _U32.unpack_from, _IQ.unpack_from
    out = []
    for i in range(count):
        buf, pos = cur.buf, cur.pos
        if pos + 12 <= len(buf):
            (n,) = u64(buf, pos)
            at = pos + 8 + n  # the n_dims field
            if at + 4 <= len(buf):
                (n_dims,) = u32(buf, at)
                end = at + 4 + 8 * n_dims + 12
                if n_dims <= MAX_DIMS and end <= len(buf):
                    try:
                        name = buf[pos + 8:at].decode("utf-8")
                    except UnicodeDecodeError:
                        name = None
                    if name is not None:
                        cur.pos = end
                        out.append((name, _DIMS[n_dims].unpack_from(buf, at + 4), *iq(buf, end - 12)))
                        continue
        out.append(_tensor_info(cur, i))
    return out


def _tensor_info(cur: _Cursor, i: int) -> tuple:
    name = cur.text(f"the name of tensor #{i}")
    (n_dims,) = cur.unpack(_U32, f"the dimension count of tensor {name!r}")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"tensor {name!r} has {n_dims} dimensions (GGML allows at most {MAX_DIMS})")
    dims = cur.unpack(_DIMS[n_dims], f"the dimensions of tensor {name!r}")
    ttype, offset = cur.unpack(_IQ, f"the type and offset of tensor {name!r}")
    return name, dims, ttype, offset


def _alignment(cur: _Cursor, kv: dict[str, Value]) -> int:
    v = kv.get("general.alignment")
    if v is None:
        return 32
    if v.vtype != 4 or not isinstance(v.value, int):  # llama.cpp reads it as a u32 and aborts on any other type
        raise cur.fail(f"key general.alignment must be UINT32, not {describe(v)}")
    if v.value == 0 or v.value & (v.value - 1):
        raise cur.fail(f"key general.alignment must be a power of two, not {v.value}")
    return v.value


def _tensors(cur: _Cursor, raw: list[tuple], data_start: int, alignment: int) -> list[TensorInfo]:
    gguf = ggufconst.load()
    types: dict[int, tuple[str, int, int]] = {}
    seen: set[str] = set()
    out = []
    for name, dims, ttype, offset in raw:
        if name in seen:
            raise cur.fail(f"tensor {name!r} appears twice")
        seen.add(name)
        if ttype not in types:
            try:
                qtype = gguf.GGMLQuantizationType(ttype)
                types[ttype] = (qtype.name, *gguf.GGML_QUANT_SIZES[qtype])
            except (ValueError, KeyError):
                raise cur.fail(f"tensor {name!r} has unknown type {ttype}") from None
        tname, block, type_size = types[ttype]
        if dims and dims[0] % block:
            raise cur.fail(f"tensor {name!r}: rows of {dims[0]} elements are not whole {tname} blocks of {block}")
        if offset % alignment:
            raise cur.fail(f"tensor {name!r}: data offset {offset} is not a multiple of the alignment {alignment}")
        n = 1
        for d in dims:
            n *= d
        n_bytes = n * type_size // block
        end = data_start + offset + n_bytes
        if end > cur.size:
            raise MacprofError(f"{cur.path}: GGUF tensor data: tensor {name!r} (bytes {data_start + offset} to {end}) "
                               f"exceeds the file's {cur.size} bytes (truncated or corrupt GGUF file)")
        out.append(TensorInfo(name, dims, tname, n, n_bytes))
    return out
