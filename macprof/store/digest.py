"""A run log's content digest: sha256 of its canonical form, written by `save` under
``digest`` and checked by `macprof verify` (store/verify.py). It detects an edit made after the
log was written; it does not say who ran the measurement (anyone can compute it for a log they
made up or edited: docs/runlog.md "The digest").

The canonical form ("macprof-json-1", FORM), so that another tool can recompute it: the log's JSON without its
``digest`` key, serialised with the keys of every object sorted (by code point), no whitespace
(``,`` and ``:`` as separators), strings with only the escapes JSON requires (``\\"``,
``\\\\``, the control characters, as Python's json.dumps writes them with
``ensure_ascii=False``), integers in decimal, other numbers as Python's ``repr`` of the double
(the shortest text that reads back to it), and encoded as UTF-8: exactly
``json.dumps(log, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()``.
The file itself is written by json.dump, so its numbers read as these doubles and write back the same.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

FORM = "macprof-json-1"  # the canonical form's name, recorded beside the sha256: another form would be another name
DigestState = Literal["matches", "differs", "absent", "not checked"]


def canonical(data: dict) -> bytes:
    """The log's canonical form (module docstring), its ``digest`` left out."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def sha256_of(data: dict) -> str:
    return hashlib.sha256(canonical(data)).hexdigest()


def stamped(data: dict) -> dict:
    """``data`` (a log's JSON) with its digest: what `save` writes."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return {**body, "digest": {"sha256": sha256_of(body), "form": FORM}}


def state(data: dict) -> tuple[DigestState, str | None]:
    """Whether the log's JSON (as read from its file) matches the digest it carries, and why
    not in words; a log written before the digest has none ("absent")."""
    recorded = data.get("digest")
    if recorded is None:
        return "absent", "no digest (a log written before macprof recorded one): its figures are checked, an edit that kept them consistent cannot be told"
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        return "differs", "its digest is not a digest macprof writes (an object with a sha256)"
    if recorded.get("form") not in (None, FORM):
        return "differs", f"its digest is of another form ({str(recorded.get('form'))[:80]!r}): not one this macprof computes"
    try:
        found = sha256_of(data)
    except (ValueError, TypeError, RecursionError) as exc:
        return "differs", f"its content cannot be put in canonical form ({type(exc).__name__})"
    if found != recorded["sha256"]:
        return "differs", (f"its content digest does not match: the log was edited after it was written "
                           f"(recorded sha256 {recorded['sha256'][:16]}..., content {found[:16]}...)")
    return "matches", None
