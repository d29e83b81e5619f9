"""`macprof share`: a copy of a run log that is safe to post publicly.

Removes what identifies a person or a machine, by what each value is (every string field of
the log has its kind in its record's KINDS, model/kind.py): model paths (a model stays identified by file
name, size and sha256) and the host id go; a path anywhere else loses its folders and keeps its
file name; a URL loses its credentials (user:secret@) and its query; a rank's host becomes
``<host N>``; and this machine's home directory, user name (the login and the account's full
name) and host name go wherever they appear (model names, engine messages, stderr tails, a
server's command line and the model ids it lists, a model's replies, free-form values). Says
what it removed, in words that hold none of it.

Secret-shaped strings go from every string, whatever its kind (``SECRETS``): API keys by their
vendors' prefixes (``sk-``, ``sk-live-``, ``sk_live_``, ``hf_``, ``ghp_``, ``glpat-``, ``xoxb-``,
``AKIA``, ``AIza``...), JSON web tokens, private key blocks, a bearer token, the value of an
``Authorization:`` header or of an ``api_key=`` / ``password:`` pair, and ``user:secret@`` before
a host: each becomes ``<secret>`` (``<credentials>`` before a host), the word before it kept. A
model's reply may repeat a key a prompt or a server leaked; a server's error may quote a header.
The patterns are the formats' own (detect-secrets, for one, knows OpenAI keys only by their
``T3BlbkFJ`` infix, so ``sk-live-...`` passes it), and a key needs a digit or its vendor's
prefix, so "bearer instruments" or "sk-learn" stay words.

Only whole tokens go: a user or host name as a word (so host "tiny" leaves "tinyllama" alone),
a home directory as a path prefix (home "/data/max" leaves "/data/maxine" alone). User and host
names are matched in any case (a reply writes "Max" for user "max"; DNS ignores case). Fields
that hold what macprof, the OS or the hardware name (the chip, a method, a status) are left as
they are (secrets aside): they carry nothing of the user, and replacing "M4" in "Apple M4 Max"
for a user named "M4" would corrupt the chip and, by the gap it leaves, tell the user name. A
path under the system's own folders (/usr, /sys, /System...) is kept: it names the OS, not the user.
"""

from __future__ import annotations

import copy
import getpass
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from macprof.model import kinds
from macprof.model.kind import HOST_ID, MODEL_PATH, OWN, PATH, TEXT, VOCAB
from macprof.model.log import RunLog

_WORD = r"[^\W_]"  # a letter or digit: a name next to one is part of a longer word, not the name
_OTHER_HOMES = r"/(?:Users|home)/[^/\s\"']+"  # any other user's home directory (a mounted volume)
NAMES = {"<home>": "home-directory paths", "<user>": "user names", "<host>": "host names",
         "<path>": "folders of paths", "<credentials>": "URL credentials", "<query>": "URL queries",
         "<secret>": "secret-shaped strings (API keys, tokens, passwords)"}

_EDGE, _END = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
_DIGIT = r"(?=[A-Za-z0-9_-]*[0-9])"  # a random key holds a digit; a word like "sk-learn-compatible" none
# (the secret's pattern, the part before it that stays): every secret-shaped string share removes
SECRETS = (
    (rf"{_EDGE}(?:sk|rk)[-_]{_DIGIT}[A-Za-z0-9_-]{{16,}}", ""),  # OpenAI sk-/sk-proj-, Stripe sk_live_, Anthropic sk-ant-
    (rf"{_EDGE}hf_[A-Za-z0-9]{{20,}}{_END}", ""),  # Hugging Face
    (rf"{_EDGE}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{30,}}){_END}", ""),  # GitHub
    (rf"{_EDGE}glpat-[A-Za-z0-9_-]{{20,}}", ""),  # GitLab
    (rf"{_EDGE}xox[abposr]-[A-Za-z0-9-]{{10,}}", ""),  # Slack
    (rf"{_EDGE}(?:AKIA|ASIA)[0-9A-Z]{{16}}{_END}", ""),  # AWS access key id
    (rf"{_EDGE}AIza[0-9A-Za-z_-]{{30,}}", ""),  # Google API key (35 after AIza)
    (rf"{_EDGE}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}", ""),  # a JSON web token
    (r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.|\n)*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", ""),
    (r"(?i:\b(?:proxy-)?authorization)[\"']?\s*[:=]\s*[\"']?(?:(?i:bearer|basic|token|digest)\s+)?[^\s\"',;]+",
     r"(?i:\b(?:proxy-)?authorization)[\"']?\s*[:=]\s*[\"']?(?:(?i:bearer|basic|token|digest)\s+)?"),
    (r"(?i:\bbearer)\s+(?=\S*[0-9])[A-Za-z0-9._~+/=-]{8,}", r"(?i:\bbearer)\s+"),
    (r"(?i:\b(?:x-)?api[_-]?key|\bapikey|\b(?:access|auth|refresh|id)[_-]?token|\bclient[_-]?secret|\bsecret[_-]?key"
     r"|\bpassword|\bpasswd)[\"']?\s*[:=]\s*[\"']?[^\s\"',;&]{4,}",
     r"(?i:\b(?:x-)?api[_-]?key|\bapikey|\b(?:access|auth|refresh|id)[_-]?token|\bclient[_-]?secret|\bsecret[_-]?key"
     r"|\bpassword|\bpasswd)[\"']?\s*[:=]\s*[\"']?"),
)
# user:secret@host with no scheme before it (a URL's are its own: _url)
_BARE_CREDENTIALS = r"(?<![\w/@.%+:-])[\w.%+-]+:[^\s@/:\"'<>]+(?=@[A-Za-z0-9\[])"

# a URL (scheme://...), up to what cannot be part of one in a message
_URL = r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>()\[\]{}]+"
_PATH_CHARS = r"[^\s\"'<>|:;,()\[\]{}*?]"
# a Windows path (C:\Users\... or C:/...), and a POSIX one (/a/b, ~/a): not inside a word, a URL
# ("http://h/v1": its slashes follow ":" or a letter) or a ratio ("tok/s")
_WINDOWS = rf"(?<![\w]){'[A-Za-z]'}:[\\/]{_PATH_CHARS}*"
_POSIX = rf"(?<![\w.~:/\\<>@-])(?:~(?=[/\\])|/(?=[^\s/]))(?:{_PATH_CHARS}|\\)*"
# folders of the OS and its packages: a path there names the system, not its user
SYSTEM_ROOTS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "etc", "dev", "proc", "sys", "System", "Library",
                "Applications", "opt/homebrew")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _identifiers() -> list[tuple[str, str]]:
    """(text to remove, what replaces it): this machine's home directory, user names (the login,
    and the account's full name where the system keeps one) and host names."""
    found: dict[str, str] = {}
    home = os.path.expanduser("~")
    if home and home not in ("/", "~"):
        found[home.rstrip("/")] = "<home>"
    try:
        user = getpass.getuser()
        found[user] = "<user>"
    except Exception:  # noqa: BLE001 - no user name to remove
        user = ""
    full = _full_name(user)
    if full:
        found[full] = "<user>"
    host = socket.gethostname()
    if host:
        found[host] = "<host>"
        found[host.split(".")[0]] = "<host>"
    # one-letter names would take every "a" and "x" of the messages; paths still go by prefix
    return [(k, v) for k, v in found.items() if len(k) >= 2 or v == "<home>"]


def _full_name(user: str) -> str:
    """The account's full name (the GECOS field's first part: "Max Mustermann"), where there is one."""
    try:
        import pwd

        return pwd.getpwnam(user).pw_gecos.split(",")[0].strip()
    except (ImportError, KeyError, OSError):  # no pwd (Windows), no such account
        return ""


def _pattern(text: str, label: str) -> str:
    body = re.escape(text)
    if label == "<home>":
        return body + r"(?![\w.-])"  # a path prefix: /home/max/x and /home/max, never /home/maxine
    if label.startswith(("<host", "<user")):  # in any case: a reply writes "Max" for user "max"
        return rf"(?<!{_WORD})(?i:{body})(?!{_WORD})"
    return rf"(?<!{_WORD}){body}(?!{_WORD})"


def _alternation(parts: list[tuple[str, str]]) -> re.Pattern:
    """One regular expression of (pattern, label) alternatives, each a named group g<i>."""
    return re.compile("|".join(f"(?P<g{i}>{p})" for i, (p, _) in enumerate(parts)))


_SECRET_KEPT = [re.compile(kept) for _, kept in SECRETS]


class _Scrubber:
    """Every identifier in one regular expression, longest first, so a replacement is never
    scanned again ("<home>" holds "home": a user named "home" must not turn it into "<<user>>").
    Three of them: the whole of it (TEXT), without the user and host names (OWN: macprof's own
    words), and names and homes alone (inside a URL, a path's file name)."""

    def __init__(self, replacements: list[tuple[str, str]], model_paths: list[tuple[str, str]] | None = None) -> None:
        ordered = sorted({t: lab for t, lab in replacements if t}.items(), key=lambda kv: -len(kv[0]))
        self.homes = [t for t, lab in ordered if lab == "<home>"]
        names = [(_pattern(t, lab), lab) for t, lab in ordered if lab != "<home>"]
        homes = [(_pattern(t, "<home>"), "<home>") for t in self.homes] + [(_OTHER_HOMES, "<home>")]
        paths = [(re.escape(p), lab) for p, lab in sorted(model_paths or [], key=lambda kv: -len(kv[0])) if p]
        secrets = [(p, f"secret{i}") for i, (p, _) in enumerate(SECRETS)] + [(_BARE_CREDENTIALS, "<credentials>")]
        found = [*secrets, (_URL, "url"), *paths, (_WINDOWS, "path"), (_POSIX, "path")]
        # "secrets": every string, whatever its kind (macprof's words, the chip's, hold none)
        self.parts = {"full": found + homes + names, "own": found + homes, "names": secrets + homes + names,
                      "secrets": secrets}
        self.rx = {mode: _alternation(parts) for mode, parts in self.parts.items()}
        self.hits: dict[str, int] = {}

    def count(self, label: str) -> str:
        self.hits[label] = self.hits.get(label, 0) + 1
        return label

    def text(self, value: str, mode: str = "full") -> str:
        parts = self.parts[mode]

        def sub(m: re.Match) -> str:
            assert m.lastgroup is not None  # every alternative is a named group g<i>
            label = parts[int(m.lastgroup[1:])][1]
            if label == "url":
                return self._url(m.group(), mode)
            if label == "path":
                return self._path(m.group(), mode)
            if label.startswith("secret"):  # the word before a secret stays ("Authorization: <secret>")
                kept = _SECRET_KEPT[int(label[6:])].match(m.group())
                return (kept.group() if kept else "") + self.count("<secret>")
            return self.count(label)

        return self.rx[mode].sub(sub, value)

    def _url(self, text: str, mode: str) -> str:
        """Without its credentials and query; its host's and path's names scrubbed."""
        core = text.rstrip(".,;:!")
        tail = text[len(core):]
        try:
            parts = urlsplit(core)
            netloc, path = parts.netloc, parts.path
        except ValueError:  # not a URL after all ("http://[::1"): its credentials still go
            return re.sub(r"(://)[^/\s@]*@", lambda m: m.group(1) + self.count("<credentials>") + "@", core) + tail
        _, at, host = netloc.rpartition("@")
        if at:
            self.count("<credentials>")
        names = "names" if mode == "full" else None
        if names:
            host = self.text(host, names)
        path = self._path(path, mode) if parts.scheme == "file" and path else \
            (self.text(path, names) if names else path)
        query = "?" + self.count("<query>") if parts.query else ""
        return f"{parts.scheme}://{host}{path}{query}" + tail

    def _path(self, text: str, mode: str = "full") -> str:
        """A path less its folders: ``<path>/NAME`` (``<home>/NAME`` directly in a home
        directory), ``<home>`` for a home itself. One of the system's folders is kept."""
        core = text.rstrip(".")
        tail = text[len(core):]
        sep = "\\" if re.match(r"[A-Za-z]:\\", core) or ("\\" in core and "/" not in core) else "/"
        folder, _, name = core.rstrip(sep).rpartition(sep)
        trailing = sep if core.endswith(sep) and len(core) > 1 else ""
        if self._is_home(core.rstrip(sep)):
            return self.count("<home>") + trailing + tail
        if not folder:  # "/v1", "/health": one name at the root says nothing more
            return self.text(core, "names") + tail if mode == "full" else core + tail
        if self._system(core) and not self.rx["names"].search(core):
            return core + tail
        label = "<home>" if self._is_home(folder) else "<path>"
        name = self.text(name, "names") if mode == "full" else name
        return self.count(label) + sep + name + trailing + tail

    def _is_home(self, path: str) -> bool:
        return path == "~" or path in self.homes or bool(re.fullmatch(r"/(?:Users|home)/[^/]+|[A-Za-z]:[\\/]Users[\\/][^\\/]+",
                                                                      path, re.IGNORECASE))

    @staticmethod
    def _system(path: str) -> bool:
        return any(path == "/" + root or path.startswith("/" + root + "/") for root in SYSTEM_ROOTS)

    def value(self, value, kind: str):
        """``value`` (a string, or anything holding strings) redacted as its kind says."""
        if isinstance(value, str):
            return self._string(value, kind)
        if isinstance(value, dict):  # a free-form value: its keys are macprof's or a server's words
            keyed = kinds.FREE_KEYS if kind == TEXT else {}
            return {self.text(k, "own") if isinstance(k, str) else k: self.value(v, keyed.get(k, kind))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, kind) for v in value]
        return value

    def _string(self, value: str, kind: str) -> str | None:
        if kind == VOCAB:
            return self.text(value, "secrets")
        if kind in (MODEL_PATH, HOST_ID):
            return None
        if kind == PATH and re.match(r"[A-Za-z]:[\\/]|~|/", value):
            return self._path(value)
        return self.text(value, "own" if kind == OWN else "full")

    def record(self, cls: type, data):
        """A record's JSON, each field as its kind says; a key the record lacks is TEXT."""
        if not isinstance(data, dict):
            return self.value(data, TEXT)
        fields = kinds.fields_of(cls)
        out = {}
        for key, v in data.items():
            f = fields.get(key, kinds.Field(TEXT))
            if f.record is None:
                out[key] = self.value(v, f.kind or TEXT)
            elif isinstance(v, list):
                out[key] = [self.record(f.record, x) for x in v]
            elif isinstance(v, dict) and f.mapping:
                out[key] = {k: self.record(f.record, x) for k, x in v.items()}
            else:
                out[key] = self.record(f.record, v)
        return out


def _hosts(log: dict) -> list[tuple[str, str]]:
    """(a rank's host, ``<host N>``) for every host the log's distributed models name, in order;
    loopback is kept (it names no machine), and so is nothing else."""
    found: dict[str, str] = {}
    for m in log.get("models") or []:
        if not isinstance(m, dict):
            continue
        groups = [((m.get("settings") or {}).get("distributed") or {}), m.get("distributed") or {}]
        for g in groups:
            for host in g.get("hosts") or [] if isinstance(g, dict) else []:
                if isinstance(host, str) and host not in found and host not in LOOPBACK:
                    found[host] = f"<host {len(found) + 1}>"
    # the name without its user too (ssh's messages name one), where no other host shares it
    bare = {h.rpartition("@")[2]: label for h, label in found.items() if "@" in h}
    return list(found.items()) + [(h, label) for h, label in bare.items() if h not in found]


def redact(log: dict, identifiers: list[tuple[str, str]] | None = None) -> tuple[dict, list[str]]:
    """The copy to share, and what was removed (in words that hold none of it)."""
    ids = _identifiers() if identifiers is None else identifiers
    names = _Scrubber(ids)  # a model's name may hold the user or host name: its label must not
    out = copy.deepcopy(log)
    removed: list[str] = []
    model_paths = []
    for m in out.get("models", []):
        identity = m.get("identity") or {}
        path = identity.get("path")
        name = names.text(str(identity.get("name")))
        if path:
            identity["path"] = None
            model_paths.append((path, f"<path of {name}>"))
            removed.append(f"model path of {name}")
        source = identity.get("source")
        if isinstance(source, dict):  # a model named on the command line: its path again, and a reference that is a path
            if source.get("path"):
                model_paths.append((source["path"], f"<path of {name}>"))
            source["path"] = None
            if source.get("store") == "path":
                source["ref"] = f"<path of {name}>"
    machine = out.get("machine") or {}
    if machine.get("host_id"):
        machine["host_id"] = None
        machine.setdefault("unknown", {})["host_id"] = "removed by macprof share"
        removed.append("host id")
    hosts = _hosts(out)
    # a model's path also appears in messages (a refused case, a load error): replaced there too
    scrub = _Scrubber(ids + hosts, model_paths)
    out = scrub.record(RunLog, out)
    words = {**NAMES, **{label: "distributed host names" for _, label in hosts}}
    counted: dict[str, int] = {}
    for label, n in scrub.hits.items():
        what = words.get(label, "the model path in messages: " + label)
        counted[what] = counted.get(what, 0) + n
    removed += [f"{n} occurrence(s) of {what}" for what, n in sorted(counted.items())]
    out["redacted"] = {"by": "macprof share", "removed": removed}
    # the copy gets its own digest when saved (store/digest.py), of what it holds; the original's
    # is not kept: a guess at a removed name could be checked against it. The copy still tells
    # its run (store/logset.py _run_key: when, on what machine, which model files)
    out.pop("digest", None)
    return out, removed


def default_output(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json").removesuffix(".journal.jsonl") + ".shared.json")
