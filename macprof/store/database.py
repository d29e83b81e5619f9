"""The results database: many run logs' figures in one SQLite file (`macprof collect`, read by
`macprof board` and by plain `sqlite3`), through the standard library's sqlite3, as llama-bench's
`-o sql` and LocalScore keep theirs.

Four tables, each column declared once below with its unit and meaning (docs/design.md's table is
generated from them: `python -m macprof.store.database`): ``machines`` (a machine as its logs
describe it), ``models`` (model files), ``logs`` (one per run) and ``results`` (one per log, model
and phase or sweep case), and the ``board`` view that joins them as the board page reads them.

The schema's version is the database's ``PRAGMA user_version`` (SCHEMA_VERSION), and
``PRAGMA application_id`` says the file is macprof's. Opening an older version migrates it in one
transaction (MIGRATIONS: each step the SQL that took version k to k + 1, kept as it was written);
a newer one is refused, as is a SQLite file of something else.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from macprof.analyse.results import NO_ROWS
from macprof.errors import MacprofError
from macprof.phases import NAMES

SCHEMA_VERSION = 2  # 2: logs.verified and verify_problems
APPLICATION_ID = 0x6D707266  # "mprf": PRAGMA application_id of a macprof results database
LOCK_WAIT_S = 600  # a second collect into one database waits this long for the first one's transaction


@dataclass(frozen=True)
class Column:
    name: str
    sql: str  # its SQL type and constraints
    unit: str  # "" where it has none (a name, a count's unit is in its name)
    doc: str


C = Column
MACHINES = (
    C("machine_id", "INTEGER PRIMARY KEY", "", "the machine's row"),
    C("key", "TEXT NOT NULL UNIQUE", "", "what makes two logs' machines one: the other columns, as JSON"),
    C("chip", "TEXT", "", "Apple chip (`Apple M4 Max`); null off Apple Silicon"),
    C("gpu_cores", "INTEGER", "cores", "GPU cores (Apple Silicon)"),
    C("cpu_model", "TEXT", "", "the CPU as the OS names it"),
    C("arch", "TEXT", "", "`arm64`, `x86_64`"),
    C("cores_logical", "INTEGER", "cores", "logical CPU cores"),
    C("cores_physical", "INTEGER", "cores", "physical CPU cores"),
    C("cores_performance", "INTEGER", "cores", "performance cores (Apple Silicon)"),
    C("cores_efficiency", "INTEGER", "cores", "efficiency cores (Apple Silicon)"),
    C("memory_bytes", "INTEGER", "bytes", "physical memory"),
    C("os", "TEXT", "", "`Darwin`, `Linux`"),
    C("os_version", "TEXT", "", "the OS's version (macOS: `sw_vers -productVersion`)"),
)
MODELS = (
    C("model_id", "INTEGER PRIMARY KEY", "", "the model's row"),
    C("key", "TEXT NOT NULL UNIQUE", "", "what makes two logs' models one: `sha256` (a server's model, with no files: "
                                          "`served:` and its name)"),
    C("file_name", "TEXT", "", "its file (a GGUF), or its largest file (an MLX model's weights)"),
    C("sha256", "TEXT", "", "the file's sha256; for a model of several files (MLX), the sha256 of their manifest: "
                            "one line `<sha256>  <name>` per file, sorted by name, as `sha256sum` prints them"),
    C("files", "INTEGER", "files", "how many files it has"),
    C("total_bytes", "INTEGER", "bytes", "all its files"),
    C("quant", "TEXT", "", "its quantization: what the file declares (GGUF `general.file_type`, MLX bits), else "
                           "models.toml's label"),
    C("architecture", "TEXT", "", "`llama`, `qwen2`, ..."),
    C("n_params", "INTEGER", "parameters", "parameters"),
)
LOGS = (
    C("log_id", "INTEGER PRIMARY KEY", "", "the log's row"),
    C("run_id", "TEXT NOT NULL UNIQUE", "", "which run it records (logset.run_key's sha256, see 'One run, one log')"),
    C("file_name", "TEXT NOT NULL", "", "the file it was collected from (its name only: a folder names its user)"),
    C("shared", "INTEGER NOT NULL", "0/1", "1: a copy written by `macprof share`"),
    C("machine_id", "INTEGER NOT NULL REFERENCES machines(machine_id)", "", "the machine it ran on"),
    C("host_id", "TEXT", "", "the log's host id (a one-way hash of the host name), which tells two machines of one "
                             "configuration apart; null in a shared copy"),
    C("started_utc", "TEXT", "ISO 8601", "the run's start"),
    C("ended_utc", "TEXT", "ISO 8601", "the run's end"),
    C("complete", "INTEGER", "0/1", "0: the run was interrupted, or recovered from a journal"),
    C("tool_version", "TEXT", "", "the macprof that measured it"),
    C("log_schema_version", "INTEGER", "", "the run log's own schema version as written (before migration)"),
    C("power_source", "TEXT", "", "`ac` / `battery` at the run's start"),
    C("low_power_mode", "INTEGER", "0/1", "macOS Low Power Mode at the run's start"),
    C("power_mode", "TEXT", "", "macOS `automatic` / `low` / `high` (pmset)"),
    C("thermal_state", "TEXT", "", "macOS NSProcessInfo thermal state at the run's start: `nominal`, `fair`, "
                                   "`serious`, `critical`"),
    C("spec_bandwidth_gbs", "REAL", "GB/s", "the chip's published memory bandwidth"),
    C("measured_bandwidth_gbs", "REAL", "GB/s", "the bandwidth measured on the machine (`macprof bandwidth`, median)"),
    C("measured_tflops", "REAL", "TFLOP/s", "the matmul probe's median"),
    C("collected_utc", "TEXT NOT NULL", "ISO 8601", "when it was collected"),
    C("verified", "INTEGER", "0/1", "1: the log verifies (`macprof verify`: its figures recompute from its raw "
                                    "records, none is impossible, its digest matches); 0: it does not, collected with "
                                    "--allow-unverified; null: collected before verification (schema version 1)"),
    C("verify_problems", "TEXT", "", "what does not verify, one line per problem (as `macprof verify` says it)"),
)
RESULTS = (
    C("result_id", "INTEGER PRIMARY KEY", "", "the result's row"),
    C("log_id", "INTEGER NOT NULL REFERENCES logs(log_id) ON DELETE CASCADE", "", "the run"),
    C("model_id", "INTEGER NOT NULL REFERENCES models(model_id)", "", "the model's files"),
    C("model_index", "INTEGER NOT NULL", "", "the model's place in the run (0 first)"),
    C("model_name", "TEXT", "", "the model's name in the run"),
    C("engine", "TEXT NOT NULL", "", "`llama.cpp`, `mlx`, `openai` (a server), `fake`"),
    C("engine_version", "TEXT", "", "llama-cpp-python's or mlx-lm's version"),
    C("phase", "TEXT NOT NULL", "", ", ".join(f"`{n}`" for n in NAMES if n not in NO_ROWS)),
    C("case_id", "TEXT NOT NULL", "", "the sweep case (`p512-g128`, `rag`, `d4096`, `b8`), speculative `k4` or "
                                      "`native-k4`; '' for a phase without cases"),
    C("status", "TEXT NOT NULL", "", "`ok`, or a case's `failed` / `refused` / `unsupported` / `not run`; a phase "
                                     "with no successful request `failed`"),
    C("prompt_tokens", "INTEGER", "tokens", "prompt length asked"),
    C("gen_tokens", "INTEGER", "tokens", "generated tokens asked"),
    C("depth_tokens", "INTEGER", "tokens", "tokens already in the KV cache when a request starts (llama-bench's "
                                           "n_depth): 0; a depth case's d; prefix: the cached prefix"),
    C("batch", "INTEGER", "sequences", "sequences decoded together (1 but in a batch case)"),
    C("kv_type", "TEXT", "", "the K/V cache type: `f16`, `q8_0`, `q4_0`"),
    C("threads", "INTEGER", "threads", "llama.cpp's threads as resolved"),
    C("requests", "INTEGER", "requests", "measured requests that succeeded (a cold phase: trials; tasks: tasks run)"),
    C("failures", "INTEGER", "requests", "measured requests, trials or attempts that failed"),
    C("ttft_s", "REAL", "s", "median time to first token (cold: from launch, the model's load included)"),
    C("prefill_tok_s", "REAL", "tokens/s", "median prefill: computed prompt tokens / (t_1 - t_tokenized)"),
    C("decode_tok_s", "REAL", "tokens/s", "median decode, (n - 1) / (t_n - t_1) per sequence; speculative: its "
                                          "requests' median"),
    C("aggregate_tok_s", "REAL", "tokens/s", "a batch case's median aggregate decode (B x per sequence)"),
    C("spec_ceiling_tok_s", "REAL", "tokens/s", "the decode ceiling at the published bandwidth, at this context"),
    C("spec_efficiency", "REAL", "fraction", "decode / spec_ceiling_tok_s: the figure that compares across "
                                             "machines"),
    C("measured_ceiling_tok_s", "REAL", "tokens/s", "the decode ceiling at the measured bandwidth and FLOP/s"),
    C("measured_efficiency", "REAL", "fraction", "decode / measured_ceiling_tok_s"),
    C("bound", "TEXT", "", "what bounds the ceiling (`memory`, `compute`), the measured side's, else the published"),
    C("ceiling_reason", "TEXT", "", "why a ceiling is unknown"),
    C("peak_memory_bytes", "INTEGER", "bytes", "the phase's peak memory, in the figure memory_figure names"),
    C("memory_figure", "TEXT", "", "`footprint+mapped`, `footprint` (macOS) or `RSS`"),
    C("prefill_j_per_token", "REAL", "J/token", "net prefill energy per computed prompt token"),
    C("decode_j_per_token", "REAL", "J/token", "net decode energy per generated token after the first"),
    C("avg_w", "REAL", "W", "mean power over the phase's (or case's) requests"),
    C("energy_reason", "TEXT", "", "why the energy is unknown"),
    C("accuracy", "REAL", "fraction", "tasks: the share solved within the attempts allowed"),
    C("accuracy_first", "REAL", "fraction", "tasks: the share solved at the first attempt"),
    C("kld_mean", "REAL", "nats", "quality: mean KL divergence per token from the reference"),
    C("ppl", "REAL", "", "quality: perplexity"),
    C("speedup", "REAL", "ratio", "speculative: median decode over plain decoding's"),
    C("power_source", "TEXT", "", "`ac` / `battery` during the phase (its telemetry; else the run's start)"),
    C("thermal_pressure", "TEXT", "", "the phase's highest thermal pressure (`nominal`, `moderate`, `heavy`, ...)"),
    C("thermal_state", "TEXT", "", "macOS NSProcessInfo thermal state, the worse of the phase's start and end"),
    C("throttled", "INTEGER", "0/1", "decode fell while the chip heated (the throttling check); null: cannot tell"),
)
TABLES: dict[str, tuple[Column, ...]] = {"machines": MACHINES, "models": MODELS, "logs": LOGS, "results": RESULTS}
CONSTRAINTS = {"results": ("UNIQUE (log_id, model_index, phase, case_id)",)}
INDEXES = ("CREATE INDEX results_model ON results (model_id)", "CREATE INDEX logs_machine ON logs (machine_id)")

# The board page's rows: a result with its run, machine and model, as the page reads them.
BOARD_VIEW = """CREATE VIEW board AS
SELECT r.result_id, r.log_id, l.file_name AS log_file, l.started_utc, l.complete, l.shared, l.verified,
       l.machine_id, m.chip, m.gpu_cores, m.cpu_model, m.cores_physical, m.memory_bytes, m.os, m.os_version,
       r.model_id, r.model_name, mo.file_name AS model_file, mo.sha256 AS model_sha256, mo.quant, mo.n_params,
       r.engine, r.engine_version, r.phase, r.case_id, r.status, r.prompt_tokens, r.gen_tokens, r.depth_tokens,
       r.batch, r.kv_type, r.threads, r.requests, r.failures,
       r.decode_tok_s, r.spec_efficiency, r.measured_efficiency, r.spec_ceiling_tok_s, r.measured_ceiling_tok_s,
       r.ttft_s, r.prefill_tok_s, r.aggregate_tok_s, r.peak_memory_bytes, r.memory_figure, r.decode_j_per_token,
       r.accuracy, r.kld_mean, r.speedup,
       l.power_source AS run_power_source, l.low_power_mode, l.power_mode, l.thermal_state AS run_thermal_state,
       r.power_source, r.thermal_pressure, r.thermal_state, r.throttled
FROM results r JOIN logs l ON l.log_id = r.log_id JOIN machines m ON m.machine_id = l.machine_id
     JOIN models mo ON mo.model_id = r.model_id"""
VIEWS = {"board": BOARD_VIEW}

# version k -> the statements that took a version-k database's tables to k + 1, as they were
# written then. Views hold no data: each migration drops them and creates today's.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE logs ADD COLUMN verified INTEGER", "ALTER TABLE logs ADD COLUMN verify_problems TEXT"),
}


def create_statements() -> list[str]:
    """The statements that create the current tables in an empty database (the views apart)."""
    out = []
    for table, columns in TABLES.items():
        body = [f"{c.name} {c.sql}" for c in columns] + list(CONSTRAINTS.get(table, ()))
        out.append(f"CREATE TABLE {table} (\n  " + ",\n  ".join(body) + "\n)")
    return out + list(INDEXES)


def connect(path: Path | str) -> sqlite3.Connection:
    """The results database at ``path``, created where there is none, migrated where it is older;
    refused in one line where it is newer than this macprof or not macprof's. Transactions are the
    caller's (BEGIN / COMMIT): the connection is in autocommit mode."""
    where = str(path)
    try:
        con = sqlite3.connect(where, isolation_level=None, timeout=LOCK_WAIT_S)
    except sqlite3.Error as exc:
        raise MacprofError(f"{where}: cannot open the results database ({exc})") from None
    try:
        con.execute("PRAGMA foreign_keys = ON")
        _prepare(con, where)
    except sqlite3.DatabaseError as exc:
        con.close()
        raise MacprofError(f"{where}: not a SQLite database macprof can use ({exc})") from None
    except BaseException:
        con.close()
        raise
    return con


def is_database(path: Path) -> bool:
    """Whether ``path`` is a SQLite file (its header), not a run log or a folder."""
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == b"SQLite format 3\x00"
    except OSError:  # a folder, or unreadable: not one
        return False


def read_copy(path: Path) -> sqlite3.Connection:
    """An in-memory copy of the database at ``path``, migrated where it is older: reading never
    changes the file (board reads a database someone else may be collecting into)."""
    try:
        source = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise MacprofError(f"{path}: cannot open the results database ({exc})") from None
    copy = sqlite3.connect(":memory:", isolation_level=None)
    try:
        source.backup(copy)
        copy.execute("PRAGMA foreign_keys = ON")
        _prepare(copy, str(path))
    except sqlite3.DatabaseError as exc:
        copy.close()
        raise MacprofError(f"{path}: not a SQLite database macprof can use ({exc})") from None
    except BaseException:
        copy.close()
        raise
    finally:
        source.close()
    return copy


def _prepare(con: sqlite3.Connection, where: str) -> None:
    con.execute("BEGIN IMMEDIATE")  # one writer creates or migrates; a second waits for it
    try:
        version = con.execute("PRAGMA user_version").fetchone()[0]
        app = con.execute("PRAGMA application_id").fetchone()[0]
        tables = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if tables and app != APPLICATION_ID:
            raise MacprofError(f"{where}: a SQLite database, but not macprof's results (collect into a new file)")
        if version > SCHEMA_VERSION:
            raise MacprofError(f"{where}: results database version {version} is newer than this macprof understands "
                               f"({SCHEMA_VERSION}): upgrade macprof")
        if not tables:
            for statement in create_statements():
                con.execute(statement)
            con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        else:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    con.execute(statement)
        if version != SCHEMA_VERSION:
            for name, statement in VIEWS.items():
                con.execute(f"DROP VIEW IF EXISTS {name}")
                con.execute(statement)
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def rows(con: sqlite3.Connection, query: str, params: tuple = ()) -> list[dict]:
    """A query's rows as dicts, keyed by its column names."""
    cur = con.execute(query, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def board_rows(con: sqlite3.Connection) -> list[dict]:
    """The board view's rows, in the order they were collected."""
    return rows(con, "SELECT * FROM board ORDER BY result_id")


def markdown() -> str:
    """The tables as docs/design.md documents them: each column, its unit and meaning."""
    out = []
    for table, columns in TABLES.items():
        out += [f"`{table}`:", "", "| column | unit | meaning |", "| --- | --- | --- |"]
        out += [f"| `{c.name}` | {c.unit} | {c.doc} |" for c in columns] + [""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
