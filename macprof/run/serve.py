"""Servers macprof starts itself (``--serve mlx|llama.cpp|llama-server MODEL``): ``mlx_lm.server``
or llama-cpp-python's server (its ``server`` extra), with the Python that runs macprof, or
llama.cpp's own ``llama-server`` binary from PATH (what ``brew install llama.cpp`` gives on a Mac;
benchmarks/build_llama_server.sh builds one from the vendored sources), on a free loopback port.
``serving`` waits until the server answers, yields what the run needs to know
(its URL, the model name to ask for, its command line, version, pid and start-up time) and
stops it on the way out: at the end, on a failure and on Ctrl-C (the caller's ``finally``).

The server runs in its own session so that stopping it reaches whatever it spawned; the
stop is SIGTERM, then SIGKILL after a grace period, and is checked (``alive`` is empty after).
A watcher beside it (collect/lifeline.py) kills that session when macprof ends without stopping
it: a SIGKILL of macprof leaves no server listening.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Iterator

from macprof.errors import MacprofError
from macprof.collect import lifeline

KINDS = ("mlx", "llama.cpp", "llama-server")
HOST = "127.0.0.1"  # only loopback, ever
STOP_GRACE_S = 10.0
# where each answers once its model is loaded (mlx_lm.server's /v1/models lists the Hugging
# Face cache and fails without one, so its /health; llama-server's /health answers 503 until loaded)
READY_PATH = {"mlx": "/health", "llama.cpp": "/v1/models", "llama-server": "/health"}
# how many conversations each holds in its cache as macprof starts it, and why (the conversation
# phase says where --apps is more): read from each server's code for the versions macprof runs
_HOLDS: dict[str, tuple[int | None, str]] = {
    "llama.cpp": (1, "llama-cpp-python's server: one Llama, no prompt cache (--cache off, its default): it "
                     "keeps the tokens it last evaluated and reuses their longest common prefix"),
    "llama-server": (None, "llama-server's slots (--parallel), as its defaults set them: not read here"),
}


def holds(kind: str, slots: int = 1) -> tuple[int | None, str]:
    """How many prompts a server started here holds in its cache at once (None: not known), and
    how that is known: mlx_lm.server's prompt cache is sized by --serve-slots."""
    if kind == "mlx":
        what = "one prompt and its reply" if slots == 1 else f"{slots} prompts and their replies"
        return slots, f"mlx_lm.server's prompt cache, started with --prompt-cache-size {slots}: {what}"
    return _HOLDS[kind]
LOG_TAIL = 1500  # characters of the server's log kept with a failure to start


@dataclass
class Server:
    """A server macprof started: what the run log records about it (``info``)."""

    kind: str
    model_path: Path
    proc: subprocess.Popen
    url: str
    model: str
    command: list[str]
    version: str | None
    log: IO[bytes]
    startup_s: float | None = None
    info: dict = field(default_factory=dict)
    watcher: subprocess.Popen | None = None  # ends the server if macprof dies (collect/lifeline.py)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick on the loopback address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def command(kind: str, path: Path, port: int, n_ctx: int, threads: int | None,
            slots: int = 1) -> tuple[list[str], str, str]:
    """(command line, the model name requests ask for, the distribution whose version it is).
    Every value is a number, an absolute path (it starts with "/"), a value joined to its option
    by "=", or a name that cannot start with "-": none can be read as an option."""
    py = sys.executable
    path = Path(os.path.abspath(path))
    if kind == "mlx":
        if not path.is_dir():
            raise MacprofError(f"--serve mlx: {path} is not an MLX model directory")
        # one cached prompt (--serve-slots: more, for several apps' conversations): the engine's
        # untimed reset requests, one per prompt it holds, then displace them all (engines/openai.py)
        return ([py, "-m", "mlx_lm", "server", "--model", str(path), "--host", HOST, "--port", str(port),
                 "--prompt-cache-size", str(slots), "--log-level", "WARNING"], "default_model", "mlx-lm")
    if slots != 1:
        raise MacprofError(f"--serve-slots {slots}: applies to --serve mlx (mlx_lm.server's prompt cache holds that "
                           f"many prompts); {holds(kind)[1]}")
    if kind == "llama.cpp":
        if not path.is_file():
            raise MacprofError(f"--serve llama.cpp: {path} is not a GGUF file")
        # interrupt_requests off: by default a new request cuts the one streaming, which would
        # turn every concurrent level into a cascade of broken streams instead of a queue.
        # verbose on: the prefix it kept ("Llama.generate: N prefix-match hit") is said only in its
        # log (its replies carry no cached-token count), which the engine reads (engines/openai.py
        # LOG_REUSE); the lines it prints cost nothing inside a request's timed span
        cmd = [py, "-m", "llama_cpp.server", "--model", str(path), "--host", HOST, "--port", str(port),
               "--n_ctx", str(n_ctx), "--interrupt_requests", "False", f"--model_alias={path.stem}", "--verbose", "True"]
        return (cmd + (["--n_threads", str(threads)] if threads else []), path.stem, "llama_cpp_python")
    if kind == "llama-server":
        if not path.is_file():
            raise MacprofError(f"--serve llama-server: {path} is not a GGUF file")
        binary = shutil.which("llama-server")
        if binary is None:
            raise MacprofError("--serve llama-server: no llama-server on PATH (brew install llama.cpp, or build one "
                               "with benchmarks/build_llama_server.sh and put its folder on PATH)")
        # its own defaults otherwise (slots, continuous batching): the server as an app meets it
        alias = path.stem if not path.stem.startswith("-") else "model" + path.stem  # a separate argument: no "-" first
        cmd = [binary, "--model", str(path), "--host", HOST, "--port", str(port), "--ctx-size", str(n_ctx),
               "--alias", alias, "--no-webui"]
        return (cmd + (["--threads", str(threads)] if threads else []), alias, "llama-server")
    raise MacprofError(f"--serve: {kind!r} is not one of {', '.join(KINDS)}")


def _version(dist: str) -> str | None:
    if dist == "llama-server":  # a binary: its own --version ("version: 5.1 (build 1, commit ...)")
        binary = shutil.which("llama-server")
        try:
            out = subprocess.run([binary or "llama-server", "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        line = next((ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("version:")), None)
        return line.removeprefix("version:").strip() if line else "unknown"
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def start(kind: str, path: Path, n_ctx: int = 4096, threads: int | None = None, wait_s: float = 300.0,
          slots: int = 1) -> Server:
    """Start the server and wait until it lists its models; MacprofError (with its log's tail)
    when it exits first or does not answer within ``wait_s``."""
    port = free_port()
    cmd, model, dist = command(kind, path, port, n_ctx, threads, slots)
    version = _version(dist)
    if version is None:
        extra = "mlx-lm" if kind == "mlx" else "llama-cpp-python[server]"
        if kind == "llama-server":
            raise MacprofError("--serve llama-server: the llama-server on PATH does not run (`llama-server --version`)")
        raise MacprofError(f"--serve {kind}: {dist} is not installed (pip install '{extra}')")
    # a named file: the worker's engine reads what the server says of each request (its reuse)
    log = tempfile.NamedTemporaryFile(prefix="macprof-server-", suffix=".log", delete=False)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # however macprof ends, SIGKILL included, the server ends with it: a watcher beside it
    server = Server(kind, path, proc, f"http://{HOST}:{port}/v1", model, cmd, version, log,
                    watcher=lifeline.watch_group(proc.pid, remove=log.name))
    while True:
        if proc.poll() is not None:
            tail = _tail(log)
            stop(server)
            raise MacprofError(f"--serve {kind}: the server exited (code {proc.returncode}) before it answered: {tail}")
        if time.monotonic() - t0 > wait_s:
            stop(server)
            raise MacprofError(f"--serve {kind}: the server did not answer within {wait_s:g} s: {_tail(log)}")
        if _answers(server.url.removesuffix("/v1") + READY_PATH[kind]):
            break
        time.sleep(0.1)
    server.startup_s = time.monotonic() - t0
    held, how = holds(kind, slots)
    server.info = {"served_by": "macprof", "server": kind, "command": " ".join(cmd), "version": f"{dist} {version}",
                   "pid": proc.pid, "startup_s": round(server.startup_s, 3), "prompt_slots": held,
                   "prompt_slots_how": how, "log_path": log.name, **_cold_request(server, t0)}
    return server


def _cold_request(server: Server, t_start: float) -> dict:
    """The cold start as an app meets it: the first request to the just-started server (one
    token after a short prompt), its TTFT, and the time from the server's start to that token."""
    from macprof.engines import openai, wire

    eos = openai.eos_keys(openai.SERVED_AS[server.kind], 1, ())[0]  # so that one token comes
    url, body = wire.request_for("completions", server.url, server.model, " hello", 1, eos)
    t0 = time.monotonic()
    try:
        for item in wire.stream(url, body, 300.0, ndjson=False):
            if isinstance(item, wire.Chunk):
                t1 = time.monotonic()
                return {"cold_first_request_ttft_s": round(t1 - t0, 4), "cold_start_to_first_token_s":
                        round(t1 - t_start, 4)}
    except wire.ServerError as exc:
        return {"cold_first_request_error": str(exc)}
    return {"cold_first_request_error": "the first request's stream carried no token"}


def _answers(url: str) -> bool:
    from macprof.engines import wire

    try:
        wire.get_json(url, timeout=2.0)
    except wire.ServerError:
        return False
    return True


def _tail(log: IO[bytes]) -> str:
    log.seek(0)
    text = log.read().decode("utf-8", errors="replace").strip()
    return " ".join(text[-LOG_TAIL:].split()) or "(no output)"


def stop(server: Server) -> None:
    """SIGTERM to the server's process group, SIGKILL after the grace period; waits for it."""
    proc = server.proc
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(STOP_GRACE_S)
    _signal_group(proc.pid, signal.SIGKILL)  # whatever it spawned and left behind
    if server.watcher is not None:  # nothing left to watch
        server.watcher.kill()
        server.watcher.wait()
    server.log.close()
    try:
        os.unlink(server.log.name)
    except OSError:
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def serving(kind: str, path: Path, n_ctx: int = 4096, threads: int | None = None, slots: int = 1) -> Iterator[Server]:
    """The server for the span of the ``with``, stopped whatever ends it (KeyboardInterrupt too)."""
    server = start(kind, path, n_ctx, threads, slots=slots)
    try:
        yield server
    finally:
        stop(server)
