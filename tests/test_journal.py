"""The journal and the run log survive what the testers did to them: two runs on one name, an
existing log, a journal cut mid-line, lines written twice or moved, `--resume` of a journal it
must not continue, signals at the worst moments, a full disk. On the fake engine; the
repeated check at random moments is tests/test_journal_repeated.py (slow)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from macprof.errors import MacprofError
from macprof.store import runlog
from tests.test_run import FAULT_ARGS, macprof

BAD_OUTPUT = ("Traceback", "Aborted!", "internal error")


def run_args(cfg: Path, *extra: str, models: str = "fake-a,fake-b") -> list[str]:
    return ["run", "--config", str(cfg), "--models", models, *FAULT_ARGS, *extra]


def requests_in(journal: Path) -> set[tuple]:
    """(model, phase, kind, index, mode, t0) of every whole request line of a journal."""
    out = set()
    for line in journal.read_bytes().split(b"\n"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "request":
            out.add((e["model"], e["phase"], e["kind"], e["index"], e.get("mode"), e["t0"]))
    return out

def paced_run(fake_dir: Path, log: Path, journal: Path, measured: int) -> subprocess.Popen:
    """A run paced by --delay (a minute at least), returned once its journal holds ``measured``
    requests: still going when the test acts on it."""
    proc = subprocess.Popen([sys.executable, "-m", "macprof", *run_args(fake_dir / "models.toml", "--reps", "400",
                                                                        "--delay", "0.1"),
                             "--log", str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (journal.exists() and len(requests_in(journal)) >= measured):
        time.sleep(0.05)
    return proc



def requests_of(log) -> set[tuple]:
    out = set()
    for m in log.models:
        ph, name = m.phases, m.identity.name
        reqs = [("warm", r) for r in (ph.warm.requests if ph.warm else ())]
        for pair in ph.prefix.pairs if ph.prefix else ():
            reqs += [("prefix", r) for r in (pair.reuse, pair.noreuse) if r]
        for t in ph.cold.trials if ph.cold else ():
            reqs += [("cold", r) for r in (t.first_request, t.second_request) if r]
        out |= {(name, phase, r.kind, r.index, r.mode, r.t0) for phase, r in reqs}
    return out


def one_line(stderr: str) -> str:
    assert stderr.strip().count("\n") == 0, stderr
    assert not any(bad in stderr for bad in BAD_OUTPUT), stderr
    return stderr.strip()


@pytest.fixture(scope="module")
def whole(fake_dir, tmp_path_factory) -> bytes:
    """The journal of a whole run of both fake models (warm, 3 requests and a warm-up each)."""
    d = tmp_path_factory.mktemp("whole")
    macprof(*run_args(fake_dir / "models.toml"), "--log", str(d / "w.json"))
    return (d / "w.journal.jsonl").read_bytes()


def cut_after(raw: bytes, n_requests: int, torn: bool) -> bytes:
    """The journal as a crash leaves it after its n-th request event: with half of the next
    line when ``torn``."""
    lines = raw.split(b"\n")
    at = [i for i, line in enumerate(lines) if b'"event":"request"' in line][n_requests - 1]
    kept = b"\n".join(lines[:at + 1]) + b"\n"
    return kept + (lines[at + 1][: len(lines[at + 1]) // 2] if torn else b"")


# -- 1. two runs, one name -----------------------------------------------------------------------
PINNED_CLOCK = ("import sys, macprof.session as s; s.utc_now = lambda: '2026-12-01T04:53:01+00:00'; "
                "from macprof.cli import main; main(sys.argv[1:], prog_name='macprof')")


def test_two_runs_started_in_the_same_second_keep_both(fake_dir, tmp_path):
    cfg = fake_dir / "models.toml"
    procs = [subprocess.Popen([sys.executable, "-c", PINNED_CLOCK, "run", "--config", str(cfg), "--models", name,
                               *FAULT_ARGS], cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for name in ("fake-a", "fake-b")]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    logs = sorted((tmp_path / "runs").glob("*.json"))
    assert len(logs) == 2 and all(p.name.startswith("20261201T045301Z-") for p in logs)
    assert len(list((tmp_path / "runs").glob("*.journal.jsonl"))) == 2
    models = sorted(m.identity.name for p in logs for m in runlog.load(p).models)
    assert models == ["fake-a", "fake-b"]  # each run's own model, each measured whole
    for p in logs:
        (m,) = runlog.load(p).models
        assert len(m.phases.warm.requests) == 4


def test_a_second_run_on_a_journal_being_written_is_refused(fake_dir, tmp_path):
    log = tmp_path / "x.json"
    journal = tmp_path / "x.journal.jsonl"
    # --delay paces the requests: the run is still going (a minute at least) when the others try
    first = paced_run(fake_dir, log, journal, measured=3)
    try:
        same = macprof(*run_args(fake_dir / "models.toml"), "--log", str(log), check=False)
        assert same.returncode == 2 and "--force-overwrite" in one_line(same.stderr)
        forced = macprof(*run_args(fake_dir / "models.toml"), "--log", str(log), "--force-overwrite", check=False)
        assert forced.returncode == 2 and "another macprof run is writing" in one_line(forced.stderr)
        resumed = macprof(*run_args(fake_dir / "models.toml", "--reps", "400", "--delay", "0.1"), "--resume",
                          str(journal), check=False)
        assert resumed.returncode == 2 and "another macprof run is writing" in one_line(resumed.stderr)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 130
    assert requests_in(journal) == requests_of(runlog.load(log))  # the first run's, whole and alone


# -- 2. an existing log --------------------------------------------------------------------------
def test_an_existing_log_or_journal_is_never_overwritten(fake_dir, tmp_path):
    cfg = fake_dir / "models.toml"
    log = tmp_path / "x.json"
    log.write_text("an earlier run's log")
    proc = macprof(*run_args(cfg), "--log", str(log), check=False)
    assert proc.returncode == 2
    assert str(log) in one_line(proc.stderr) and "--force-overwrite" in proc.stderr
    assert log.read_text() == "an earlier run's log" and not (tmp_path / "x.journal.jsonl").exists()
    journal = tmp_path / "y.journal.jsonl"
    journal.write_text("an earlier run's journal\n")
    proc = macprof(*run_args(cfg), "--log", str(tmp_path / "y.json"), check=False)
    assert proc.returncode == 2 and "--force-overwrite" in one_line(proc.stderr)
    assert journal.read_text() == "an earlier run's journal\n" and not (tmp_path / "y.json").exists()
    macprof(*run_args(cfg), "--log", str(log), "--force-overwrite")  # the user said so
    assert runlog.load(log).complete is True and len(runlog.load(log).models) == 2


def test_a_log_that_appears_during_the_run_is_not_replaced(fake_dir, tmp_path, monkeypatch):
    from macprof import config, session

    log = tmp_path / "x.json"
    real = session.build

    def meanwhile(events):
        log.write_text("someone else's file")
        return real(events)

    monkeypatch.setattr(session, "build", meanwhile)
    models = config.load(fake_dir / "models.toml", {"phases": ["warm"], "prompt_tokens": 32, "gen_tokens": 4,
                                                    "reps": 1}).select(["fake-b"])
    with pytest.raises(MacprofError, match="not overwritten.*x.journal.jsonl keeps every measurement"):
        session.measure(models, log, progress=None)
    assert log.read_text() == "someone else's file"
    assert runlog.load(tmp_path / "x.journal.jsonl").complete is True
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- 4. journals cut, doubled, reordered, or not this run's --------------------------------------
def test_resume_after_a_line_cut_mid_write(fake_dir, whole, tmp_path):
    journal = tmp_path / "r.journal.jsonl"
    journal.write_bytes(cut_after(whole, 2, torn=True))  # fake-a: warm-up and one request, then half a line
    before = requests_in(journal)
    shown = runlog.load(journal)
    assert [len(m.phases.warm.requests) for m in shown.models] == [2] and not shown.complete
    macprof(*run_args(fake_dir / "models.toml"), "--resume", str(journal))
    lines = journal.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])  # nothing glued to the cut line
    final = runlog.load(tmp_path / "r.json")
    assert final.complete and [len(m.phases.warm.requests) for m in final.models] == [4, 4]
    assert before <= requests_of(final)
    assert [m.identity.name for m in runlog.load(journal).models] == ["fake-a", "fake-b"]  # `show` has both
    again = macprof(*run_args(fake_dir / "models.toml"), "--resume", str(journal), check=False)
    assert again.returncode == 2 and "finished" in one_line(again.stderr)
    assert runlog.load(tmp_path / "r.json") == final


SWEEPS = ["run", "--models", "fake-b", "--prompt-tokens", "16,24", "--gen-tokens", "4", "--depth", "0,16",
          "--batch", "1,2", "--reps", "2", "--timeout", "60"]


def _sweep_requests(log) -> set[tuple]:
    return {(p, c.id, r.kind, r.index, r.t0) for m in log.models for p in ("grid", "depth", "batch")
            for c in m.phases.sweep(p).cases for r in c.requests}


def test_resume_continues_a_sweep_case_where_it_was_cut(fake_dir, tmp_path):
    cfg = ["--config", str(fake_dir / "models.toml")]
    macprof(*SWEEPS, *cfg, "--log", str(tmp_path / "w.json"))
    raw = (tmp_path / "w.journal.jsonl").read_bytes()
    for n in (4, 9, 14):  # inside the grid's second case, the depth's first, the batch's first
        journal = tmp_path / f"r{n}.journal.jsonl"
        journal.write_bytes(cut_after(raw, n, torn=True))
        before = {(e.phase, e.case, e.kind, e.index, e.t0) for e in runlog.read_journal(journal) if e.KIND == "request"}
        macprof(*SWEEPS, *cfg, "--resume", str(journal))
        final = runlog.load(tmp_path / f"r{n}.json")
        assert final.complete and before <= _sweep_requests(final), n
        for phase in ("grid", "depth", "batch"):
            for case in final.models[0].phases.sweep(phase).cases:  # each request once, and the batch check
                assert case.status == "ok" and [r.index for r in case.requests] == [-1, 0, 1], (n, phase, case.id)
                assert phase != "batch" or case.check is not None, (n, case.id)


def test_duplicated_and_reordered_lines_read_as_written(whole, tmp_path):
    lines = whole.split(b"\n")[:-1]
    reqs = [i for i, line in enumerate(lines) if b'"event":"request"' in line]
    doubled = lines[:reqs[1] + 1] + [lines[reqs[1]], lines[reqs[-1]]] + lines[reqs[1] + 1:]
    moved = list(lines)
    moved[reqs[0]], moved[reqs[-1]] = moved[reqs[-1]], moved[reqs[0]]  # fake-b's last request among fake-a's
    moved = moved[1:] + moved[:1]  # and run_start last
    original = [e.to_json() for e in runlog.read_journal(_write(tmp_path / "a.journal.jsonl", lines))]
    for name, variant in (("doubled", doubled), ("moved", moved)):
        events = runlog.read_journal(_write(tmp_path / f"{name}.journal.jsonl", variant))
        assert [e.to_json() for e in events] == original, name
        log = runlog.load(tmp_path / f"{name}.journal.jsonl")
        assert [len(m.phases.warm.requests) for m in log.models] == [4, 4], name


def test_two_different_events_with_one_number_are_refused(whole, tmp_path):
    lines = whole.split(b"\n")[:-1]
    at = [i for i, line in enumerate(lines) if b'"event":"request"' in line][1]
    other = json.loads(lines[at])
    other["t0"] += 1
    path = _write(tmp_path / "x.journal.jsonl", lines + [json.dumps(other).encode()])
    with pytest.raises(MacprofError, match=f"two different events numbered {other['seq']}"):
        runlog.read_journal(path)


def test_lines_glued_by_an_older_macprof_are_read(whole, tmp_path):
    lines = whole.split(b"\n")[:-1]
    at = [i for i, line in enumerate(lines) if b'"event":"request"' in line][1]
    glued = lines[:at] + [lines[at][:40] + lines[at + 1]] + lines[at + 2:]
    events = runlog.read_journal(_write(tmp_path / "g.journal.jsonl", glued))
    assert len(events) == len(lines) - 1  # the cut line is lost, the one glued to it is not


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _unfinished(whole: bytes) -> bytes:
    return cut_after(whole, 2, torn=False)


REFUSALS = {  # case -> (file name, journal bytes from the whole one, models, extra options, message)
    "not a journal": ("r.jsonl", _unfinished, "fake-a,fake-b", (), "not a journal"),
    "empty": ("r.journal.jsonl", lambda w: b"", "fake-a,fake-b", (), "empty journal"),
    "no run_start": ("r.journal.jsonl", lambda w: _unfinished(w).split(b"\n", 1)[1], "fake-a,fake-b", (),
                     "no run_start"),
    "finished": ("r.journal.jsonl", lambda w: w, "fake-a,fake-b", (), "that run finished"),
    "other settings": ("r.journal.jsonl", _unfinished, "fake-a,fake-b", ("--reps", "4"), "fake-a with reps = 3, not 4"),
    "other models": ("r.journal.jsonl", _unfinished, "fake-b", (), "the models fake-a, fake-b, not fake-b"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_resume_refuses_a_journal_it_cannot_continue(fake_dir, whole, tmp_path, case):
    name, make, models, extra, message = REFUSALS[case]
    journal = tmp_path / name
    journal.write_bytes(make(whole))
    proc = macprof(*run_args(fake_dir / "models.toml", *extra, models=models), "--resume", str(journal), check=False)
    assert proc.returncode == 2 and message in one_line(proc.stderr), proc.stderr
    assert journal.read_bytes() == make(whole) and not (tmp_path / "r.json").exists()


def test_resume_refuses_changed_model_files(fake_dir, tmp_path):
    (tmp_path / "fake-b.gguf").write_bytes((fake_dir / "fake-b.gguf").read_bytes())
    cfg = tmp_path / "models.toml"
    cfg.write_text('[[models]]\nname = "fake-b"\nengine = "fake"\npath = "fake-b.gguf"\n')
    args = ["run", "--config", str(cfg), *FAULT_ARGS, "--reps", "1"]
    macprof(*args, "--log", str(tmp_path / "c.json"))
    journal = tmp_path / "c.journal.jsonl"
    journal.write_bytes(b"".join(journal.read_bytes().splitlines(keepends=True)[:-1]))  # killed before run_end
    with open(tmp_path / "fake-b.gguf", "ab") as fh:
        fh.write(b"\0")
    proc = macprof(*args, "--resume", str(journal), check=False)
    assert proc.returncode == 2 and "the files of model fake-b changed (fake-b.gguf" in one_line(proc.stderr)


# -- 5. signals at the worst moments --------------------------------------------------------------
WRAPPED = ("import os, signal, sys\nimport macprof.session as s\n{patch}\n"
           "from macprof.cli import main\nmain(sys.argv[1:], prog_name='macprof')\n")
AFTER_RUN_END = {
    # SIGTERM right after run_end is journaled (the log is being built)
    "SIGTERM while building": "real = s.build\ndef build(events):\n    os.kill(os.getpid(), signal.SIGTERM)\n"
                              "    return real(events)\ns.build = build",
    # two Ctrl-C while the log is being saved
    "two Ctrl-C while saving": "real = s.save\ndef save(*a, **k):\n    os.kill(os.getpid(), signal.SIGINT)\n"
                               "    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\ns.save = save",
}


@pytest.mark.parametrize("moment", list(AFTER_RUN_END))
def test_a_signal_after_the_run_ended_still_leaves_the_log(fake_dir, tmp_path, moment):
    log = tmp_path / "s.json"
    proc = subprocess.run([sys.executable, "-c", WRAPPED.format(patch=AFTER_RUN_END[moment]),
                           *run_args(fake_dir / "models.toml"), "--log", str(log)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 130, proc.stderr
    assert runlog.load(log).complete is True
    line = one_line(proc.stderr.strip().splitlines()[-1])
    assert "complete" in line and str(tmp_path / "s.journal.jsonl") in line
    assert not any(bad in proc.stderr for bad in BAD_OUTPUT)


@pytest.mark.parametrize("first,second,gap", [
    (signal.SIGINT, signal.SIGINT, 0.002), (signal.SIGTERM, signal.SIGINT, 0.002),
    # row 12 of the second hostile campaign: the second SIGTERM ended 3 of 8 runs by the signal (143)
    (signal.SIGTERM, signal.SIGTERM, 0.002), (signal.SIGTERM, signal.SIGTERM, 0.05), (signal.SIGTERM, signal.SIGTERM, 0.3)],
    ids=["two Ctrl-C", "SIGTERM then Ctrl-C", "two SIGTERMs 2ms apart", "two SIGTERMs 50ms apart",
         "two SIGTERMs 300ms apart"])
def test_a_second_signal_soon_after(fake_dir, tmp_path, first, second, gap):
    log = tmp_path / "two.json"
    journal = tmp_path / "two.journal.jsonl"
    proc = paced_run(fake_dir, log, journal, measured=5)
    proc.send_signal(first)
    time.sleep(gap)
    proc.send_signal(second)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = runlog.load(log)
    assert data.complete is False and data.interrupted is True
    assert requests_in(journal) == requests_of(data)
    line = err.strip().splitlines()[-1]
    assert "incomplete" in line and f"--resume {journal}" in line
    assert not any(bad in err for bad in BAD_OUTPUT), err


def test_a_signal_before_anything_is_journaled(fake_dir, tmp_path):
    patch = ("import macprof.collect.facts as f\nreal = f.run_start_event\ndef first():\n"
             "    os.kill(os.getpid(), signal.SIGTERM)\n    return real()\nf.run_start_event = first")
    proc = subprocess.run([sys.executable, "-c", WRAPPED.format(patch=patch), *run_args(fake_dir / "models.toml"),
                           "--log", str(tmp_path / "e.json")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 130 and one_line(proc.stderr.strip().splitlines()[-1]) == "macprof: interrupted"
    assert list(tmp_path.iterdir()) == []  # no empty journal, no log: nothing had been measured


# -- 10. a full disk -----------------------------------------------------------------------------------
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_is_the_message_not_the_close(fake_dir, tmp_path, monkeypatch):
    from macprof import config, session
    from macprof.run.journal import Journal

    real = Journal.write

    def filling(self, event):
        if len(self.events) == 12 and not getattr(self, "full", False):
            self.full = True  # from the 13th event on every write fails in flush, and the close would too
            self.fh = open("/dev/full", "a", encoding="utf-8")
        real(self, event)

    monkeypatch.setattr(Journal, "write", filling)
    models = config.load(fake_dir / "models.toml", {"phases": ["warm"], "prompt_tokens": 32, "gen_tokens": 4,
                                                    "reps": 3}).models
    with pytest.raises(MacprofError) as err:
        session.measure(models, tmp_path / "full.json", progress=None)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'full.journal.jsonl'}: writing the journal failed (No space left on device)")
    assert "what was measured until now is in it" in message and not (tmp_path / "full.json").exists()


def test_a_sigterm_while_a_header_is_read_is_not_a_corrupt_model(fake_dir, monkeypatch):
    """Row 3 of the hostile-user table: the SIGTERM handler's exception raised inside a model
    reader's `except Exception` was recorded as "truncated or corrupt" and the run went on. It is
    a BaseException now: it leaves the reader and the model's facts untouched, to the runner."""
    from macprof import config
    from macprof.collect import facts
    from macprof.files import ggufheader
    from macprof.run.signals import Interrupted

    def interrupted(*args, **kwargs):
        raise Interrupted()

    monkeypatch.setattr(ggufheader, "read_header", interrupted)
    (model,) = config.load(fake_dir / "models.toml").select(["fake-a"])
    with pytest.raises(Interrupted):
        facts.model_start_event(model)


def test_a_sigterm_during_the_bandwidth_probe_is_not_a_failed_probe(monkeypatch):
    """The probe's `except Exception` turns a failure into "measured bandwidth unknown": a SIGTERM
    raised in it must not become one (it did while Interrupted was an Exception)."""
    from macprof.collect import facts, probes
    from macprof.run.signals import Interrupted

    def interrupted(*args, **kwargs):
        raise Interrupted()

    monkeypatch.setattr(probes, "cached", interrupted)
    with pytest.raises(Interrupted):
        facts.machine_bandwidth({"chip": None, "gpu_cores": None})


def test_a_worker_event_its_types_refuse_is_said_on_stderr_not_dropped_in_silence(capsys):
    from macprof.run.watch import _parse_event

    assert _parse_event(b"a library's line on fd 1") is None  # not JSON: passed over, as a journal reader does
    assert _parse_event(b'{"event": "a kind of a later macprof"}') is None
    assert capsys.readouterr().err == ""
    bad = (b'{"event": "speculative_native", "phase": "speculative", "index": "x", "kind": "measured", '
           b'"case": "k1", "k": 1, "impl": "i"}')
    assert _parse_event(bad) is None
    err = capsys.readouterr().err
    assert "speculative_native" in err and "index" in err and "refused" in err
