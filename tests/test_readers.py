"""Every file macprof reads whole on a user's word goes through one reader (files/filekind.py
``read_regular``): a FIFO, a device, a socket, a directory or a kernel pseudo-file in its place
is refused in one line naming it, before anything blocks, and no more than its cap and one byte
is ever read, whatever size the file system reports (issue #37, class 1).

Each reader is held to each kind below: READERS x KINDS cases, every one in a thread with a
deadline, so a reader that blocks on a FIFO fails here instead of hanging the suite."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from macprof import config
from macprof.errors import MacprofError
from macprof.files import filekind, modelconfig
from macprof.run import chat, qualitytext, taskfile
from macprof.run.journal import Journal
from macprof.store import runlog

PROC_ENVIRON = Path("/proc/self/environ")


def _mlx_template(path: Path):
    from macprof.engines import mlx

    mlx._chat_template_of.cache_clear()
    return mlx._chat_template_of(path.parent)


# (name, the file's name in its folder, what reads it, its cap)
READERS = [
    ("task file", "tasks.jsonl", lambda p: taskfile.load(str(p)), taskfile.MAX_TASK_FILE_BYTES),
    ("--chat-template", "t.jinja", lambda p: chat.read_template(str(p)), chat.MAX_TEMPLATE_BYTES),
    ("MLX chat_template.jinja", "chat_template.jinja", _mlx_template, chat.MAX_TEMPLATE_BYTES),
    ("MLX tokenizer_config.json", "tokenizer_config.json", _mlx_template, 16 << 20),
    ("MLX config.json", "config.json", modelconfig.json_object, modelconfig.MAX_CONFIG),
    ("models.toml", "models.toml", lambda p: config.load(p, check_engines=False), config.MAX_CONFIG_BYTES),
    ("quality text", "notes.txt", lambda p: qualitytext.read_text(str(p)), qualitytext.MAX_TEXT_BYTES),
    ("run log", "run.json", runlog.load, runlog.MAX_LOG_BYTES),
    ("journal", "run.journal.jsonl", runlog.read_journal, runlog.MAX_LOG_BYTES),
    ("journal to resume", "r.journal.jsonl", Journal.reopen, runlog.MAX_LOG_BYTES),
]


def _make(kind: str, path: Path, cap: int) -> str:
    """``path`` made into ``kind``; the words the refusal must hold."""
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file (a FIFO)"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return "not a regular file (a symlink to /dev/zero, a character device)"
    if kind == "directory":
        path.mkdir()
        return "not a regular file (a directory)"
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        return "not a regular file (a socket)"
    if kind == "pseudo-file":  # reports 0 bytes and reads the environment: never the prompt or a config
        path.symlink_to(PROC_ENVIRON)
        return "reports 0 bytes but reads"
    assert kind == "too large"
    with open(path, "wb") as fh:  # sparse: no disk used
        fh.truncate(cap + 1)
    return str(cap)  # the cap, in "N bytes is too large for X (at most CAP)" or the quality text's own words


KINDS = ["fifo", "dev-zero", "directory", "socket", "pseudo-file", "too large"]


def _in_time(call, seconds: float = 30.0):
    """``call()``'s exception (or None), failing where it does not return in time (a blocked open)."""
    out: dict = {}

    def run():
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    return out.get("exc")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name, filename, read, cap", READERS, ids=[r[0] for r in READERS])
def test_every_reader_refuses_every_kind_in_one_line(tmp_path, kind, name, filename, read, cap):
    if kind == "pseudo-file" and not PROC_ENVIRON.exists():
        pytest.skip("no /proc on this system")
    path = tmp_path / filename
    says = _make(kind, path, cap)
    exc = _in_time(lambda: read(path))
    assert isinstance(exc, MacprofError), repr(exc)
    line = str(exc)
    assert "\n" not in line and str(path) in line and says in line, line
    assert "HOME=" not in line and "PATH=" not in line  # the pseudo-file's content is never quoted


def test_the_reader_never_trusts_a_reported_size(tmp_path):
    """/proc/self/environ reports 0 bytes: at most the cap and one byte are read, then refused."""
    if not PROC_ENVIRON.exists():
        pytest.skip("no /proc on this system")
    assert os.stat(PROC_ENVIRON).st_size == 0 and len(PROC_ENVIRON.read_bytes()) > 16
    with pytest.raises(MacprofError, match="more than 16 bytes: too large for a test file"):
        filekind.read_regular(PROC_ENVIRON, 16, "a test file")


def test_a_file_read_whole_within_its_cap(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"x" * 100)
    assert filekind.read_regular(p, 100, "a test file") == b"x" * 100
    with pytest.raises(MacprofError, match="101 bytes is too large for a test file \\(at most 100\\)"):
        p.write_bytes(b"x" * 101)
        filekind.read_regular(p, 100, "a test file")
    p.write_bytes(b"\xff")
    with pytest.raises(MacprofError, match="not UTF-8 text .*: not a test file"):
        filekind.read_text(p, 100, "a test file")


def test_the_readers_in_a_run_are_refused_before_a_worker_starts(tmp_path, fake_dir):
    """End to end: --chat-template and --tasks of a FIFO are one line and exit 2, nothing blocks."""
    from tests.test_run import macprof

    fifo = tmp_path / "t.jinja"
    os.mkfifo(fifo)
    for option, phase in (("--chat-template", "conversation"), ("--tasks", "tasks")):
        proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", phase,
                       option, str(fifo), "--turns", "1", "--log", str(tmp_path / f"{phase}.json"), check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "not a regular file (a FIFO)" in proc.stderr and str(fifo) in proc.stderr
