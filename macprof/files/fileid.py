"""Model file identity: sha256 cached by (path, size, mtime) so a 40 GB model is hashed once."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from macprof.files.filekind import open_regular, regular_stat


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:  # a FIFO or /dev/zero would never end: refused, not hashed
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_dir() -> Path:
    base = os.environ.get("MACPROF_CACHE")
    if base:
        return Path(base).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "macprof"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "macprof"


def _cache_file() -> Path:
    return cache_dir() / "sha256.json"


def cached_sha256(path: Path) -> str:
    st = regular_stat(path)
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache_file = _cache_file()
    try:
        cache = json.loads(cache_file.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    digest = sha256_file(path)
    cache[key] = digest
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only cache only costs re-hashing next time
    return digest
