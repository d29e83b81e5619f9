"""A model sharded over an MLX distributed group: models.toml's ``distributed`` table and the
command line's --hosts / --backend / --parallel / --link-gbs, as one frozen setting.

    distributed = { hosts = ["10.0.0.1", "10.0.0.2"], backend = "ring", parallel = "tensor" }

``hosts`` lists one entry per rank (mlx.launch's --hosts); a host named twice runs two ranks
there, so ["127.0.0.1", "127.0.0.1"] is two local ranks over loopback. ``link_gbs`` (optional)
is the link's bandwidth for the prediction; without it the prediction uses the link speed
the diagnostic pass measured.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from macprof.errors import MacprofError
from macprof.measure.words import PARALLEL  # the layouts the group's ceiling is computed for

BACKENDS = ("ring", "jaccl", "jaccl-ring", "mpi")
KEYS = ("hosts", "backend", "parallel", "link_gbs")
LINK_GBS_MAX = 1_000_000  # GB/s (a petabyte a second): far past any link, and every figure made of it finite

# A host reaches ssh (the preflight's, and mlx.launch's, which puts no "--" before it): only
# what a host can be is let through, so none can be an option (-oProxyCommand=...) or shell text.
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # RFC 1123
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")  # a portable user name (POSIX), no leading "-"
HOST_FORMS = "a host name, an IPv4 or IPv6 address, or user@ one of those"
# One rank per host entry: past this, a group is no laptop cluster but a typo (--hosts 70000 built a
# list of 70,000 and a launch command no OS takes, and the run died with its journal unended).
MAX_HOSTS = 64


def host_refusal(host: object) -> str | None:
    """Why ``host`` is not a host mlx.launch and ssh may be given, or None."""
    if not isinstance(host, str):
        return f"{host!r} is not a host name ({HOST_FORMS})"
    user, at, name = host.rpartition("@")
    if at and not _USER.fullmatch(user):
        return f"{host!r}: {user!r} is not a user name (letters, digits, '_', '.', '-'; not first '-')"
    if _ip(name) or (len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split("."))):
        return None
    return f"{host!r} is not {HOST_FORMS}"


def _ip(text: str) -> bool:
    if "%" in text:  # an IPv6 zone id is free text: never passed on
        return False
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_hosts(where: str, hosts: Iterable[object]) -> None:
    """Refuse, in one line naming ``where``, more than MAX_HOSTS hosts, or the first host that is not one."""
    hosts = list(hosts)
    if len(hosts) > MAX_HOSTS:
        raise MacprofError(f"{where}: {len(hosts)} hosts; at most {MAX_HOSTS} (one rank each)")
    for i, host in enumerate(hosts):
        refusal = host_refusal(host)
        if refusal:
            raise MacprofError(f"{where}[{i}]: {refusal}")


@dataclass(frozen=True)
class Distributed:
    hosts: tuple[str, ...]
    backend: str = "ring"
    parallel: str = "tensor"
    link_gbs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "backend": self.backend, "parallel": self.parallel, "link_gbs": self.link_gbs}


def finite(v: float) -> bool:
    """A number a log can hold as one: not NaN, not infinite, not an integer past float's range."""
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer past float's range
        return False


def partial(where: str, value: Any) -> dict:
    """One layer's table (models.toml or the command line), keys and types checked; merged later."""
    if isinstance(value, Distributed):
        return value.to_dict()
    if not isinstance(value, dict):
        raise MacprofError(f"{where}: key 'distributed' must be a table such as "
                           f'{{ hosts = ["127.0.0.1", "127.0.0.1"], backend = "ring", parallel = "tensor" }}')
    for key, v in value.items():
        if key not in KEYS:
            raise MacprofError(f"{where}: distributed: unknown key '{key}' (known: {', '.join(KEYS)})")
        if v is None:
            continue
        if key == "hosts" and not (isinstance(v, list) and len(v) >= 2 and all(isinstance(h, str) and h.strip() for h in v)):
            raise MacprofError(f"{where}: distributed.hosts must list two or more hosts (one per rank), not {v!r}")
        if key == "hosts":
            check_hosts(f"{where}: distributed.hosts", [h.strip() for h in v])
        if key == "backend" and v not in BACKENDS:
            raise MacprofError(f"{where}: distributed.backend must be one of {', '.join(BACKENDS)}, not {v!r}")
        if key == "parallel" and v not in PARALLEL:
            raise MacprofError(f"{where}: distributed.parallel must be tensor or pipeline, not {v!r}")
        if key == "link_gbs" and (isinstance(v, bool) or not isinstance(v, (int, float)) or not finite(v)
                                  or not 0 < v <= LINK_GBS_MAX):
            raise MacprofError(f"{where}: distributed.link_gbs must be a number of GB/s, more than 0, at most "
                               f"{LINK_GBS_MAX:g}, not {v!r}")
    return {k: v for k, v in value.items() if v is not None}


def finish(where: str, table: dict | None) -> Distributed | None:
    """The merged table as the setting; hosts are required once everything is merged."""
    if not table:
        return None
    if isinstance(table, Distributed):
        return table
    if "hosts" not in table:
        raise MacprofError(f"{where}: distributed needs hosts (--hosts 127.0.0.1,127.0.0.1 or hosts = [...])")
    link = table.get("link_gbs")
    check_hosts(f"{where}: distributed.hosts", [h.strip() for h in table["hosts"]])  # a journal's settings too
    return Distributed(tuple(h.strip() for h in table["hosts"]), table.get("backend", "ring"),
                       table.get("parallel", "tensor"), float(link) if link is not None else None)


def from_cli(hosts: str | None, backend: str | None, parallel: str | None, link_gbs: float | None) -> dict | None:
    """--hosts a,b[,...] (or --hosts N: N local ranks over loopback) and the rest, as a partial table."""
    table: dict[str, Any] = {}
    if hosts:
        text = hosts.strip()
        if text.isdigit() and not (text.isdecimal() and len(text) <= 6 and int(text) <= MAX_HOSTS):  # before a list of N
            raise MacprofError(f"--hosts {text[:12]}{'...' if len(text) > 12 else ''}: at most {MAX_HOSTS} local ranks")
        table["hosts"] = ["127.0.0.1"] * int(text) if text.isdigit() else [h.strip() for h in text.split(",") if h.strip()]
        check_hosts("--hosts", table["hosts"])  # the option named, not "command line"
    for key, value in (("backend", backend), ("parallel", parallel), ("link_gbs", link_gbs)):
        if value is not None:
            table[key] = value
    return table or None
