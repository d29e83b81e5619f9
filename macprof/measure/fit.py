"""Whether a model's files can fit in memory: the one rule `macprof run` refuses a model by
(unless --force) and `macprof models` shows. Its weights alone; the KV cache and the engine
need more, so a model that passes may still swap, one that fails plainly cannot load."""

from __future__ import annotations


def memory_refusal(size_bytes: int, available_bytes: int) -> str | None:
    """The reason a model of ``size_bytes`` plainly cannot fit in ``available_bytes``, or None."""
    if size_bytes > available_bytes:
        return (f"model needs at least {size_bytes / 1e9:.1f} GB and only {available_bytes / 1e9:.1f} GB of memory "
                f"is available (use --force to try anyway)")
    return None
