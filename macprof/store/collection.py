"""`macprof collect`: run logs (files, folders of them) into the results database.

Each log is read and its JSON parsed once (store/logset.py) and verified (store/verify.py: its
figures recomputed from its raw records, its digest checked); one that does not verify is
refused, or with ``allow_unverified`` collected and marked (``logs.verified`` 0, with its
problems). Then it is written in one transaction of its own: its machine and models where the database lacks them, its row in ``logs``, and its
results in one executemany. A log that cannot be read is refused alone, in one line, and the
others are collected. A run already in the database is not collected again (its ``run_id``,
logset.run_key: a `macprof share` copy is the same run as its original), except that an original
replaces a shared copy collected before it (it keeps the host id the copy lost).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from macprof.analyse import results
from macprof.errors import MacprofError
from macprof.model.log import RunLog
from macprof.store import database, runlog
from macprof.store.logset import NOT_JSON, is_shared, log_files, read_log, run_key
from macprof.store.verify import Verification, verify


@dataclass
class Collected:
    """What one collect did, each entry one line naming the file."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # an original over its shared copy
    already: list[str] = field(default_factory=list)  # the same run was there
    passed_over: list[str] = field(default_factory=list)  # in a folder, not a run log
    refused: list[str] = field(default_factory=list)  # could not be read: why
    results: int = 0  # result rows written


def collect_into(con: sqlite3.Connection, paths: list[Path], allow_unverified: bool = False) -> Collected:
    """Every run log of ``paths`` into the open database ``con``."""
    done = Collected()
    for path, named in log_files(paths):
        try:
            found = read_log(path, named)
        except MacprofError as exc:
            done.refused.append(str(exc))
            continue
        if found == NOT_JSON:  # a log cut short, most likely: compare passes it over, a collection refuses it
            try:
                runlog.load(path)
            except MacprofError as exc:
                done.refused.append(str(exc))
                continue
        if isinstance(found, str):
            done.passed_over.append(f"{path} ({found})")
            continue
        log, raw = found
        checked = verify(log, raw)
        if not checked.ok and not allow_unverified:
            done.refused.append(refusal(path, checked))
            continue
        add_log(con, path, log, raw, done, checked)
    return done


def refusal(path: Path, checked: Verification) -> str:
    """One line: the log does not verify, its first problem, and how to see the others."""
    more = f" and {len(checked.problems) - 1} more" if len(checked.problems) > 1 else ""
    return (f"{path}: does not verify ({checked.problems[0].line()}{more}): `macprof verify {path}` names each "
            f"problem; --allow-unverified collects it, marked")


def collect(paths: list[Path], db: Path, allow_unverified: bool = False) -> Collected:
    """``macprof collect PATHS --db DB``: the database created or migrated first."""
    con = database.connect(db)
    try:
        return collect_into(con, paths, allow_unverified)
    finally:
        con.close()


def run_id(log: RunLog, raw: dict | None) -> str:
    """Which run a log records, as a sha256: of logset.run_key, what a run's log and its shared
    copy have in common; a log too old or too broken to have one (no start time) is itself,
    the sha256 of its content."""
    data = raw if raw is not None else log.to_json()
    key = run_key(data)
    text = json.dumps(["run", key] if key is not None else ["content", data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def add_log(con: sqlite3.Connection, path: Path, log: RunLog, raw: dict | None, done: Collected,
            checked: Verification) -> None:
    """One log in one transaction: all its rows, or none of them."""
    rid, shared = run_id(log, raw), is_shared(raw)
    con.execute("BEGIN IMMEDIATE")
    try:
        there = con.execute("SELECT log_id, file_name, shared FROM logs WHERE run_id = ?", (rid,)).fetchone()
        if there and not (there[2] and not shared):
            done.already.append(f"{path} (the same run as {there[1]}, already collected)")
            con.execute("ROLLBACK")
            return
        if there:  # the original over a shared copy
            con.execute("DELETE FROM logs WHERE log_id = ?", (there[0],))
        machine = _id(con, "machines", "machine_id", results.machine_row(log))
        log_id = _insert(con, "logs", {
            "run_id": rid, "file_name": path.name, "shared": shared, "machine_id": machine, **results.log_row(log),
            "collected_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "verified": checked.ok, "verify_problems": "\n".join(p.line() for p in checked.problems) or None})
        models = [_id(con, "models", "model_id", results.model_row(m)) for m in log.models]
        rows = [{**r, "log_id": log_id, "model_id": models[r["model_index"]]} for r in results.result_rows(log)]
        names = [c.name for c in database.RESULTS if c.name != "result_id"]
        con.executemany(f"INSERT INTO results ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})", rows)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    (done.replaced if there else done.added).append(str(path))
    done.results += len(rows)


def _insert(con: sqlite3.Connection, table: str, row: dict) -> int:
    names = list(row)
    cur = con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})", row)
    assert cur.lastrowid is not None
    return cur.lastrowid


def _id(con: sqlite3.Connection, table: str, id_column: str, row: dict) -> int:
    """The id of the row with ``row``'s key, inserted where the table lacks it."""
    found = con.execute(f"SELECT {id_column} FROM {table} WHERE key = ?", (row["key"],)).fetchone()
    return found[0] if found else _insert(con, table, row)
