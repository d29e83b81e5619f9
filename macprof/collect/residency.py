"""How much of a model's files sits in the OS page cache, and evicting it where allowed.

mincore(2) over a read-only mmap of each file: no privileges, works on Linux and macOS, and
mapping a file does not fault its pages in, so looking does not change the answer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from pathlib import Path


_libc = None
_LOW_BIT = bytes(b & 1 for b in range(256))  # each mincore byte -> its "resident" bit


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return _libc


def file_residency(path: Path) -> tuple[int, int]:
    """(resident bytes, file bytes) for one file, page-granular."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    libc = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap failed for {path}")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore failed for {path}")
            # bit 0 is "resident" (macOS sets other flags beside it); translate and count run
            # in C, a few ms for a 5 GB model's 1.2 M pages, with no numpy in the parent
            resident = bytes(vec).translate(_LOW_BIT).count(1)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(resident * page, size), size


def residency(files: list[Path]) -> dict:
    """Page-cache residency of a model's files: bytes, fraction and a label."""
    resident = total = 0
    for f in files:
        r, s = file_residency(f)
        resident += r
        total += s
    fraction = resident / total if total else None
    return {"resident_bytes": resident, "file_bytes": total, "fraction": fraction,
            "label": label(fraction), "method": "mincore over mmap"}


def label(fraction: float | None) -> str:
    if fraction is None:
        return "unknown"
    if fraction < 0.05:
        return "cold (not in page cache)"
    if fraction > 0.95:
        return "warm (in page cache)"
    return f"partial ({fraction:.0%} in page cache)"


def drop_cache(files: list[Path]) -> dict:
    """Evict the files from the page cache where an ordinary user can (Linux); say so where not."""
    if not hasattr(os, "posix_fadvise") or sys.platform == "darwin":
        return {"dropped": False,
                "reason": "this OS gives no unprivileged way to evict a file's pages (macOS needs `sudo purge`)"}
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd) if hasattr(os, "fdatasync") else None
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {"dropped": True, "reason": "posix_fadvise(POSIX_FADV_DONTNEED) on each file"}
