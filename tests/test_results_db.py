"""The results database (`macprof collect`, store/database.py, store/collection.py,
analyse/results.py): one log per run whatever copies of it are collected, a broken log refused
alone, each log all or nothing, the figures as the logs hold them, and a schema documented,
versioned and migrated that plain sqlite3 can query."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from macprof.analyse import results
from macprof.analyse.headline import memory_figures
from macprof.store import collection, database, runlog
from tests.conftest import FIXTURES, cli

LOGS = FIXTURES / "runlogs"
OTHER = LOGS / "other-machine-demo-small.json"  # a default run on another machine, a `macprof share` copy
ROOT = FIXTURES.parent.parent


def _folder(tmp_path: Path, *names: str) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir(exist_ok=True)
    for n in names:
        shutil.copy(LOGS / n, folder / n)
    return folder


def _count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _dump(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def test_collecting_twice_changes_nothing(tmp_path):
    folder = _folder(tmp_path, "other-machine-demo-small.json", "tiny-a.json", "tiny-sweeps.json")
    db = tmp_path / "r.sqlite"
    first = cli("collect", folder, "--db", db)
    assert first.exit_code == 0, first.output
    before = _dump(db)
    again = cli("collect", folder, "--db", db, folder / "tiny-a.json")
    assert again.exit_code == 0, again.output
    assert _dump(db) == before
    assert "0 log(s) collected" in again.output and "4 already there" in again.output
    expected = sum(len(results.result_rows(runlog.load(folder / n))) for n in
                   ("other-machine-demo-small.json", "tiny-a.json", "tiny-sweeps.json"))
    assert _count(db, "logs") == 3 and _count(db, "results") == expected


def test_a_shared_copy_beside_its_original_is_one_log_and_the_original_is_kept(tmp_path):
    folder = _folder(tmp_path, "schema1.json")  # a log as `run` wrote it: it has its host id
    assert cli("share", folder / "schema1.json").exit_code == 0
    assert (folder / "schema1.shared.json").exists()
    db = tmp_path / "r.sqlite"
    out = cli("collect", folder, "--db", db)
    assert out.exit_code == 0, out.output
    assert "schema1.shared.json (the same run as schema1.json, already collected)" in out.output
    # the other way round: the copy first, then the original, which replaces it (its host id)
    db2 = tmp_path / "r2.sqlite"
    assert cli("collect", folder / "schema1.shared.json", "--db", db2).exit_code == 0
    out = cli("collect", folder / "schema1.json", "--db", db2)
    assert out.exit_code == 0 and "an original over its shared copy" in out.output, out.output
    for d in (db, db2):
        with sqlite3.connect(d) as con:
            assert con.execute("SELECT file_name, shared, host_id FROM logs").fetchall() == [("schema1.json", 0, "5bce98f7")]
        assert _count(d, "results") == len(results.result_rows(runlog.load(folder / "schema1.json")))


def test_each_run_of_many_copies_is_its_own_log(tmp_path):
    """Copies made distinct runs as benchmarks/many_logs.py makes them (another start time)."""
    spec = importlib.util.spec_from_file_location("many_logs", ROOT / "benchmarks" / "many_logs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    folder = tmp_path / "logs"
    folder.mkdir()
    bench.write_logs(OTHER, folder, 3)
    db = tmp_path / "r.sqlite"
    assert cli("collect", folder, "--db", db).exit_code == 0
    assert _count(db, "logs") == 3 and _count(db, "machines") == 1 and _count(db, "models") == 6


def test_a_malformed_log_is_refused_alone_in_one_line(tmp_path):
    folder = _folder(tmp_path, "other-machine-demo-small.json", "malformed.json", "truncated.json", "newer.json")
    (folder / "bandwidth.json").write_text('{"gbs": 100}')  # not a run log: passed over, as compare does
    db = tmp_path / "r.sqlite"
    out = cli("collect", folder, "--db", db)
    assert out.exit_code == 2
    lines = out.output.splitlines()
    for name in ("malformed.json", "truncated.json", "newer.json"):
        said = [line for line in lines if name in line]
        assert len(said) == 1 and said[0].startswith("macprof: refused: "), out.output
    assert any("passed over 1 file(s)" in line and "bandwidth.json" in line for line in lines)
    assert "Traceback" not in out.output and lines[-1] == "macprof: error: 3 log(s) refused (each named above)"
    assert _count(db, "logs") == 1
    # a file named on the command line that is no run log is refused too
    out = cli("collect", folder / "bandwidth.json", folder / "other-machine-demo-small.json", "--db", db)
    assert out.exit_code == 2 and "refused: " in out.output and "bandwidth.json" in out.output


@pytest.mark.parametrize("stop", [IndexError, KeyboardInterrupt])
def test_a_log_is_collected_whole_or_not_at_all_and_what_stops_a_collect_keeps_the_logs_before_it(tmp_path, monkeypatch,
                                                                                                  stop):
    db = tmp_path / "r.sqlite"
    real = collection.results.result_rows

    def second_breaks(log):
        rows = real(log)
        if log.started_utc == runlog.load(LOGS / "tiny-sweeps.json").started_utc:
            rows[-1] = {**rows[-1], "model_index": 99}  # its last row names no model: written after its others
            if stop is KeyboardInterrupt:
                raise KeyboardInterrupt
        return rows

    monkeypatch.setattr(collection.results, "result_rows", second_breaks)
    with pytest.raises(stop):
        collection.collect([OTHER, LOGS / "tiny-sweeps.json", LOGS / "tiny-a.json"], db)
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT file_name FROM logs").fetchall() == [(OTHER.name,)]
        assert con.execute("SELECT count(*) FROM machines").fetchone()[0] == 1  # tiny-sweeps' machine went with it
        assert con.execute("SELECT count(*) FROM results").fetchone()[0] == len(real(runlog.load(OTHER)))


def test_many_logs_are_examined_in_worker_processes_into_the_same_database(tmp_path, monkeypatch):
    folder = _folder(tmp_path, "other-machine-demo-small.json", "tiny-a.json", "tiny-b.json", "tiny-sweeps.json",
                     "malformed.json", "schema1.json")
    serial, parallel = tmp_path / "serial.sqlite", tmp_path / "parallel.sqlite"
    assert cli("collect", folder, "--db", serial).exit_code == 2
    monkeypatch.setattr(collection, "PARALLEL_FROM", 2)
    monkeypatch.setattr(collection, "cores", lambda: 2)
    out = cli("collect", folder, "--db", parallel)
    assert out.exit_code == 2 and "malformed.json" in out.output
    assert _content(serial) == _content(parallel)


def _content(db: Path) -> dict:
    """Every table's rows, but when each log was collected."""
    with sqlite3.connect(db) as con:
        out = {}
        for table in database.TABLES:
            cols = [c.name for c in database.TABLES[table] if c.name != "collected_utc"]
            out[table] = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY 1").fetchall()
        return out


def test_the_rows_hold_the_logs_own_figures(tmp_path):
    db = tmp_path / "r.sqlite"
    assert cli("collect", OTHER, LOGS / "tiny-sweeps.json", "--db", db).exit_code == 0
    con = database.connect(db)
    try:
        got = database.rows(con, "SELECT r.*, l.file_name AS log_file, mo.file_name AS model_file, mo.sha256, mo.quant, "
                                 "ma.cpu_model, ma.memory_bytes FROM results r JOIN logs l USING (log_id) "
                                 "JOIN models mo USING (model_id) JOIN machines ma ON ma.machine_id = l.machine_id "
                                 "ORDER BY result_id")
    finally:
        con.close()
    log = runlog.load(OTHER)
    warm = [r for r in got if r["log_file"] == OTHER.name and r["phase"] == "warm"]
    assert len(warm) == len(log.models) == 6
    for row, m in zip(warm, log.models):
        w = m.phases.warm
        assert row["decode_tok_s"] == w.summary.decode_tok_s.median and row["ttft_s"] == w.summary.ttft_s.median
        assert row["measured_efficiency"] == w.roofline.measured.efficiency
        assert row["measured_ceiling_tok_s"] == w.roofline.measured.ceiling_tok_s
        assert row["spec_efficiency"] is None and "not an Apple Silicon chip" in row["ceiling_reason"]
        assert row["peak_memory_bytes"] == memory_figures([w.memory], m.identity.engine)["peak_memory_bytes"]
        assert row["model_name"] == m.identity.name and row["quant"] == m.identity.quant_declared
        assert row["cpu_model"] == log.machine.cpu_model and row["memory_bytes"] == log.machine.memory_bytes
        if len(m.identity.files) == 1:
            assert row["sha256"] == m.identity.files[0].sha256 and row["model_file"] == m.identity.files[0].name
    sweeps = runlog.load(LOGS / "tiny-sweeps.json")
    depth = {r["case_id"]: r for r in got if r["phase"] == "depth" and r["model_index"] == 0
             and r["log_file"] == "tiny-sweeps.json"}
    for case in sweeps.models[0].phases.depth.cases:
        assert depth[case.id]["depth_tokens"] == case.depth
        assert depth[case.id]["decode_tok_s"] == case.summary.decode_tok_s.median
    batch = [r for r in got if r["phase"] == "batch" and r["model_index"] == 0 and r["log_file"] == "tiny-sweeps.json"]
    assert [r["batch"] for r in batch] == [c.batch for c in sweeps.models[0].phases.batch.cases]


BENCH = LOGS / "tiny-bench.json"  # a default run's phases on one llama.cpp model: cold, warm, prefix, bench


def test_a_default_runs_bench_tests_are_rows_pp_with_its_prefill_and_tg_with_its_decode_and_ceiling(tmp_path):
    db = tmp_path / "r.sqlite"
    out = cli("collect", BENCH, "--db", db)
    assert out.exit_code == 0, out.output
    con = database.connect(db)
    try:
        got = database.rows(con, "SELECT * FROM results ORDER BY result_id")
    finally:
        con.close()
    m = runlog.load(BENCH).models[0]
    assert [(r["phase"], r["case_id"]) for r in got] == [
        ("cold", ""), ("warm", ""), ("prefix", ""), ("bench", "pp512"), ("bench", "tg128")]
    pp, tg = got[3:]
    case_pp, case_tg = m.phases.bench.cases
    measured = [r for r in case_pp.requests if r.kind == "measured"]
    # pp512: the prompt computed, nothing generated: its prefill (t_prefilled), no decode, no decode ceiling
    assert (pp["prompt_tokens"], pp["gen_tokens"], pp["depth_tokens"], pp["batch"]) == (512, 0, 0, 1)
    assert pp["status"] == "ok" and pp["requests"] == len(measured) and pp["failures"] == 0
    assert pp["prefill_tok_s"] == case_pp.summary.prefill_tok_s.median > 0
    assert pp["decode_tok_s"] is pp["spec_efficiency"] is pp["measured_efficiency"] is None
    assert pp["spec_ceiling_tok_s"] is pp["measured_ceiling_tok_s"] is None and pp["ceiling_reason"] == results.NO_DECODE
    # tg128: its decode, against the ceiling at its context, as a grid case's
    assert (tg["prompt_tokens"], tg["gen_tokens"], tg["status"]) == (1, 128, "ok")
    assert tg["decode_tok_s"] == case_tg.summary.decode_tok_s.median > 0
    assert tg["measured_ceiling_tok_s"] == case_tg.roofline.measured.ceiling_tok_s > 0
    assert tg["measured_efficiency"] == case_tg.roofline.measured.efficiency > 0
    assert pp["peak_memory_bytes"] == tg["peak_memory_bytes"] is not None  # the phase's, both its cases'


def test_every_phase_of_the_registry_gives_its_rows_or_says_why_not():
    """A phase added to the registry is collected (a sweep: its cases; another: its ROWS entry)
    or named in NO_ROWS with its reason; the phase column's doc lists those that give rows."""
    from macprof.phases import NAMES, SWEEPS

    others = [n for n in NAMES if n not in SWEEPS]
    assert not set(results.ROWS) & set(results.NO_ROWS)
    missing = [n for n in others if n not in results.ROWS and n not in results.NO_ROWS]
    assert not missing, f"analyse/results.py: give {missing} rows (ROWS) or say why not (NO_ROWS)"
    assert set(results.ROWS) | set(results.NO_ROWS) == set(others)  # no entry for a phase that is gone
    phase_doc = next(c.doc for c in database.RESULTS if c.name == "phase")
    assert re.findall(r"`(\w+)`", phase_doc) == [n for n in NAMES if n not in results.NO_ROWS]


def test_every_column_is_written_and_documented():
    rows = results.result_rows(runlog.load(OTHER))
    written = set(rows[0]) | {"result_id", "log_id", "model_id"}
    assert written == {c.name for c in database.RESULTS}
    log_columns = set(results.log_row(runlog.load(OTHER))) | {"log_id", "run_id", "file_name", "shared", "machine_id",
                                                               "collected_utc", "verified", "verify_problems"}
    assert log_columns == {c.name for c in database.LOGS}
    assert set(results.machine_row(runlog.load(OTHER))) | {"machine_id"} == {c.name for c in database.MACHINES}
    docs = (ROOT / "docs" / "design.md").read_text()
    assert database.markdown() in docs, "docs/design.md: paste `python -m macprof.store.database` into it"


def _readme_query() -> str:
    text = (ROOT / "README.md").read_text()
    return re.search(r"<!-- results-query -->\s*```sql\n(.*?)```", text, re.S).group(1)


@pytest.fixture
def two_machines(tmp_path, fake_dir) -> Path:
    """A run made here (the fake engine) and the recorded one from another machine, collected."""
    here = tmp_path / "here.json"
    made = cli("run", "--config", fake_dir / "models.toml", "--phases", "cold,warm,prefix", "--prompt-tokens", "32",
               "--gen-tokens", "8", "--reps", "3", "--cold-trials", "1", "--log", here)
    assert made.exit_code == 0, made.output
    db = tmp_path / "results.sqlite"
    assert cli("collect", here, OTHER, "--db", db).exit_code == 0
    return db


def test_plain_sqlite_answers_the_readme_query_over_two_machines(two_machines):
    query = _readme_query()
    with sqlite3.connect(two_machines) as con:
        got = con.execute(query).fetchall()
    here = runlog.load(two_machines.parent / "here.json")
    other = runlog.load(OTHER)
    assert len({(r[0], r[1]) for r in got}) == 2  # two machines
    expected = {(m.identity.name, m.phases.warm.summary.decode_tok_s.median) for log in (here, other) for m in log.models}
    assert {(r[2], r[4]) for r in got} == expected
    sqlite = shutil.which("sqlite3")
    if sqlite is None:
        pytest.skip("no sqlite3 command on this machine: the query was checked through Python's sqlite3 only")
    cmd = subprocess.run([sqlite, "-json", str(two_machines), query], capture_output=True, text=True, check=True)
    assert [tuple(r.values()) for r in json.loads(cmd.stdout)] == got


def test_a_database_of_something_else_or_of_a_newer_macprof_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    out = cli("collect", OTHER, "--db", other)
    assert out.exit_code == 2 and "not macprof's results" in out.output
    newer = tmp_path / "newer.sqlite"
    database.connect(newer).close()
    with sqlite3.connect(newer) as con:
        con.execute(f"PRAGMA user_version = {database.SCHEMA_VERSION + 1}")
    out = cli("collect", OTHER, "--db", newer)
    assert out.exit_code == 2 and "newer than this macprof" in out.output
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all, but long enough to have a header " * 20)
    out = cli("collect", OTHER, "--db", junk)
    assert out.exit_code == 2 and "not a SQLite database" in out.output and "Traceback" not in out.output


# -- verification --------------------------------------------------------------------------------
def _edited(tmp_path: Path) -> Path:
    """The recorded run with one summary figure edited by hand: its raw records say otherwise."""
    data = json.loads(OTHER.read_text())
    data["models"][0]["phases"]["warm"]["summary"]["decode_tok_s"]["median"] *= 2
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


def test_a_log_that_does_not_verify_is_refused_unless_allowed_and_then_marked(tmp_path):
    edited = _edited(tmp_path)
    db = tmp_path / "r.sqlite"
    out = cli("collect", edited, LOGS / "tiny-a.json", "--db", db)
    assert out.exit_code == 2, out.output
    said = [line for line in out.output.splitlines() if "edited.json" in line]
    assert len(said) == 1 and "does not verify (models/0/phases/warm/summary/decode_tok_s/median" in said[0]
    assert "--allow-unverified" in said[0]
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT file_name, verified, verify_problems FROM logs").fetchall() == [("tiny-a.json", 1, None)]
    out = cli("collect", edited, "--db", db, "--allow-unverified")
    assert out.exit_code == 0, out.output
    with sqlite3.connect(db) as con:
        verified, problems = con.execute("SELECT verified, verify_problems FROM logs WHERE file_name = 'edited.json'").fetchone()
    assert verified == 0 and "models/0/phases/warm/summary/decode_tok_s/median" in problems


# -- versions --------------------------------------------------------------------------------
V1 = FIXTURES / "results" / "results-v1.sql"


def _columns(con: sqlite3.Connection) -> dict:
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name")]
    return {t: [(c[1], c[2], c[3], c[5]) for c in con.execute(f"PRAGMA table_info({t})")] for t in tables}


def test_a_version_1_database_is_migrated_when_opened(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as con:
        con.executescript(V1.read_text())
        assert con.execute("PRAGMA user_version").fetchone()[0] == 1
        before = {t: con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("machines", "models", "results")}
        logs_before = con.execute("SELECT * FROM logs ORDER BY 1").fetchall()
    # collecting into it migrates it first; the runs it holds are not collected again
    out = cli("collect", LOGS / "tiny-a.json", LOGS / "tiny-b.json", "--db", old)
    assert out.exit_code == 0 and "1 already there" in out.output, out.output
    fresh = tmp_path / "fresh.sqlite"
    database.connect(fresh).close()
    with sqlite3.connect(old) as con, sqlite3.connect(fresh) as new:
        assert con.execute("PRAGMA user_version").fetchone()[0] == database.SCHEMA_VERSION
        assert _columns(con) == _columns(new)  # the same tables, columns and views as a new database's
        for table, rows in before.items():
            assert con.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()[:len(rows)] == rows, table
        logs = con.execute("SELECT * FROM logs ORDER BY 1").fetchall()
        assert [r[:-2] for r in logs[:3]] == logs_before and all(r[-2:] == (None, None) for r in logs[:3])
        assert logs[3][-2:] == (1, None)  # tiny-b, collected now: verified
    # a board of it marks the runs that were never verified
    page = tmp_path / "b.html"
    assert cli("board", old, "-o", page).exit_code == 0
    marks = {tuple(board_marks) for board_marks in _page_marks(page)}
    assert ("not verified",) in marks and () in marks


def _page_marks(page: Path) -> list[list[str]]:
    text = page.read_text()
    start = text.index('id="board-data">') + len('id="board-data">')
    data = json.loads(text[start:text.index("</script>", start)])
    return [g["marks"] for g in data["groups"]]


def test_board_reads_a_database_without_changing_it(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as con:
        con.executescript(V1.read_text())
    before = old.read_bytes()
    assert cli("board", old, "-o", tmp_path / "b.html").exit_code == 0
    assert old.read_bytes() == before
