"""The fault table: each broken model gives one clear reason naming the file, is recorded as
a failure of that model, and the other model of the run (a fake-engine one) is still measured
and saved. Broken files are refused before any engine loads them, except where noted."""

import json
import struct

import pytest

from macprof.store import runlog
from tests.test_run import FAULT_ARGS, macprof


def _gguf(fake_dir):
    return (fake_dir / "fake-b.gguf").read_bytes()


def _mlx(dst):
    """A small MLX model directory as mlx-lm writes one: config.json and safetensors weights."""
    import numpy as np
    from safetensors.numpy import save_file

    dst.mkdir()
    (dst / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32,
        "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "torch_dtype": "float16"}))
    save_file({"model.embed_tokens.weight": np.zeros((64, 16), np.float16),
               "model.norm.weight": np.ones(16, np.float16)}, str(dst / "model.safetensors"), metadata={"format": "mlx"})
    return dst


def make_case(name, fake_dir, tmp):
    """-> (engine, path) of a broken model."""
    g = tmp / "model.gguf"
    if name == "gguf truncated in header":
        g.write_bytes(_gguf(fake_dir)[:100])
    elif name == "gguf truncated in tensor data":
        raw = _gguf(fake_dir)
        g.write_bytes(raw[: int(len(raw) * 0.8)])
    elif name == "gguf wrong magic":
        g.write_bytes(b"GGUX" + _gguf(fake_dir)[4:])
    elif name == "gguf unsupported version":
        raw = _gguf(fake_dir)
        g.write_bytes(raw[:4] + struct.pack("<I", 99) + raw[8:])
    elif name == "gguf zero bytes":
        g.write_bytes(b"")
    elif name == "gguf that is a text file":
        g.write_text("just some notes\n" * 10)
    elif name == "gguf that is a safetensors file":
        g.write_bytes((_mlx(tmp / "other") / "model.safetensors").read_bytes())
    else:
        d = _mlx(tmp / "mlxmodel")
        if name == "mlx without config.json":
            (d / "config.json").unlink()
        elif name == "mlx without weights":
            (d / "model.safetensors").unlink()
        elif name == "mlx unknown architecture":
            cfg = json.loads((d / "config.json").read_text())
            cfg["model_type"] = "no_such_architecture"
            (d / "config.json").write_text(json.dumps(cfg))
        elif name == "mlx corrupt safetensors header":
            raw = (d / "model.safetensors").read_bytes()
            (d / "model.safetensors").write_bytes(raw[:8] + b"{not json" + raw[17:])
        return "mlx", d
    return "llama.cpp", g


CASES = [
    ("gguf truncated in header", "model.gguf: GGUF header: a key/value count of"),
    ("gguf truncated in tensor data", "model.gguf: GGUF tensor data: tensor"),
    ("gguf wrong magic", "model.gguf: not a GGUF file (it does not begin with the GGUF magic)"),
    ("gguf unsupported version", "model.gguf: unsupported GGUF version 99"),
    ("gguf zero bytes", "model.gguf: empty file (0 bytes)"),
    ("gguf that is a text file", "not a GGUF file"),
    ("gguf that is a safetensors file", "not a GGUF file"),
    ("mlx without config.json", "mlxmodel: not an MLX model directory (no config.json)"),
    ("mlx without weights", "mlxmodel: no *.safetensors weights"),
    ("mlx corrupt safetensors header", "corrupt safetensors header"),
]


def _run_broken(fake_dir, tmp, cases):
    """One run of the broken models of ``cases``, then a good one (fake-b): every broken one is
    refused on its own, and the good one is still measured. -> (run log, process, broken models by case)."""
    entries = []
    for i, case in enumerate(cases):
        (tmp / f"case{i}").mkdir()
        engine, path = make_case(case, fake_dir, tmp / f"case{i}")
        entries.append(f'[[models]]\nname = "broken{i}"\nengine = "{engine}"\npath = "{path}"\n')
    entries.append(f'[[models]]\nname = "good"\nengine = "fake"\npath = "{fake_dir / "fake-b.gguf"}"\n')
    cfg = tmp / "models.toml"
    cfg.write_text("\n".join(entries))
    log = tmp / "run.json"
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log))
    data = runlog.load(log)
    good = data.models[-1]
    assert good.identity.name == "good"
    assert len([r for r in good.phases.warm.requests if r.status == "ok"]) == 4
    return data, proc, dict(zip(cases, data.models))


@pytest.fixture(scope="module")
def broken_run(fake_dir, tmp_path_factory):
    """The whole table in one run: macprof refuses all of these before any engine loads them."""
    return _run_broken(fake_dir, tmp_path_factory.mktemp("broken"), [case for case, _ in CASES])


def _check_refused(proc, broken, message):
    assert "Traceback" not in proc.stdout + proc.stderr
    assert broken.failures, broken.identity.name
    reason = broken.failures[0].reason
    assert message in reason and "\n" not in reason.strip(), reason


@pytest.mark.parametrize("case,message", CASES, ids=[c[0] for c in CASES])
def test_broken_model(broken_run, case, message):
    _, proc, broken = broken_run
    _check_refused(proc, broken[case], message)


@pytest.mark.slow  # the one case only the engine itself can refuse: the real MLX engine loads it
def test_broken_model_the_engine_refuses(fake_dir, tmp_path):
    case = "mlx unknown architecture"
    _, proc, broken = _run_broken(fake_dir, tmp_path, [case])
    _check_refused(proc, broken[case], "mlxmodel: mlx could not load the model: ValueError: Model type no_such_architecture")


def _two_models(tmp_path, fake_dir):
    """"first" (fake-a, the larger file), then "good" (fake-b)."""
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "first"\nengine = "fake"\npath = "{fake_dir / "fake-a.gguf"}"\n\n'
                   f'[[models]]\nname = "good"\nengine = "fake"\npath = "{fake_dir / "fake-b.gguf"}"\n')
    return cfg


def test_prompt_longer_than_the_context_is_refused(fake_dir, tmp_path):
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "long"\nengine = "fake"\npath = "{fake_dir / "fake-b.gguf"}"\n'
                   f'prompt_tokens = 1100\ngen_tokens = 8\nphases = ["warm"]\n')
    log = tmp_path / "run.json"
    proc = macprof("run", "--config", str(cfg), "--log", str(log), check=False)
    assert proc.returncode == 3  # the only model was refused: the run measured nothing
    (failure,) = runlog.load(log).models[0].failures
    assert failure.status == "refused" and "1108 exceeds the model's context length of 1024 tokens" in failure.reason


def _runner(cfg, log):
    from macprof import config, session

    models = config.load(cfg, {"phases": ["warm"], "prompt_tokens": 32, "gen_tokens": 4, "reps": 3}).models
    return lambda: session.measure(models, log, progress=lambda s: None)


def test_model_larger_than_memory_is_refused_unless_forced(fake_dir, tmp_path, monkeypatch):
    import psutil

    from macprof.run import orchestrator

    real = psutil.virtual_memory()
    size = (fake_dir / "fake-a.gguf").stat().st_size
    fake = real._replace(available=size - 1)  # fake-a does not fit, the smaller fake-b does
    monkeypatch.setattr(orchestrator.psutil, "virtual_memory", lambda: fake)
    cfg = _two_models(tmp_path, fake_dir)
    log = _runner(cfg, tmp_path / "mem.json")()
    big, good = log.models
    (failure,) = big.failures
    assert failure.status == "refused" and "use --force" in failure.reason and "the memory available now is 0.0 GB" in failure.reason
    assert not big.phases.warm.requests and len(good.phases.warm.requests) == 4


def test_disk_full_while_journaling(fake_dir, tmp_path, monkeypatch):
    import errno
    import os

    import psutil

    from macprof.errors import MacprofError

    real_fsync, calls = os.fsync, {"n": 0}

    def filling_up(fd):
        calls["n"] += 1
        if calls["n"] > 12:  # the disk is full from the 13th journal event on
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", filling_up)
    journal = tmp_path / "full.journal.jsonl"
    with pytest.raises(MacprofError) as err:
        _runner(_two_models(tmp_path, fake_dir), tmp_path / "full.json")()
    monkeypatch.setattr(os, "fsync", real_fsync)
    message = str(err.value)
    assert str(journal) in message and "No space left on device" in message and "what was measured" in message
    assert not (tmp_path / "full.json").exists()
    recovered = runlog.load(journal)  # everything journaled before the disk filled
    done = [r for m in recovered.models for r in m.phases.warm.requests]
    assert done and all(r.status == "ok" for r in done)
    assert not [p for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != "zombie"]


def test_unwritable_log_folder(fake_dir, tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the runs folder should be")
    proc = macprof("run", "--config", str(_two_models(tmp_path, fake_dir)), *FAULT_ARGS,
                   "--log", str(blocker / "x.json"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "cannot write the journal" in proc.stderr and str(blocker) in proc.stderr


@pytest.mark.slow  # a stress test: 22 whole runs, a minute even on the fake engine
def test_sigkill_of_the_parent_at_20_points(fake_dir, tmp_path):
    """Kill -9 the parent at varying times across a run of two models: the journal always holds
    every request that had completed, and no run log is ever left half-written."""
    import random
    import signal
    import subprocess
    import sys
    import time

    cfg = _two_models(tmp_path, fake_dir)
    total = 2 * 201  # requests of a whole run: 2 models x (warm-up + 200)

    def start(log):
        return subprocess.Popen([sys.executable, "-m", "macprof", "run", "--config", str(cfg), "--phases", "warm",
                                 "--prompt-tokens", "32", "--gen-tokens", "4", "--reps", "200", "--log", str(log)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    assert start(tmp_path / "warmup.json").wait() == 0  # fills the caches (bandwidth probe, hashes)
    t = time.monotonic()  # one whole run: the kills then spread over its duration
    assert start(tmp_path / "whole.json").wait() == 0
    duration = time.monotonic() - t
    rng = random.Random(20)
    results = []
    for k in range(20):
        log = tmp_path / f"k{k}.json"
        journal = tmp_path / f"k{k}.journal.jsonl"
        proc = start(log)
        time.sleep(rng.uniform(0.05, 0.95) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lines = journal.read_text().splitlines() if journal.exists() else []
        completed = sum(1 for line in lines if '"event":"request"' in line and line.endswith("}"))
        recovered = 0
        if lines:
            recovered = sum(len(m.phases.warm.requests) for m in runlog.load(journal).models)
        assert recovered == completed, (k, completed, recovered)
        # never a half-written log: absent (even when the kill fell after the last request but
        # before the atomic rename), or whole and complete
        if log.exists():
            assert runlog.load(log).complete is True
        results.append((completed, recovered))
    print(f"\nSIGKILL x{len(results)} over a {duration:.1f} s run: (completed, recovered) = {results}")
    mid_run = [c for c, _ in results if 0 < c < total]
    assert len(mid_run) >= 5, results  # kills landed while requests were being measured (13-15 of 20 here)


def test_permission_denied_on_the_config(tmp_path, monkeypatch):
    from macprof import config
    from macprof.errors import MacprofError

    p = tmp_path / "models.toml"
    p.write_text("[[models]]\n")

    from macprof.files import filekind

    def denied(path, *a, **k):  # root ignores file modes, so the OS's answer is simulated (at the one reader)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(filekind, "open_regular", denied)
    with pytest.raises(MacprofError, match=f"{p}: permission denied"):
        config.load(p)


def test_log_with_path_tricks_writes_nothing_else(tmp_path):
    from click.testing import CliRunner

    from macprof.cli import main
    from tests.conftest import FIXTURES

    data = json.loads((FIXTURES / "runlogs" / "tiny-a.json").read_text())
    data["models"][0]["identity"]["name"] = "../../escape"
    data["models"][0]["identity"]["path"] = "../../../etc/passwd"
    data["models"][0]["identity"]["files"][0]["name"] = "../../x.gguf"
    work = tmp_path / "work"
    work.mkdir()
    (work / "log.json").write_text(json.dumps(data))
    before = sorted(p for p in tmp_path.rglob("*"))
    for args in (["show", str(work / "log.json")], ["compare", str(work / "log.json")],
                 ["share", str(work / "log.json"), "-o", str(work / "out.json")],
                 ["plot", str(work / "log.json"), "-o", str(work / "c.png")]):
        assert CliRunner().invoke(main, args).exit_code == 0, args
    after = sorted(p for p in tmp_path.rglob("*"))
    assert sorted(set(after) - set(before)) == [work / "c.png", work / "out.json"]


def test_the_event_pump_cuts_lines_linearly_and_passes_over_one_too_long():
    """A worker's stdout: lines split across reads are joined, a line past the cap is dropped
    whole (counted) and the next line is read as usual; a 200 MB line is not quadratic (it was:
    ``buf += chunk`` and a search from the start on every read)."""
    from macprof.run.watch import Lines

    lines = Lines(limit=10)
    assert lines.feed(b'{"a"') == [] and lines.feed(b':1}\n{"b":2}\nxx') == [b'{"a":1}', b'{"b":2}']
    assert lines.feed(b"x" * 20) == [] and lines.feed(b"yy\nok\n") == [b"ok"] and lines.dropped == 1
    assert lines.feed(b"0123456789A\nfine\n") == [b"fine"] and lines.dropped == 2  # too long within one read
    big = Lines()
    chunk = b"z" * (1 << 16)
    for _ in range((200 << 20) // len(chunk)):  # 200 MB of one line, in the worker pipe's 64 KiB reads
        assert big.feed(chunk) == []
    assert big.feed(b"\n" + b'{"event":"done"}\n') == [b'{"event":"done"}'] and big.dropped == 1
