"""`macprof collect`: run logs (files, folders of them) into the results database.

Each file is examined on its own (``examine``: pure of the database, so many run in a process
per core): read and its JSON parsed once (store/logset.py), verified (store/verify.py: its
figures rebuilt from its raw records, its digest checked) and made into rows. One that cannot be
read, or does not verify (unless ``allow_unverified``: then collected, ``logs.verified`` 0 with
its problems), is refused alone, in one line, and the others are collected. The database is
written here, in the files' order, in one transaction with a savepoint per log: its machine and
models where the database lacks them, its row in ``logs``, its results in one executemany, all
or none. A run already in the database is not collected again (its ``run_id``, logset.run_key:
a `macprof share` copy is the same run as its original), except that an original replaces a
shared copy collected before it (it keeps the host id the copy lost).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
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
    refused: list[str] = field(default_factory=list)  # could not be read, or does not verify: why
    results: int = 0  # result rows written


@dataclass(frozen=True)
class Examined:
    """One file as collect found it: refused or passed over (a line saying why), or a log's rows
    for the database (the machines, models and logs rows without their ids). Small and plain, so
    a worker process can hand it back."""

    path: str
    refused: str | None = None
    passed_over: str | None = None
    run_id: str = ""
    shared: bool = False
    machine: dict = field(default_factory=dict)
    log: dict = field(default_factory=dict)
    models: tuple[dict, ...] = ()
    results: tuple[dict, ...] = ()


def examine(item: tuple[Path, bool, bool]) -> Examined:
    """(file, named on the command line, allow_unverified) -> what goes into the database: the
    file read and its JSON parsed once, the log verified, its rows made. Pure of the database."""
    path, named, allow_unverified = item
    try:
        found = read_log(path, named)
        if found == NOT_JSON:  # a log cut short, most likely: compare passes it over, a collection refuses it
            runlog.load(path)
    except MacprofError as exc:
        return Examined(str(path), refused=str(exc))
    if isinstance(found, str):
        return Examined(str(path), passed_over=f"{path} ({found})")
    log, raw = found
    checked = verify(log, raw)
    if not checked.ok and not allow_unverified:
        return Examined(str(path), refused=refusal(path, checked))
    shared = is_shared(raw)
    row = {"file_name": path.name, "shared": shared, **results.log_row(log), "verified": checked.ok,
           "verify_problems": "\n".join(p.line() for p in checked.problems) or None}
    return Examined(str(path), run_id=run_id(log, raw), shared=shared, machine=results.machine_row(log), log=row,
                    models=tuple(results.model_row(m) for m in log.models), results=tuple(results.result_rows(log)))


def refusal(path: Path, checked: Verification) -> str:
    """One line: the log does not verify, its first problem, and how to see the others."""
    return f"{path}: {checked.brief(str(path))}; --allow-unverified collects it, marked"


def run_id(log: RunLog, raw: dict | None) -> str:
    """Which run a log records, as a sha256: of logset.run_key, what a run's log and its shared
    copy have in common; a log too old or too broken to have one (no start time) is itself,
    the sha256 of its content."""
    data = raw if raw is not None else log.to_json()
    key = run_key(data)
    text = json.dumps(["run", key] if key is not None else ["content", data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# Examining a file (parse, verify in full, rows) is most of collect's time and needs nothing of the
# others: with workers, from this many files on, files are examined in that many processes (the
# platform's default start method), the database written here in the files' order. Fewer are
# examined in this process: starting the workers would cost more than they save.
PARALLEL_FROM = 16


def cores() -> int:
    """The cores this process may run on: the workers `macprof collect` starts."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _examined(items: list[tuple[Path, bool, bool]], workers: int) -> Iterator[Examined]:
    workers = min(workers, len(items))
    if len(items) < PARALLEL_FROM or workers < 2:
        yield from map(examine, items)
        return
    with ProcessPoolExecutor(workers) as pool:
        yield from pool.map(examine, items, chunksize=4)


def collect_into(con: sqlite3.Connection, paths: list[Path], allow_unverified: bool = False,
                 workers: int = 1) -> Collected:
    """Every run log of ``paths`` into the open database ``con``: in one transaction, each log in
    a savepoint of its own (all its rows or none). Whatever stops the collect (an error, Ctrl-C)
    keeps the logs written before it, each whole. ``workers``: processes that examine the files
    (the command line gives one per core; a library caller's script need not be importable)."""
    done = Collected()
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    items = [(path, named, allow_unverified) for path, named in log_files(paths)]
    con.execute("BEGIN IMMEDIATE")
    try:
        for found in _examined(items, workers):
            _write(con, found, when, done)
    finally:
        con.execute("COMMIT")
    return done


def collect(paths: list[Path], db: Path, allow_unverified: bool = False, workers: int = 1) -> Collected:
    """``macprof collect PATHS --db DB``: the database created or migrated first."""
    con = database.connect(db)
    try:
        return collect_into(con, paths, allow_unverified, workers)
    finally:
        con.close()


def _write(con: sqlite3.Connection, e: Examined, when: str, done: Collected) -> None:
    """One examined file into the database (a savepoint: all its rows or none), or its line."""
    if e.refused or e.passed_over:
        (done.refused if e.refused else done.passed_over).append(e.refused or e.passed_over or "")
        return
    con.execute("SAVEPOINT log")
    try:
        there = con.execute("SELECT log_id, file_name, shared FROM logs WHERE run_id = ?", (e.run_id,)).fetchone()
        if there and not (there[2] and not e.shared):
            done.already.append(f"{e.path} (the same run as {there[1]}, already collected)")
        else:
            if there:  # the original over a shared copy
                con.execute("DELETE FROM logs WHERE log_id = ?", (there[0],))
            machine = _id(con, "machines", "machine_id", e.machine)
            log_id = _insert(con, "logs", {"run_id": e.run_id, "machine_id": machine, **e.log, "collected_utc": when})
            models = [_id(con, "models", "model_id", m) for m in e.models]
            rows = [{**r, "log_id": log_id, "model_id": models[r["model_index"]]} for r in e.results]
            names = [c.name for c in database.RESULTS if c.name != "result_id"]
            con.executemany(f"INSERT INTO results ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})",
                            rows)
            (done.replaced if there else done.added).append(e.path)
            done.results += len(rows)
        con.execute("RELEASE log")
    except BaseException:
        con.execute("ROLLBACK TO log")
        con.execute("RELEASE log")
        raise


def _insert(con: sqlite3.Connection, table: str, row: dict) -> int:
    names = list(row)
    cur = con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})", row)
    assert cur.lastrowid is not None
    return cur.lastrowid


def _id(con: sqlite3.Connection, table: str, id_column: str, row: dict) -> int:
    """The id of the row with ``row``'s key, inserted where the table lacks it."""
    found = con.execute(f"SELECT {id_column} FROM {table} WHERE key = ?", (row["key"],)).fetchone()
    return found[0] if found else _insert(con, table, row)
