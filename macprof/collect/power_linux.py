"""Linux telemetry from sysfs: RAPL energy counters (powercap), thermal zones, the mains supply.

Every read is a few small file reads, cheap enough for the parent's sampler (never a subprocess).
Where the OS gives nothing, the reason is returned instead of a figure: no powercap tree, a
counter readable by root only, no thermal zone. Paths are parameters so that tests run on a
fake sysfs tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
THERMAL = Path("/sys/class/thermal")
POWER_SUPPLY = Path("/sys/class/power_supply")
# since Linux 5.10 energy_uj is 0400 (CVE-2020-8694, the PLATYPUS power side channel)
ROOT_ONLY = "energy_uj is readable by root only since Linux 5.10 (CVE-2020-8694)"


@dataclass
class RaplDomain:
    name: str  # "package-0", "dram", "core", "psys", ...
    path: Path
    max_uj: int | None
    last_uj: int | None = None


@dataclass
class Rapl:
    """The readable RAPL zones; ``watts`` turns two counter readings into the mean power of
    the interval between them, across the counter's wrap-around."""

    domains: list[RaplDomain] = field(default_factory=list)

    def read(self) -> dict[str, int]:
        out = {}
        for d in self.domains:
            try:
                out[d.name] = int((d.path / "energy_uj").read_text())
            except (OSError, ValueError):
                continue
        return out

    def watts(self, before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
        if seconds <= 0:
            return {}
        out = {}
        for d in self.domains:
            delta = counter_delta(before[d.name], after[d.name], d.max_uj) \
                if d.name in before and d.name in after else None
            if delta is not None:
                out[d.name] = delta / 1e6 / seconds
        return out


def counter_delta(before: int, after: int, max_uj: int | None) -> int | None:
    """Microjoules between two readings of a counter that wraps to 0 after ``max_uj``
    (max_energy_range_uj); one wrap at most between readings, which at the sampler's period
    holds for any real chip (a wrap takes minutes even at hundreds of watts). A counter that
    went back without a known range gives None: the interval is unknown, not zero."""
    if after >= before:
        return after - before
    return max_uj - before + after if max_uj else None


def open_rapl(root: Path = POWERCAP) -> tuple[Rapl | None, str | None]:
    """The readable top-level RAPL zones (intel-rapl:N and their subzones, named by their
    ``name`` file, numbered where several packages share a name), or the reason there are none."""
    if not root.is_dir():
        return None, f"no RAPL: {root} absent"
    zones = sorted(p for p in root.iterdir() if p.name.startswith(("intel-rapl:", "amd-rapl:")) and ":" in p.name)
    if not zones:
        return None, f"no RAPL: no intel-rapl or amd-rapl zone under {root}"
    domains: list[RaplDomain] = []
    denied = False
    for z in zones:
        try:
            name = (z / "name").read_text().strip()
            int((z / "energy_uj").read_text())
        except PermissionError:
            denied = True
            continue
        except (OSError, ValueError):
            continue
        domains.append(RaplDomain(name=_unique(name, domains), path=z, max_uj=_int(z / "max_energy_range_uj")))
    if not domains:
        return None, f"no RAPL: {ROOT_ONLY}" if denied else f"no RAPL: no readable energy_uj under {root}"
    return Rapl(domains), None


def _unique(name: str, domains: list[RaplDomain]) -> str:
    taken = {d.name for d in domains}
    if name not in taken:
        return name
    k = 1
    while f"{name}-{k}" in taken:
        k += 1
    return f"{name}-{k}"


def _int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def thermal_zones(root: Path = THERMAL) -> tuple[list[Path], str | None]:
    zones = sorted(root.glob("thermal_zone*")) if root.is_dir() else []
    if not zones:
        return [], f"no thermal zones: {root} absent" if not root.is_dir() else f"no thermal zone under {root}"
    return zones, None


def read_temps(zones: list[Path]) -> dict[str, float]:
    """Each zone's temperature in °C (the file holds millidegrees), keyed by its type."""
    out: dict[str, float] = {}
    for z in zones:
        try:
            kind = (z / "type").read_text().strip() or z.name
            out[kind if kind not in out else f"{kind}:{z.name}"] = int((z / "temp").read_text()) / 1000
        except (OSError, ValueError):
            continue
    return out


def power_source(root: Path = POWER_SUPPLY) -> tuple[str | None, str | None]:
    """"ac" or "battery" from the mains supplies' ``online`` files, else the reason."""
    if not root.is_dir():
        return None, f"no power supply information: {root} absent"
    mains = [p for p in root.iterdir() if _text(p / "type") == "Mains"]
    if not mains:
        return None, f"no mains supply listed under {root} (a desktop or a VM reports none)"
    online = [_text(p / "online") for p in mains]
    return ("ac" if "1" in online else "battery"), None


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
