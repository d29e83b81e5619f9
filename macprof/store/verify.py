"""Whether a run log proves its figures (docs/design.md "Logs that prove their figures"): every
summary figure recomputes from the log's raw records within rounding, no figure is impossible
(model/bounds.py), and its content digest matches (store/digest.py). Decode above the
published-bandwidth ceiling is flagged, not failed: a model small enough to sit in the chip's
caches can beat DRAM bandwidth.

The recomputation is build's own (analyse/build.py and the phases' builders): the log's raw
records are read back as the journal events they were built from (analyse/unbuild.py) and
built again, and every number of the rebuilt log is compared with the stored one. So verify
checks what `run` computes, by the code that computes it, and a figure added to a builder is
verified with it.

``verify(log, data)`` is the library call (`macprof verify`, `show` and `compare`'s warning,
`collect`): it returns a ``Verification``; it never raises for what a log holds.
"""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from macprof.errors import MacprofError
from macprof.model.log import RunLog
from macprof.phases import SWEEPS
from macprof.store.digest import DigestState

REL_TOL = 1e-9  # "within rounding": the same code on the same doubles gives the same double; a sum's order may not
ABS_TOL = 1e-12
# top-level keys that are no measurement: the definitions are the writing macprof's words
_NOT_FIGURES = ("definitions", "digest", "redacted", "migrated_from", "schema_version", "tool_version")


@dataclass(frozen=True)
class Finding:
    """One figure that disagrees, is impossible, or is flagged."""

    path: str  # where in the log, a JSON pointer without its leading slash: models/0/phases/warm/summary/...
    what: str  # what is wrong, in words
    model: str | None = None  # the model's name, where the figure is one of a model's
    stored: Any = None  # the value the log holds (None: null, or not one value)
    recomputed: Any = None  # the value its raw records give (None: not a recomputation)

    def line(self) -> str:
        """'models/0/phases/warm/summary/decode_tok_s/median (demo-small-f16): stored 1, recomputed 2'."""
        return f"{self.path}{f' ({self.model})' if self.model else ''}: {self.what}"


@dataclass(frozen=True)
class Verification:
    """The verdict on one log: ``ok`` when it verifies; ``problems`` (each a figure that does
    not recompute, an impossible one, or the digest), ``flags`` (what is possible but unusual),
    the digest's state and, where it is not a match, why."""

    problems: tuple[Finding, ...] = ()
    flags: tuple[Finding, ...] = ()
    digest: DigestState = "not checked"
    digest_note: str | None = None
    recomputed: bool = True  # whether the figures were recomputed (a cheap check of a matching digest compares none)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem, then one per flag, then the digest where it says something."""
        out = [p.line() for p in self.problems] + [f"flag: {f.line()}" for f in self.flags]
        if self.digest == "absent" and self.digest_note:
            out.append(self.digest_note)
        return out

    def brief(self, where: str) -> str:
        """What is said of the log at ``where`` that does not verify: its first problem, how many
        more, and how to see them (after its name, by each command's own words)."""
        more = f" and {len(self.problems) - 1} more" if len(self.problems) > 1 else ""
        return f"does not verify ({self.problems[0].line()}{more}): `macprof verify {where}` names each problem"

    def summary(self) -> str:
        """One line: it verifies (and how far), or how many problems it has."""
        if not self.ok:
            return f"does not verify: {len(self.problems)} problem(s)"
        how = "its figures recompute from its raw records" if self.recomputed else "no impossible figure"
        digest = {"matches": "its digest matches", "absent": "no digest", "not checked": "digest not checked"}
        return f"verifies: {how}, {digest.get(self.digest, self.digest)}" + \
               (f", {len(self.flags)} flag(s)" if self.flags else "")


def verify(log: RunLog, data: dict | None = None, cheap: bool = False) -> Verification:
    """``log`` (loaded: store/runlog.py) verified; ``data``: its JSON as read from its file
    (json.loads of the text), for the digest (None: not checked). Its figures are rebuilt from its
    raw records, but for ``cheap`` where the digest matches (a log whose digest matches holds what
    macprof wrote: `show` and `compare`'s check)."""
    from macprof.model.bounds import impossible
    from macprof.store.digest import state

    digest, note = state(data) if data is not None else ("not checked", None)
    recompute = not cheap or digest != "matches"
    problems: list[Finding] = []
    if digest == "differs":
        problems.append(Finding("digest", note or "its digest does not match"))
    names = [m.identity.name for m in log.models]
    problems += [Finding(i.path, i.what, _model(i.path, names)) for i in impossible(log)]
    if recompute:
        seen = {p.path for p in problems}
        problems += [p for p in _recomputed(log, log.to_json(), names) if p.path not in seen]
    return Verification(problems=tuple(problems), flags=tuple(_flags(log)), digest=digest, digest_note=note,
                        recomputed=recompute)


def read(path: Path) -> tuple[RunLog, dict]:
    """A run log file's typed log and its JSON as read (for the digest). A journal is not a run
    log: its log is built from it when read, and holds nothing stored to check. Raises
    MacprofError, in one line, for what cannot be read as a run log."""
    from macprof.store import runlog

    path = Path(path)
    if path.name.endswith(".jsonl"):
        raise MacprofError(f"{path}: a journal, not a run log: its figures are computed from it when read, "
                           f"there is nothing stored to verify (`macprof show` writes none; a finished run's log does)")
    text = runlog.read_text(path)
    data = runlog.parse_json(str(path), text)
    log = runlog.parse(str(path), text, data)
    return log, data


def verify_file(path: Path) -> Verification:
    """``verify`` of the log at ``path``; raises MacprofError where it cannot be read as one."""
    log, data = read(path)
    return verify(log, data)


def warning(where: str, log: RunLog, data: dict | None) -> str | None:
    """The one line `show`, `compare` and `plot` write on stderr (their output unchanged) for a
    log that does not verify; None where it does. Cheap: a log whose digest matches holds what
    macprof wrote, so its impossible figures are looked for but its summaries are not rebuilt
    (`macprof verify` rebuilds every log's); one without a digest, or whose digest differs, is
    rebuilt (some 10 ms for a default run's log)."""
    found = verify(log, data, cheap=True)
    return None if found.ok else f"macprof: warning: {where} {found.brief(where)}"


def load_checked(path: Path) -> tuple[RunLog, str | None]:
    """The log at ``path`` (a run log or a journal, as store/runlog.py load reads it) and the
    warning line where it does not verify; a journal has nothing stored to verify."""
    from macprof.store import runlog

    if Path(path).name.endswith(".jsonl"):
        return runlog.load(path), None
    log, data = read(path)
    return log, warning(str(path), log, data)


# -- the figures recomputed ------------------------------------------------------------------------
def _recomputed(log: RunLog, stored: dict, names: list[str]) -> list[Finding]:
    """Every number of the log that its raw records, built again, do not give."""
    from macprof.analyse.unbuild import kept, rebuilt

    try:
        again = rebuilt(log, stored).to_json()
    except MacprofError as exc:
        return [Finding("models", f"cannot be recomputed: {exc}")]
    skip = [f"models/{i}/{p}" for i, m in enumerate(stored.get("models") or ()) for p in kept(m)]
    out: list[Finding] = []
    for key in stored:
        if key not in _NOT_FIGURES and key in again:
            out += _differences(stored[key], again[key], key, skip, names)
    return out


def _differences(stored: Any, again: Any, at: str, skip: list[str], names: list[str]) -> Iterator[Finding]:
    """The numbers (and true/false) where ``stored`` and ``again`` differ, by path. A key only
    one side has is passed over (a figure of another version, or one not recomputed); words
    (a reason, a status) are the writing macprof's and are not compared."""
    if stored == again or any(fnmatch.fnmatchcase(at, p) for p in skip):
        return
    if isinstance(stored, dict) and isinstance(again, dict):
        for key in stored:
            if key in again:
                yield from _differences(stored[key], again[key], f"{at}/{key}", skip, names)
            elif _figures(stored[key]) and not any(fnmatch.fnmatchcase(f"{at}/{key}", p) for p in skip):
                yield Finding(f"{at}/{key}", "stored, but nothing of it is built from its raw records (a phase its "
                                             "settings do not list, a figure of no record)", _model(at, names))
    elif isinstance(stored, list) and isinstance(again, list):
        if len(stored) != len(again):
            yield Finding(at, f"{len(stored)} entries stored, {len(again)} in its raw records", _model(at, names),
                          len(stored), len(again))
            return
        for i, (a, b) in enumerate(zip(stored, again)):
            yield from _differences(a, b, f"{at}/{i}", skip, names)
    elif _number(stored) or _number(again) or isinstance(stored, bool) or isinstance(again, bool):
        if _number(stored) and _number(again) and math.isclose(stored, again, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return
        if stored is None and again is None:
            return
        yield Finding(at, f"stored {_text(stored)}, recomputed from its raw records {_text(again)}",
                      _model(at, names), stored, again)


def _figures(x: Any) -> bool:
    """Whether ``x`` is or holds a number or true/false (what a record's words alone are not)."""
    if isinstance(x, dict):
        return any(_figures(v) for v in x.values())
    if isinstance(x, list):
        return any(_figures(v) for v in x)
    return _number(x) or isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _text(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if _number(x):
        return f"{x:.6g}" if isinstance(x, float) else str(x)
    return json.dumps(x)[:60]


def _model(path: str, names: list[str]) -> str | None:
    parts = path.split("/")
    if len(parts) > 1 and parts[0] == "models" and parts[1].isdigit() and int(parts[1]) < len(names):
        return names[int(parts[1])]
    return None


# -- flags: possible, but said ------------------------------------------------------------------
def _flags(log: RunLog) -> Iterator[Finding]:
    """Decode above a ceiling: possible (a model that sits in the chip's caches beats DRAM), so
    flagged, not failed."""
    for i, m in enumerate(log.models):
        ph = m.phases
        roofs = [(f"phases/{name}/roofline", getattr(ph, name).roofline) for name in ("warm", "prefix")
                 if getattr(ph, name) is not None]
        for name in SWEEPS:
            sweep = ph.sweep(name)
            roofs += [(f"phases/{name}/cases/{j}/roofline", c.roofline) for j, c in enumerate(sweep.cases if sweep else ())]
        for where, roof in roofs:
            for side, words in (("spec", "the published-bandwidth ceiling"), ("measured", "the measured ceiling")):
                r = getattr(roof, side) if roof else None
                if r is not None and r.efficiency is not None and r.efficiency > 1:
                    yield Finding(f"models/{i}/{where}/{side}/efficiency",
                                  f"decode {_text(roof.decode_tok_s)} tok/s is above {words} ({_text(r.ceiling_tok_s)} "
                                  f"tok/s, {r.efficiency:.0%}): possible for a model small enough to stay in the "
                                  f"chip's caches; check the model's size and the bandwidth figure",
                                  m.identity.name, r.efficiency)
