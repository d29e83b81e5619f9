"""`macprof share`: a copy of a run log that is safe to post publicly.

Removes what identifies a person or a machine: the user name, the host name and the home
directory wherever they appear (paths, model names, engine messages, stderr tails), the host
id, and model paths (a model stays identified by file name, size and sha256). Says what it
removed, in words that hold none of it.

Only whole tokens go: a user or host name as a word (so host "tiny" leaves "tinyllama" alone),
a home directory as a path prefix (home "/data/max" leaves "/data/maxine" alone). User names are
matched with their case (POSIX user names are case-sensitive: user "max" leaves "M4 Max"
alone), host names without (DNS ignores case). Fields that hold what macprof, the OS or the
hardware name (the chip, a method, a status) are left as they are: they carry nothing of the
user, and replacing "M4" in "Apple M4 Max" for a user named "M4" would corrupt the chip and,
by the gap it leaves, tell the user name.
"""

from __future__ import annotations

import copy
import getpass
import os
import re
import socket
from pathlib import Path

# keys whose values are vocabulary: hardware and OS names, macprof's own definitions, methods
# and enumerations; and hashes (hex: a short name could match inside one)
VOCABULARY = frozenset({"sha256", "definitions", "chip", "cpu_model", "arch", "os", "os_version", "method",
                        "tflops_method", "source", "device", "status", "kind", "mode", "engine", "bound", "format",
                        "kv_type", "architecture", "quant_declared", "tool_version", "started_utc",
                        "ended_utc", "utc", "software", "engine_versions"})
# keys whose values are macprof's own words on what the OS or a library does not give (telemetry's
# "unavailable" reasons): a host name that is a common word ("vm") must not be taken from them,
# while a path in a library's message still loses its home directory
OWN_MESSAGES = frozenset({"unavailable"})
_WORD = r"[^\W_]"  # a letter or digit: a name next to one is part of a longer word, not the name
_OTHER_HOMES = r"/(?:Users|home)/[^/\s\"']+"  # any other user's home directory (a mounted volume)
NAMES = {"<home>": "home-directory paths", "<user>": "user names", "<host>": "host names"}


def _identifiers() -> list[tuple[str, str]]:
    """(text to remove, what replaces it): this machine's home directory, user and host names."""
    found: dict[str, str] = {}
    home = os.path.expanduser("~")
    if home and home not in ("/", "~"):
        found[home.rstrip("/")] = "<home>"
    try:
        found[getpass.getuser()] = "<user>"
    except Exception:  # noqa: BLE001 - no user name to remove
        pass
    host = socket.gethostname()
    if host:
        found[host] = "<host>"
        found[host.split(".")[0]] = "<host>"
    # one-letter names would take every "a" and "x" of the messages; paths still go by prefix
    return [(k, v) for k, v in found.items() if len(k) >= 2 or v == "<home>"]


def _pattern(text: str, label: str) -> str:
    body = re.escape(text)
    if label == "<home>":
        return body + r"(?![\w.-])"  # a path prefix: /home/max/x and /home/max, never /home/maxine
    if label == "<host>":
        return rf"(?<!{_WORD})(?i:{body})(?!{_WORD})"
    return rf"(?<!{_WORD}){body}(?!{_WORD})"


class _Scrubber:
    """Every identifier in one regular expression, longest first, so a replacement is never
    scanned again ("<home>" holds "home": a user named "home" must not turn it into "<<user>>")."""

    def __init__(self, replacements: list[tuple[str, str]]) -> None:
        ordered = sorted({t: lab for t, lab in replacements if t}.items(), key=lambda kv: -len(kv[0]))
        self.labels = [lab for _, lab in ordered] + ["<home>"]
        alts = [_pattern(t, lab) for t, lab in ordered] + [_OTHER_HOMES]
        self.rx = re.compile("|".join(f"(?P<g{i}>{a})" for i, a in enumerate(alts)))
        self.hits: dict[str, int] = {}
        homes = [(t, lab) for t, lab in replacements if lab == "<home>"]
        self.homes_only = _Scrubber(homes) if len(homes) < len([t for t, _ in replacements if t]) else None

    def text(self, value: str, count: bool = True) -> str:
        def sub(m: re.Match) -> str:
            assert m.lastgroup is not None  # every alternative is a named group g<i>
            label = self.labels[int(m.lastgroup[1:])]
            if count:
                self.hits[label] = self.hits.get(label, 0) + 1
            return label

        return self.rx.sub(sub, value)

    def value(self, value, key: str | None = None):
        if key in VOCABULARY:
            return value
        if key in OWN_MESSAGES and self.homes_only is not None:
            return self.homes_only.value(value)
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


def redact(log: dict, identifiers: list[tuple[str, str]] | None = None) -> tuple[dict, list[str]]:
    """The copy to share, and what was removed (in words that hold none of it)."""
    ids = _identifiers() if identifiers is None else identifiers
    names = _Scrubber(ids)  # a model's name may hold the user or host name: its label must not
    out = copy.deepcopy(log)
    removed: list[str] = []
    model_paths = []
    for m in out.get("models", []):
        path = m.get("identity", {}).get("path")
        if path:
            m["identity"]["path"] = None
            name = names.text(str(m["identity"].get("name")), count=False)
            model_paths.append((path, f"<path of {name}>"))
            removed.append(f"model path of {name}")
            source = m["identity"].get("source")
            if source:  # a model named on the command line: its path again, and a reference that is a path
                source["path"] = None
                if source.get("store") == "path":
                    source["ref"] = f"<path of {name}>"
    machine = out.get("machine") or {}
    if machine.get("host_id"):
        machine["host_id"] = None
        machine.setdefault("unknown", {})["host_id"] = "removed by macprof share"
        removed.append("host id")
    # a model's path also appears in messages (a refused case, a load error): replaced there too
    scrub = _Scrubber(model_paths + ids)
    out = scrub.value(out)
    removed += [f"{n} occurrence(s) of {NAMES.get(label, 'the model path in messages: ' + label)}"
                for label, n in sorted(scrub.hits.items())]
    out["redacted"] = {"by": "macprof share", "removed": removed}
    return out, removed


def default_output(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json").removesuffix(".journal.jsonl") + ".shared.json")
