"""A model sharded over an MLX distributed group: models.toml's ``distributed`` table and the
command line's --hosts / --backend / --parallel / --link-gbs, as one frozen setting.

    distributed = { hosts = ["10.0.0.1", "10.0.0.2"], backend = "ring", parallel = "tensor" }

``hosts`` lists one entry per rank (mlx.launch's --hosts); a host named twice runs two ranks
there, so ["127.0.0.1", "127.0.0.1"] is two local ranks over loopback. ``link_gbs`` (optional)
is the link's bandwidth for the prediction; without it the prediction uses the link speed
the diagnostic pass measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from macprof.errors import MacprofError

BACKENDS = ("ring", "jaccl", "jaccl-ring", "mpi")
PARALLEL = ("tensor", "pipeline")
KEYS = ("hosts", "backend", "parallel", "link_gbs")


@dataclass(frozen=True)
class Distributed:
    hosts: tuple[str, ...]
    backend: str = "ring"
    parallel: str = "tensor"
    link_gbs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "backend": self.backend, "parallel": self.parallel, "link_gbs": self.link_gbs}


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
        if key == "backend" and v not in BACKENDS:
            raise MacprofError(f"{where}: distributed.backend must be one of {', '.join(BACKENDS)}, not {v!r}")
        if key == "parallel" and v not in PARALLEL:
            raise MacprofError(f"{where}: distributed.parallel must be tensor or pipeline, not {v!r}")
        if key == "link_gbs" and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise MacprofError(f"{where}: distributed.link_gbs must be a positive number of GB/s, not {v!r}")
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
    return Distributed(tuple(h.strip() for h in table["hosts"]), table.get("backend", "ring"),
                       table.get("parallel", "tensor"), float(link) if link is not None else None)


def from_cli(hosts: str | None, backend: str | None, parallel: str | None, link_gbs: float | None) -> dict | None:
    """--hosts a,b[,...] (or --hosts N: N local ranks over loopback) and the rest, as a partial table."""
    table: dict[str, Any] = {}
    if hosts:
        text = hosts.strip()
        table["hosts"] = ["127.0.0.1"] * int(text) if text.isdigit() else [h.strip() for h in text.split(",") if h.strip()]
    for key, value in (("backend", backend), ("parallel", parallel), ("link_gbs", link_gbs)):
        if value is not None:
            table[key] = value
    return table or None
