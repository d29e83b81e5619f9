"""A bare `macprof run --resume JOURNAL` continues what its journal names (issue "nothing lost",
second round, row 15): the server an `--endpoint` run measured, the models.toml a `--config`
run read (from a folder that has none), each with the options of that run; and a cold trial a
kill cut short stays in the log as "interrupted", beside the trial measured again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from macprof.store import runlog
from tests.test_children import kill_in
from tests.test_server_run import fake_server  # noqa: F401 - the fixture

REPS = 200
SERVER_REPS = 60  # each request to the fake server sleeps 10 ms: a run still going when it is stopped


def _interrupted(args: list[str], journal: Path, cwd: Path) -> None:
    """Run `macprof run ARGS` in ``cwd`` and SIGTERM it once 5 requests are journaled."""
    proc = subprocess.Popen([sys.executable, "-m", "macprof", "run", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (journal.exists() and journal.read_text().count('"event":"request"') >= 5):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 130


def _bare_resume(journal: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macprof", "run", "--resume", str(journal)], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_a_bare_resume_of_an_endpoint_run_measures_the_same_server(fake_server, tmp_path):  # noqa: F811
    url = fake_server()
    log, journal = tmp_path / "e.json", tmp_path / "e.journal.jsonl"
    _interrupted(["--endpoint", url, "--phases", "warm", "--prompt-tokens", "12", "--gen-tokens", "3", "--reps",
                  str(SERVER_REPS), "--timeout", "30", "--log", str(log)], journal, tmp_path)
    done = _bare_resume(journal, tmp_path)  # no --endpoint, no --reps: the journal names them
    assert done.returncode == 0, done.stderr
    data = runlog.load(log)
    (m,) = data.models
    assert data.complete and m.settings.reps == SERVER_REPS and m.settings.phases == ("warm",)
    assert len([r for r in m.phases.warm.requests if r.kind == "measured"]) == SERVER_REPS


def test_a_bare_resume_of_a_config_run_reads_that_config_from_anywhere(fake_dir, tmp_path):
    log, journal = tmp_path / "c.json", tmp_path / "c.journal.jsonl"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _interrupted(["--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--phases", "warm", "--prompt-tokens",
                  "16", "--gen-tokens", "2", "--reps", str(REPS), "--log", str(log)], journal, tmp_path)
    done = _bare_resume(journal, elsewhere)  # a folder with no models.toml
    assert done.returncode == 0, done.stderr
    data = runlog.load(log)
    assert data.complete and [m.identity.name for m in data.models] == ["fake-b"]
    assert len([r for r in data.models[0].phases.warm.requests if r.kind == "measured"]) == REPS


def test_a_resume_that_repeats_other_options_is_still_refused(fake_dir, tmp_path):
    log, journal = tmp_path / "o.json", tmp_path / "o.journal.jsonl"
    _interrupted(["--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "warm", "--prompt-tokens",
                  "16", "--gen-tokens", "2", "--reps", str(REPS), "--log", str(log)], journal, tmp_path)
    done = subprocess.run([sys.executable, "-m", "macprof", "run", "--resume", str(journal), "--reps", "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "reps = 200, not 3" in done.stderr, done.stderr


def test_a_cold_trial_cut_by_a_kill_is_marked_interrupted_beside_its_measured_again(fake_dir, tmp_path):
    log, journal = tmp_path / "k.json", tmp_path / "k.journal.jsonl"
    args = ["--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "cold", "--cold-trials", "2",
            "--prompt-tokens", "16", "--gen-tokens", "2"]
    fault = {"model": "fake-a", "kind": "hang", "phase": "cold", "after_requests": 0}
    kill_in([*args, "--log", str(log)], journal, "cold", {"MACPROF_TEST_FAULT": json.dumps(fault)})
    cut = runlog.load(journal).models[0].phases.cold
    assert [t.status for t in cut.trials] == ["interrupted"] and cut.summary.ready_s.failures == 0
    done = subprocess.run([sys.executable, "-m", "macprof", "run", *args, "--resume", str(journal)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cold = runlog.load(log).models[0].phases.cold
    assert [(t.index, t.status) for t in cold.trials] == [(0, "interrupted"), (0, "ok"), (1, "ok")]
    assert cold.trials[0].failure is None and "interrupted" in (cold.trials[0].note or "")
    assert cold.summary.ready_s.failures == 0 and cold.summary.ready_s.n == 2
    assert "interrupted (the run ended during it)" in subprocess.run(
        [sys.executable, "-m", "macprof", "show", str(log)], capture_output=True, text=True).stdout


def test_a_cold_trial_cut_before_its_worker_started_is_not_paired_with_the_retry(fake_dir, tmp_path):
    """A run interrupted between a cold_trial event and its worker's spawn leaves a trial with
    no worker; the resumed run journals the trial again with its own worker. The first is
    "interrupted", the second has the worker: one measured trial, not the same worker twice."""
    log = tmp_path / "w.json"
    done = subprocess.run([sys.executable, "-m", "macprof", "run", "--config", str(fake_dir / "models.toml"),
                           "--models", "fake-a", "--phases", "cold", "--cold-trials", "1", "--prompt-tokens", "16",
                           "--gen-tokens", "2", "--log", str(log)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "w.journal.jsonl").read_text().splitlines()]
    at = next(i for i, e in enumerate(lines) if e["event"] == "cold_trial")
    lines.insert(at, dict(lines[at]))  # the trial journaled, then the run cut before its worker started
    for seq, e in enumerate(lines):
        e["seq"] = seq
    journal = tmp_path / "cut.journal.jsonl"
    journal.write_text("".join(json.dumps(e) + "\n" for e in lines))
    cold = runlog.load(journal).models[0].phases.cold
    assert [(t.index, t.status) for t in cold.trials] == [(0, "interrupted"), (0, "ok")]
    assert cold.summary.ready_s.n == 1 and cold.summary.ready_s.failures == 0
