"""The commands that make a run's results travel (docs/design.md, "Results that travel"): `export`
(the community's formats), `collect` (the results database), `board` (its HTML page) and `verify`
(a log proves its figures). Imports are lazy, as in cli/__init__.py: `macprof --help` imports no
exporter, database or verifier."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from macprof.cli.errors import echo_err
from macprof.errors import MacprofError
from macprof.render.formats import LOG_FORMATS
from macprof.sanitise import clean

if TYPE_CHECKING:
    from macprof.model.log import RunLog


def logs_named(paths) -> tuple[list[tuple[str, RunLog]], list[str]]:
    """The logs named, and folders of them (export's, and compare's and plot's in cli/__init__.py);
    what a folder held that was passed over (not a run log, or a second copy of a run) is named
    in one line on stderr. With them, a warning line for each log that does not verify, for the
    caller to write after its output."""
    from macprof.store.logset import load_logs

    unverified: list[str] = []
    logs, skipped = load_logs(list(paths), unverified)
    if skipped:
        click.echo(clean(f"macprof: passed over {len(skipped)} file(s): {'; '.join(skipped)}"), err=True)
    return logs, unverified


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--format", "fmt", required=True, type=click.Choice(list(LOG_FORMATS)),
              help="llama-bench-json|jsonl|csv|sql|md: llama-bench's own rows, one per test; mlx-md: mlx-lm's "
                   "BENCHMARKS.md table; apple-silicon-md: the row of llama.cpp's Apple Silicon discussion.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), help="Write here [stdout].")
def export(paths, fmt, output) -> None:
    """Write run logs (files or folders) in the community's formats (docs/export.md). A figure the
    logs cannot give is said in one line on stderr, never made up."""
    from macprof.render.exporters import export_logs

    logs, unverified = logs_named(paths)
    written, missing = export_logs(logs, fmt)
    for line in missing:
        echo_err(clean(f"macprof export: {line}"))
    for line in unverified:  # exported as measured only where it verifies: say which do not
        echo_err(clean(line))
    if not written:
        raise MacprofError(f"export: nothing in {fmt}: the logs give none of its figures (the lines above say why)")
    if output is None:
        click.echo(written)
        return
    try:
        output.write_text(written + "\n", encoding="utf-8")
    except OSError as exc:
        raise MacprofError(f"{output}: cannot write: {exc.strerror}") from None


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True), metavar="LOG|DIR...")
@click.option("--db", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The SQLite results database (created where there is none).")
@click.option("--allow-unverified", is_flag=True, help="Collect a log that does not verify (`macprof verify`), "
                                                       "marked so, instead of refusing it.")
def collect(paths, db, allow_unverified) -> None:
    """Collect run logs (files or folders) into a SQLite database: one row per log, model and phase
    or case. A run already there is not added again; a log that cannot be read, or does not verify,
    is refused alone."""
    from macprof.store.collection import collect as collect_logs, cores

    done = collect_logs(list(paths), db, allow_unverified, workers=cores())
    _say_collected(done)
    click.echo(f"{clean(db)}: {len(done.added) + len(done.replaced)} log(s) collected ({done.results} result rows)"
               + (f", {len(done.replaced)} of them an original over its shared copy" if done.replaced else "")
               + (f"; {len(done.already)} already there" if done.already else "")
               + (f"; {len(done.refused)} refused" if done.refused else ""))
    _refused(done)


def _say_collected(done) -> None:
    """What was passed over and what was there already, one line each; each refusal its own line."""
    for line in done.refused:
        echo_err(f"macprof: refused: {clean(line)}")
    if done.passed_over:
        echo_err(clean(f"macprof: passed over {len(done.passed_over)} file(s): {'; '.join(done.passed_over)}"))
    if done.already:
        echo_err(clean(f"macprof: {len(done.already)} log(s) already collected: {'; '.join(done.already)}"))


def _refused(done) -> None:
    if done.refused:  # the others are collected; the command still says it did not take everything
        raise MacprofError(f"{len(done.refused)} log(s) refused (each named above)")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True), metavar="DB|LOG|DIR...")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True, help="board.html")
@click.option("--allow-unverified", is_flag=True, help="From logs: show one that does not verify, marked so, "
                                                       "instead of refusing it (as collect).")
def board(paths, output, allow_unverified) -> None:
    """One self-contained HTML page of the cross-machine table, from a results database or from
    run logs (files or folders): sortable, filtered by chip, model, quantization and engine."""
    from macprof.render.board import board_page
    from macprof.store import database

    dbs = [p for p in paths if database.is_database(p)]
    if dbs and len(paths) > 1:
        raise MacprofError("board: give one results database, or run logs and folders (to see both, collect the "
                           "logs into the database first: macprof collect LOG... --db DB)")
    if dbs:
        con, source = database.read_copy(dbs[0]), f"the database {dbs[0].name}"
        done = None
    else:
        from macprof.store.collection import collect_into, cores

        con = database.connect(":memory:")
        done = collect_into(con, list(paths), allow_unverified, workers=cores())
        _say_collected(done)
        source = f"{len(done.added) + len(done.replaced)} run log(s)"
    try:
        rows = database.board_rows(con)
    finally:
        con.close()
    if not rows and done is not None and not done.refused:
        raise MacprofError(f"board: no results in {', '.join(map(str, paths))}")
    try:
        output.write_text(board_page(rows, source), encoding="utf-8")
    except OSError as exc:
        raise MacprofError(f"{output}: cannot write the board ({exc.strerror})") from None
    click.echo(str(output))
    if done is not None:
        _refused(done)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="LOG...")
def verify(paths) -> None:
    """Check that each run log proves its figures: every summary recomputes from its raw records,
    none is impossible, its digest matches. One line per problem; exit 1 unless every log verifies."""
    from macprof.store.verify import verify_file

    failed = 0
    for path in paths:
        try:
            found = verify_file(path)
        except MacprofError as exc:  # it names the file
            click.echo(clean(f"{exc}: does not verify"))
            failed += 1
            continue
        failed += not found.ok
        click.echo(clean(f"{path}: {found.summary()}"))
        for line in found.lines():
            click.echo(clean(f"{path}: {line}"))
    sys.exit(1 if failed else 0)
