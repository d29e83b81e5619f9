"""`macprof share`: a copy of a run log that is safe to post publicly.

Removes what identifies a person or a machine: the user name, the host name and the home
directory wherever they appear (paths, engine messages, stderr tails), the host id, and model
paths (a model stays identified by file name, size and sha256). Says what it removed.
"""

from __future__ import annotations

import copy
import getpass
import os
import re
import socket
from pathlib import Path


def _identifiers() -> list[tuple[str, str]]:
    """(text to remove, what replaces it), longest first so a home path goes before the user."""
    found: dict[str, str] = {}
    home = os.path.expanduser("~")
    if home and home not in ("/", "~"):
        found[home] = "<home>"
    try:
        found[getpass.getuser()] = "<user>"
    except Exception:  # noqa: BLE001 - no user name to remove
        pass
    host = socket.gethostname()
    if host:
        found[host] = "<host>"
        found[host.split(".")[0]] = "<host>"
    return sorted(((k, v) for k, v in found.items() if len(k) >= 3), key=lambda kv: -len(kv[0]))


def redact(log: dict, identifiers: list[tuple[str, str]] | None = None) -> tuple[dict, list[str]]:
    ids = _identifiers() if identifiers is None else identifiers
    out = copy.deepcopy(log)
    removed: list[str] = []
    model_paths = []
    for m in out.get("models", []):
        path = m.get("identity", {}).get("path")
        if path:
            m["identity"]["path"] = None
            model_paths.append((path, f"<path of {m['identity']['name']}>"))
            removed.append(f"model path of {m['identity']['name']}")
    machine = out.get("machine") or {}
    if machine.get("host_id"):
        machine["host_id"] = None
        machine.setdefault("unknown", {})["host_id"] = "removed by macprof share"
        removed.append("host id")
    hits: dict[str, int] = {}
    # a model's path also appears in messages (a refused case, a load error): replaced there too
    patterns = [(re.compile(re.escape(p)), label) for p, label in sorted(model_paths, key=lambda x: -len(x[0]))]
    patterns += [(re.compile(re.escape(text), re.IGNORECASE if label != "<home>" else 0), label) for text, label in ids]

    def scrub(value):
        if isinstance(value, str):
            for rx, label in patterns:
                value, n = rx.subn(label, value)
                if n:
                    hits[label] = hits.get(label, 0) + n
            # any other absolute home-directory path (another user's, a mounted volume)
            value, n = re.subn(r"/(?:Users|home)/[^/\s\"']+", "<home>", value)
            if n:
                hits["<home>"] = hits.get("<home>", 0) + n
            return value
        if isinstance(value, dict):  # hashes are hex: a short user name could match inside one
            return {k: (v if k == "sha256" else scrub(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    out = scrub(out)
    names = {"<home>": "home-directory paths", "<user>": "user names", "<host>": "host names"}
    removed += [f"{n} occurrence(s) of {names.get(label, 'the model path in messages: ' + label)}"
                for label, n in sorted(hits.items())]
    out["redacted"] = {"by": "macprof share", "removed": removed}
    return out, removed


def default_output(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json").removesuffix(".journal.jsonl") + ".shared.json")
