"""safetensors headers, bounded and checked: u64 header length, a JSON object of tensors
{"name": {"dtype", "shape", "data_offsets": [begin, end]}}, then the data. The length is
bounded by the file before it is read, and every tensor's entry is checked (types, offsets
inside the data, bytes matching the shape) so a corrupt file is one line naming the tensor."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import NamedTuple

from macprof.files.filekind import open_regular
from macprof.errors import MacprofError

MAX_HEADER = 100_000_000  # the safetensors library's own limit
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U32": 4, "I16": 2, "U16": 2,
               "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class Tensor(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    n_bytes: int


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_header(path: Path) -> dict[str, Tensor]:
    """Tensor name -> (dtype, shape, stored bytes), the __metadata__ entry left out."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        raw = fh.read(8)
        if len(raw) < 8:
            raise MacprofError(f"{path}: truncated safetensors file (no header)")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER, size - 8):
            raise MacprofError(f"{path}: corrupt safetensors header (claims {length} bytes; the file has {size})")
        text = fh.read(length)
    if len(text) < length:
        raise MacprofError(f"{path}: the file ended while reading its safetensors header (it changed while being read)")
    try:
        header = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested past Python's stack
        raise MacprofError(f"{path}: corrupt safetensors header ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(header, dict):
        raise MacprofError(f"{path}: corrupt safetensors header (not a JSON object)")
    header.pop("__metadata__", None)
    data_bytes = size - 8 - length
    return {name: _tensor(path, name, entry, data_bytes) for name, entry in header.items()}


def _tensor(path: Path, name: str, entry, data_bytes: int) -> Tensor:
    def bad(what: str) -> MacprofError:
        return MacprofError(f"{path}: safetensors tensor {short(name)}: {what}")

    if not isinstance(entry, dict):
        raise bad(f"must be an object with dtype, shape and data_offsets, not {short(entry)}")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise bad(f"dtype must be a string, not {short(dtype)}")
    if not isinstance(shape, list) or not all(is_count(d) for d in shape):
        raise bad(f"shape must be a list of non-negative integers, not {short(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_count(o) for o in offsets)):
        raise bad(f"data_offsets must be two non-negative integers, not {short(offsets)}")
    begin, end = offsets
    if not begin <= end <= data_bytes:
        raise bad(f"data_offsets {offsets} must satisfy begin <= end <= {data_bytes}, the bytes of data in the file")
    n = 1
    for d in shape:
        n *= d
    if dtype in DTYPE_BYTES and n * DTYPE_BYTES[dtype] != end - begin:
        raise bad(f"{end - begin} bytes of data for shape {shape} of {dtype}, which takes {n * DTYPE_BYTES[dtype]}")
    return Tensor(dtype, tuple(shape), end - begin)
