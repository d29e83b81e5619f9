"""Every child dies with its parent (issue "nothing lost", second round, row 3 and class item 3):
macprof is SIGKILLed, which no handler of its own sees, in each phase, while a worker of that
phase is measuring (held there by the test fault "hang"), and every process it had started is
gone a few seconds later. The server case (`--serve`, a real server) is in test_server_real.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.test_server_run import RUN, fake_server  # noqa: F401 - the fixture

COMMON = ["--prompt-tokens", "32", "--gen-tokens", "4", "--reps", "3", "--timeout", "300"]
PHASES = {  # the options that run that phase alone, on fake-a
    "cold": ["--phases", "cold", "--cold-trials", "2"],
    "warm": ["--phases", "warm"],
    "prefix": ["--phases", "prefix", "--prefix-tokens", "24"],
    "grid": ["--prompt-tokens", "16,32"],
    "depth": ["--depth", "0,16"],
    "batch": ["--batch", "1,2"],
    "quality": ["--phases", "quality", "--quality-ctx", "64", "--quality-tokens", "256"],
}
GONE_WITHIN_S = 10.0
KILLED: dict[str, int] = {}  # phase -> children that were running when macprof was killed


def _spawned(journal: Path, phase: str) -> int | None:
    """The pid of the first worker the journal says was started for ``phase``."""
    if not journal.exists():
        return None
    for line in journal.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "worker_spawn" and phase in e.get("phases", ()) and e.get("pid"):
            return int(e["pid"])
    return None


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # a zombie has ended: init reaps it
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def kill_in(args: list[str], journal: Path, phase: str, env: dict) -> list[psutil.Process]:
    """Start `macprof run ARGS`, SIGKILL it once a worker of ``phase`` runs: -> its children
    then, and whether they are all gone within GONE_WITHIN_S."""
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, **env})
    deadline = time.monotonic() + 120
    try:
        parent = psutil.Process(proc.pid)
        while time.monotonic() < deadline:
            pid = _spawned(journal, phase)
            if pid and any(c.pid == pid for c in parent.children(recursive=True)):
                break
            assert proc.poll() is None, f"the {phase} run ended before its worker was seen"
            time.sleep(0.05)
        else:
            pytest.fail(f"no {phase} worker within 120 s")
        time.sleep(0.5)  # into the phase: the worker is held at its first request by the fault
        children = parent.children(recursive=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    end = time.monotonic() + GONE_WITHIN_S
    while _alive(children) and time.monotonic() < end:
        time.sleep(0.1)
    left = _alive(children)
    for p in left:  # the test leaves nothing behind, whatever it finds
        p.kill()
    assert not left, f"{phase}: still running {GONE_WITHIN_S:.0f} s after macprof was killed: " + \
        ", ".join(" ".join(p.cmdline()[:4]) for p in left)
    return children


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_sigkilled_run_leaves_no_child_in_any_phase(fake_dir, tmp_path, phase):
    log = tmp_path / "k.json"
    fault = {"model": "fake-a", "kind": "hang", "phase": phase, "after_requests": 0}
    args = ["--config", str(fake_dir / "models.toml"), "--models", "fake-a", *COMMON, *PHASES[phase], "--log", str(log)]
    children = kill_in(args, tmp_path / "k.journal.jsonl", phase, {"MACPROF_TEST_FAULT": json.dumps(fault)})
    assert children  # the worker at least
    KILLED[phase] = len(children)


def test_a_sigkilled_concurrency_run_leaves_no_child(fake_server, tmp_path):  # noqa: F811
    url = fake_server()
    log = tmp_path / "k.json"
    args = ["--endpoint", url, *RUN, "--concurrency", "1,2", "--load-seconds", "600", "--load-requests", "100000",
            "--log", str(log)]
    children = kill_in(args, tmp_path / "k.journal.jsonl", "concurrency", {})
    assert children
    KILLED["concurrency"] = len(children)
    print(f"\nchildren killed with macprof, by phase: {KILLED} ({sum(KILLED.values())} in all)")
