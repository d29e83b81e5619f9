"""The quality phase: its math against llama-perplexity's definitions, the chunking, the run
on the fake engine (the reference first, itself at KLD 0, tokenizers that differ refused,
failures), the compare gate; and on the tiny demo models with both real engines (slow)."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from macprof.analyse import compare as cmp
from macprof.errors import MacprofError
from macprof.measure import quality as q
from macprof.run import qualitytext
from macprof.run.phases.quality import chunked_ids
from macprof.store import runlog
from tests.conftest import cli
from tests.test_run import macprof


# -- the math --------------------------------------------------------------------------------
def test_quantized_log_probs_round_trip_within_llama_cpp_step():
    rng = np.random.default_rng(0)
    logits = (3 * rng.standard_normal((5, 1001))).astype(np.float32)
    rows = q.quantize(logits)
    assert rows.shape == (5, q.row_width(1001)) and rows.dtype == np.uint16
    base = q.dequantize(rows, 1001)
    exact = q.log_softmax(logits)
    kept = exact > -16  # llama.cpp keeps what lies within 16 nats of the top
    step = (logits.max(axis=1) - np.maximum(logits.min(axis=1), logits.max(axis=1) - 16)) / 65535
    assert np.all(np.abs(base - exact)[kept] <= (step[:, None] / 2 + 1e-5).repeat(1001, axis=1)[kept])


def test_kld_matches_the_direct_formula_and_is_zero_against_itself():
    rng = np.random.default_rng(1)
    ref = (2 * rng.standard_normal((20, 500))).astype(np.float32)
    other = (ref + 0.3 * rng.standard_normal((20, 500))).astype(np.float32)
    targets = rng.integers(0, 500, 20)
    got = q.score(other, targets, q.quantize(ref))
    p, lq = np.exp(q.log_softmax(ref)), q.log_softmax(other)
    direct = (p * (q.log_softmax(ref) - lq)).sum(axis=1)
    assert np.allclose(got["kld"], direct, atol=1e-3)
    assert got["nll"] == pytest.approx((-lq[np.arange(20), targets]).tolist())
    same = q.score(ref, targets, q.quantize(ref))
    assert max(abs(x) for x in same["kld"]) < 1e-4 and all(same["same_top"])


def test_statistics_as_llama_perplexity_reports_them():
    assert q.perplexity([math.log(7.0)] * 50)["ppl"] == pytest.approx(7.0)
    mean, unc = q.mean_and_uncertainty([1.0, 2.0, 3.0])
    assert mean == 2.0 and unc == 0.0  # 10 values or fewer: no ± (llama-perplexity's rule)
    values = list(np.linspace(0, 1, 101))
    s = q.kld_stats(values)
    assert s["median"] == pytest.approx(0.5) and s["p99"] == pytest.approx(0.99) and s["max"] == 1.0
    assert s["unc"] == pytest.approx(math.sqrt((np.mean(np.square(values)) - 0.25) / 100))
    assert q.same_top_stats([True, True, False, True])["same_top"] == 0.75


def test_frontier_marks_models_nothing_beats_on_both():
    assert q.frontier([(0.0, 10.0), (0.01, 20.0), (0.02, 15.0), (None, 99.0)]) == [True, True, False, False]


def test_chunks_start_with_bos_and_are_whole():
    ids = list(range(100, 260))
    chunks = chunked_ids(ids, [1], 64, 1000)
    assert len(chunks) == 2 and all(len(c) == 64 and c[0] == 1 for c in chunks) and chunks[1][1:] == ids[65:128]
    assert chunked_ids(ids, [], 64, 64) == [ids[:64]]
    assert chunked_ids(ids[:50], [1], 64, 1000) == []


def test_kld_gate_parses_and_fires_on_a_rise():
    assert cmp.parse_fail_if(["kld:+0.01", "decode:-5%"]) == [("kld", 0.01), ("decode", -0.05)]
    with pytest.raises(MacprofError):
        cmp.parse_fail_if(["kld:1%"])
    row = {"model": "m", "source": "new", "same_model_baseline": "m@old",
           "same_model": {"ratios": {"kld": 0.02}, "calls": {}}}
    assert cmp.regressions({"rows": [row]}, [("kld", 0.01)])
    assert not cmp.regressions({"rows": [row]}, [("kld", 0.05)])


# -- a run on the fake engine ----------------------------------------------------------------
def _macprof(*args, env=None):
    return macprof(*args, env=env, check=False)


@pytest.fixture(scope="module")
def fake_run(fake_dir, tmp_path_factory):
    """fake-a and fake-b (same tokenizer, the same logits: a model against itself), and fake-c,
    a smaller vocabulary (another tokenizer); fake-b named as the reference."""
    from macprof.engines.fake import write_model

    root = tmp_path_factory.mktemp("quality")
    write_model(root / "fake-c.gguf", vocab_size=700)
    toml = (fake_dir / "models.toml").read_text().replace('path = "', f'path = "{fake_dir}/')
    (root / "models.toml").write_text(toml + '\n[[models]]\nname = "fake-c"\nengine = "fake"\npath = "fake-c.gguf"\n')
    log = root / "q.json"
    proc = _macprof("run", "--config", str(root / "models.toml"), "--phases", "warm,quality", "--reps", "1",
                    "--prompt-tokens", "32", "--gen-tokens", "4", "--quality-tokens", "256", "--quality-ctx", "64",
                    "--reference", "fake-b", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    return root, log, runlog.load(log)


def test_reference_scores_first_and_itself_at_zero(fake_run):
    root, log, run = fake_run
    journal = [json.loads(line) for line in (root / "q.journal.jsonl").read_text().splitlines()]
    first = next(e["model"] for e in journal if e["event"] == "quality_start")
    assert first == "fake-b"
    by = {m.identity.name: m.phases.quality for m in run.models}
    assert by["fake-b"].is_reference and by["fake-b"].kld.max < 1e-4 and by["fake-b"].same_top == 1.0
    a = by["fake-a"]  # the fake's logits depend on the ids only: the same model as far as scores go
    assert a.reference == "fake-b" and a.kld.mean == pytest.approx(0, abs=1e-4) and a.same_top == 1.0
    assert a.scored_tokens == 4 * 31 and len(a.chunks) == 4 and a.tokens_sha256 == by["fake-b"].tokens_sha256
    assert a.text.source == "macprof/data/quality.txt" and a.ppl > 1
    assert not list(root.glob("q.journal.jsonl.quality-*")), "the stored distributions outlive the run"


def test_another_tokenizer_is_refused_with_the_reason_and_keeps_its_perplexity(fake_run):
    _, _, run = fake_run
    c = next(m for m in run.models if m.identity.name == "fake-c").phases.quality
    assert c.kld is None and "tokenizer differs" in c.reference_reason and c.ppl is not None


def test_compare_shows_quality_columns(fake_run):
    _, log, _ = fake_run
    out = cli("compare", log)
    assert out.exit_code == 0 and "KLD mean" in out.output and "same top" in out.output


def test_unknown_reference_and_short_text_are_refused(fake_dir, tmp_path):
    common = ["run", "--config", str(fake_dir / "models.toml"), "--phases", "warm,quality", "--reps", "1",
              "--prompt-tokens", "32", "--gen-tokens", "4", "--quality-ctx", "64", "--quality-tokens", "128"]
    proc = _macprof(*common, "--reference", "nope", "--log", str(tmp_path / "a.json"))
    assert proc.returncode == 2 and "--reference nope: not a model of this run" in proc.stderr
    short = tmp_path / "short.txt"
    short.write_text("too short")
    proc = _macprof(*common, "--text", str(short), "--log", str(tmp_path / "b.json"))
    assert proc.returncode == 0, proc.stderr
    for m in runlog.load(tmp_path / "b.json").models:
        assert any("fewer than one chunk" in (f.reason or "") for f in m.failures)


def test_a_reference_that_dies_mid_scoring_leaves_the_others_their_perplexity(fake_dir, tmp_path):
    fault = json.dumps({"model": "fake-a", "kind": "oom", "phase": "quality", "after_requests": 0})
    proc = _macprof("run", "--config", str(fake_dir / "models.toml"), "--phases", "warm,quality", "--reps", "1",
                    "--prompt-tokens", "32", "--gen-tokens", "4", "--quality-ctx", "64", "--quality-tokens", "128",
                    "--log", str(tmp_path / "f.json"), env={"MACPROF_TEST_FAULT": fault})
    assert proc.returncode == 0, proc.stderr
    by = {m.identity.name: m for m in runlog.load(tmp_path / "f.json").models}
    assert any(f.phase == "quality" for f in by["fake-a"].failures) and len(by["fake-a"].phases.quality.chunks) == 1
    b = by["fake-b"].phases.quality
    assert b.kld is None and b.reference_reason.startswith("no reference: fake-a failed") and b.ppl is not None


# -- the real engines on the tiny demo models ---------------------------------------------------
@pytest.mark.slow
def test_real_engines_score_against_the_f16_reference(tiny_dir, tmp_path):
    log = tmp_path / "real.json"
    proc = _macprof("run", "--config", str(tiny_dir / "models.toml"), "--models",
                    "demo-tiny-f16,demo-tiny-q4_k_m,demo-tiny-mlx-f16", "--phases", "quality",
                    "--quality-tokens", "128", "--quality-ctx", "64", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    by = {m.identity.name: m.phases.quality for m in runlog.load(log).models}
    assert by["demo-tiny-f16"].is_reference and by["demo-tiny-f16"].kld.max < 1e-3
    assert by["demo-tiny-q4_k_m"].kld.mean > by["demo-tiny-f16"].kld.mean
    mlx = by["demo-tiny-mlx-f16"]
    assert mlx.tokens_sha256 == by["demo-tiny-f16"].tokens_sha256, mlx.reference_reason
    assert mlx.kld.mean < by["demo-tiny-q4_k_m"].kld.mean  # the same weights in float16: near zero


def test_plot_draws_the_frontier(fake_run, tmp_path):
    _, log, _ = fake_run
    out = cli("plot", log, "-o", tmp_path / "f.png")
    assert out.exit_code == 0, out.output
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_quality_settings_are_checked(tmp_path):
    from macprof import config

    toml = tmp_path / "models.toml"
    toml.write_text('[settings]\nquality_ctx = 63\n[[models]]\nname = "x"\nengine = "fake"\npath = "x.gguf"\n')
    (tmp_path / "x.gguf").write_bytes(b"")
    with pytest.raises(MacprofError, match="quality_ctx.*even integer"):
        config.load(toml, check_engines=False)
    toml.write_text('[settings]\nphases = ["quality"]\nquality_tokens = 100\n'
                    '[[models]]\nname = "x"\nengine = "fake"\npath = "x.gguf"\n')
    with pytest.raises(MacprofError, match="at least one chunk"):
        config.load(toml, check_engines=False)


def test_a_quality_only_run_measured_something(fake_dir, tmp_path):
    proc = _macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "quality",
                    "--quality-ctx", "64", "--quality-tokens", "64", "--log", str(tmp_path / "o.json"))
    assert proc.returncode == 0, proc.stderr
    assert "Quality (against the reference)" in proc.stdout


# -- files read back are checked; texts are bounded (issue: nothing lost, second round) -----------
def _interrupted_after_the_reference_stored(fake_dir, tmp_path):
    """A run stopped (SIGTERM) while fake-b scores, fake-a the reference having stored its
    log-probabilities: the journal and the store a --resume finds."""
    journal = tmp_path / "r.journal.jsonl"
    fault = json.dumps({"model": "fake-b", "kind": "hang", "phase": "quality", "after_requests": 0})
    args = ["run", "--config", str(fake_dir / "models.toml"), "--phases", "quality", "--quality-ctx", "64",
            "--quality-tokens", "256", "--reference", "fake-a", "--log", str(tmp_path / "r.json")]
    proc = subprocess.Popen([sys.executable, "-m", "macprof", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "MACPROF_TEST_FAULT": fault})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (journal.exists() and '"model":"fake-b"' in journal.read_text()
                                               and '"event":"quality_chunk"' in journal.read_text().split('"quality_stored"')[-1]):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    store = next(tmp_path.glob("r.journal.jsonl.quality-fake-a.npy"))
    return journal, store, args[:-2]  # a resume repeats the run's options, less --log


@pytest.mark.parametrize("tamper", ["rows", "fifo"])
def test_a_reference_store_changed_on_disk_is_scored_again_with_the_reason(fake_dir, tmp_path, tamper):
    journal, store, args = _interrupted_after_the_reference_stored(fake_dir, tmp_path)
    if tamper == "rows":  # the same shape, other rows: once a KLD of 6,957 and exit 0
        data = bytearray(store.read_bytes())
        data[-4096:] = os.urandom(4096)
        store.write_bytes(bytes(data))
    else:  # a FIFO in its place: once a worker blocked until its 600 s load timeout
        store.unlink()
        os.mkfifo(store)
    t0 = time.monotonic()
    proc = _macprof(*args, "--resume", str(journal))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 60
    by = {m.identity.name: m.phases.quality for m in runlog.load(tmp_path / "r.json").models}
    why = by["fake-a"].rescore_reason
    assert why and ("changed on disk" in why if tamper == "rows" else "not a regular file (a FIFO)" in why), why
    assert by["fake-b"].kld.mean == pytest.approx(0, abs=1e-4) and by["fake-b"].same_top == 1.0  # held to true rows
    assert "rescore_reason" not in runlog.load(tmp_path / "r.json").models[1].phases.quality.to_json()


def test_a_text_that_is_no_regular_file_is_refused_at_once(fake_dir, tmp_path):
    fifo = tmp_path / "notes.txt"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(qualitytext.MAX_TEXT_BYTES + 1)
    common = ["run", "--config", str(fake_dir / "models.toml"), "--phases", "quality", "--quality-ctx", "64",
              "--quality-tokens", "128"]
    for path, says in ((fifo, "not a regular file (a FIFO)"), ("/dev/zero", "not a regular file (a character device)"),
                       (big, "more than the 16777216 it may have")):
        t0 = time.monotonic()
        proc = _macprof(*common, "--text", str(path), "--log", str(tmp_path / "t.json"))
        assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert time.monotonic() - t0 < 30


def test_only_the_start_of_a_long_text_is_tokenized():
    text = " ".join(f"w{i}" for i in range(200_000))  # 1.3 MB
    part = qualitytext.head(text, 256)
    assert len(part) <= qualitytext.CHARS_PER_TOKEN * 256 + 4096 and text.startswith(part) and text[len(part)] == " "
    assert qualitytext.head("short text", 256) == "short text"
