"""The command line's error handling: the project's errors as one line and their exit code,
never a traceback; a closed pipe as a quiet exit, as SIGPIPE ends a shell tool."""

from __future__ import annotations

import os
import sys

import click

from macprof.errors import MacprofError
from macprof.run.signals import Interrupted
from macprof.sanitise import clean, hide_credentials

# A reader that went away (`macprof show LOG | head -1`) ends the command as SIGPIPE ends a
# shell tool: quietly, with the status a shell gives it (128 + 13). Not 0: a `compare --fail-if`
# cut short never reached its verdict, and must not read as a pass.
BROKEN_PIPE_EXIT = 141


class Group(click.Group):
    """Turns the project's errors into one line on stderr and the error's exit code (2; 3 for
    NothingMeasured), never a traceback; any other exception into one line and exit 1, and a
    closed pipe into a quiet exit 141. An error's text may quote a log (a model name): it is
    sanitised like everything printed."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()
            ctx.exit(BROKEN_PIPE_EXIT)
        except MacprofError as exc:
            echo_err(f"macprof: error: {clean(exc)}")
            ctx.exit(exc.exit_code)
        except click.ClickException as exc:  # click's own message may quote a value given: a URL's credentials go
            exc.message = hide_credentials(exc.message)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except (KeyboardInterrupt, Interrupted):  # before a run's journal held anything: nothing is lost
            echo_err("macprof: interrupted")
            ctx.exit(130)
        except Exception as exc:  # a bug of ours: still one line, the traceback on request
            if os.environ.get("MACPROF_DEBUG") == "1":
                raise
            echo_err(f"macprof: internal error: {type(exc).__name__}: {clean(exc)} "
                      f"(MACPROF_DEBUG=1 shows the traceback)")
            ctx.exit(1)


def echo_err(line: str) -> None:
    try:
        click.echo(line, err=True)
    except BrokenPipeError:  # stderr's reader is gone too: nobody is left to tell
        reader_gone()


def reader_gone() -> None:
    """As Python's docs advise for SIGPIPE: point stdout and stderr at devnull, so the flush at
    exit of what is still buffered raises nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # not a real file (a test runner's capture)
            pass
    os.close(devnull)
