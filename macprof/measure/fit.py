"""Whether a model's files can fit in memory: the one rule `macprof run` refuses a model by
(unless --force) and `macprof models` shows. Its weights alone; the KV cache and the engine
need more, so a model that passes may still swap, one that fails plainly cannot load."""

from __future__ import annotations

import sys


def memory_limit(engine: str, *, available: int | None, working_set: int | None = None,
                 working_set_source: str | None = None, memory_bytes: int | None = None,
                 platform: str = sys.platform) -> tuple[int | None, str]:
    """(bytes, what they are). On macOS psutil's "available" is inactive + free pages only, far
    below what a model can have; the GPU engines are bound by the working set Metal recommends
    (the memory the GPU can keep resident), else by the physical memory."""
    if platform == "darwin" and engine in ("mlx", "llama.cpp"):
        if working_set:
            return working_set, f"the GPU's recommended working set ({working_set_source or 'source unknown'})"
        if memory_bytes:
            return memory_bytes, "the physical memory (the GPU's recommended working set is unknown)"
        return None, "unknown"
    return available, "the memory available now"


def memory_refusal(size_bytes: int, limit: int | None, what: str) -> str | None:
    """The reason a model of ``size_bytes`` plainly cannot fit under ``limit`` (``what`` names
    it), or None (also when the limit is unknown: nothing is refused on a guess)."""
    if limit is not None and size_bytes > limit:
        return (f"model needs at least {size_bytes / 1e9:.1f} GB and {what} is {limit / 1e9:.1f} GB "
                f"(use --force to try anyway)")
    return None
