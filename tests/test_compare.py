"""show / compare / share / plot on run logs recorded by real runs of the demo models
(tests/fixtures/runlogs: make.sh re-records the tiny ones; other-machine-demo-small.json is a real
run of the small ones on another machine, as `macprof share` wrote it), and the significance test
on samples with a known answer."""

import json
import shutil

import pytest
from click.testing import CliRunner

from macprof.model.definitions import SCHEMA_VERSION
from macprof.store import runlog
from macprof.cli import main
from macprof.measure.significance import mann_whitney, verdict
from macprof.measure.stats import median
from macprof.store.share import redact
from tests.conftest import FIXTURES, cli as run, recomputed

LOGS = FIXTURES / "runlogs"
A, B = LOGS / "tiny-a.json", LOGS / "tiny-b.json"
OTHER = LOGS / "other-machine-demo-small.json"  # the small demo models, run and shared on another machine


# -- significance on constructed samples -----------------------------------------------------
def test_clearly_different():
    a, b = [10.0, 10.2, 9.9, 10.1, 10.05], [12.0, 12.3, 11.8, 12.1, 11.9]
    r = mann_whitney(a, b)
    assert r["method"] == "exact" and r["p"] == pytest.approx(2 / 252)
    assert verdict(a, b, higher_is_better=True)["call"] == "faster"
    assert verdict(a, b, higher_is_better=False)["call"] == "slower"


def test_identical_samples():
    a = [5.0, 5.0, 5.0, 5.0]
    assert verdict(a, list(a), higher_is_better=True)["call"] == "no significant difference"


def test_overlapping_samples():
    a, b = [10.0, 11.0, 12.0, 13.0, 14.0], [10.5, 11.5, 12.5, 13.5, 14.5]
    assert verdict(a, b, higher_is_better=True)["call"] == "no significant difference"


def test_large_samples_use_the_normal_approximation():
    import random

    rng = random.Random(1)
    a = [rng.gauss(100, 5) for _ in range(40)]
    b = [rng.gauss(110, 5) for _ in range(40)]
    r = mann_whitney(a, b)
    assert r["method"] == "normal approximation" and r["p"] < 1e-6


# -- show and compare --------------------------------------------------------------------------
def test_show_renders_every_section():
    out = run("show", A).output
    for text in ("cold trial 1", "warm: TTFT", "prefix TTFT speed-up", "ceiling at", "KV cache", "peak RSS",
                 "demo-tiny-q8_0", "demo-tiny-mlx-8bit"):
        assert text in out, text


def test_compare_two_runs():
    r = run("compare", A, B, "--format", "json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.output)
    rows = result["rows"]
    assert rows[0]["baseline"] and len(rows) == 8
    names = {row["model"] for row in rows}
    assert {"demo-tiny-q8_0", "demo-tiny-q4_k_m", "demo-tiny-mlx-f16", "demo-tiny-mlx-8bit"} <= names
    for row in rows[1:]:
        assert row["decode_call"] in ("faster", "slower", "no significant difference")
        assert 0 <= row["decode_p"] <= 1 and row["decode_vs_base"] == row["decode_tok_s"] / rows[0]["decode_tok_s"]
        assert row["not_comparable"] == []  # same machine, lengths, versions


def test_compare_formats_and_baseline():
    md = run("compare", A, B, "--format", "markdown", "--baseline", "demo-tiny-mlx-f16").output
    assert md.startswith("| model |") and "Baseline: demo-tiny-mlx-f16@tiny-a" in md
    csv = run("compare", A, B, "--format", "csv").output
    assert csv.splitlines()[0].startswith("model,run,engine")
    assert run("compare", A, "--baseline", "nope").exit_code == 2


def test_comparability_flags_against_a_log_from_another_machine():
    this, other = runlog.load(A), runlog.load(OTHER)
    assert other.complete and [m.identity.name for m in other.models] == [
        f"demo-small-{v}" for v in ("f16", "q8_0", "q4_k_m", "mlx-f16", "mlx-8bit", "mlx-4bit")]
    # Both logs went through `macprof share`: the host id is gone, and what is left of the two
    # machines (OS, CPU model, cores, memory, no Apple chip) reads the same. compare then tells
    # machines apart by CPU model and chip only, so it cannot flag "machine" here.
    assert this.machine.host_id is None and other.machine.host_id is None
    assert other.machine == this.machine
    assert other.software == this.software  # same engine versions: not flagged either
    result = json.loads(run("compare", A, OTHER, "--format", "json").output)
    mine = [row for row in result["rows"] if row["run"] == A.stem]
    theirs = [row for row in result["rows"] if row["run"] == OTHER.stem]
    assert len(mine) == 4 and len(theirs) == 6
    assert all(row["not_comparable"] == [] for row in mine)  # 32 prompt / 8 generated tokens, as the baseline
    # the other run used the default lengths (512 / 128) and shorter MLX requests on Linux
    # (64 / 16, 8 / 4): every one of its rows differs in lengths from the baseline, and only in that
    lengths = {m.identity.name: (m.settings.prompt_tokens, m.settings.gen_tokens) for m in other.models}
    assert all(lengths[row["model"]] != (32, 8) for row in theirs)
    assert all(row["not_comparable"] == ["prompt/gen lengths"] for row in theirs)
    # no model of the other run is a model of this one: nothing for --fail-if to judge
    assert all(row["same_model_baseline"] is None for row in theirs)


def test_changed_conditions_are_flagged(tmp_path):
    """The flag mechanics on an edited copy (the real log above cannot show a machine or power
    source difference): another host id, on battery, one more generated token."""
    other = json.loads(A.read_text())
    other["machine"]["host_id"] = "00000000"
    other["machine"]["power_source"] = "battery"
    for m in other["models"]:
        m["settings"]["gen_tokens"] += 1
    (tmp_path / "edited.json").write_text(json.dumps(recomputed(other)))
    result = json.loads(run("compare", A, tmp_path / "edited.json", "--format", "json").output)
    flagged = [row for row in result["rows"] if row["run"] == "edited"]
    assert all(set(row["not_comparable"]) == {"machine", "power source", "prompt/gen lengths"} for row in flagged)


def test_fail_if_regression(tmp_path):
    slow = json.loads(A.read_text())
    for m in slow["models"]:  # the same requests, tokens 4x as far apart: no sample overlaps the original
        for r in m["phases"]["warm"]["requests"]:
            t1 = r["token_times"][0]
            r["token_times"] = [t1 + 4 * (t - t1) for t in r["token_times"]]
    (tmp_path / "slow.json").write_text(json.dumps(recomputed(slow)))
    r = run("compare", A, tmp_path / "slow.json", "--fail-if", "decode:-5%")
    assert r.exit_code == 1
    for name in ("demo-tiny-q8_0", "demo-tiny-q4_k_m", "demo-tiny-mlx-f16", "demo-tiny-mlx-8bit"):
        assert f"REGRESSION: {name}@slow: decode tok/s -75.0% vs {name}@tiny-a" in r.output
    assert run("compare", A, B, "--fail-if", "decode:-99%").exit_code == 0
    assert run("compare", A, "--fail-if", "speed:5").exit_code == 2


def _trimmed(src, tmp_path, reps=3):
    """A copy of a real log keeping only the first ``reps`` measured warm requests, with the
    warm medians recomputed from them: what a run with --reps 3 records (the fixtures have 5)."""
    log = json.loads(src.read_text())
    for m in log["models"]:
        warm = m["phases"]["warm"]
        measured = [r for r in warm["requests"] if r["kind"] == "measured"][:reps]
        warm["requests"] = [r for r in warm["requests"] if r["kind"] != "measured"] + measured
    out = tmp_path / f"{src.stem}-{reps}.json"
    out.write_text(json.dumps(recomputed(log)))
    return out


def test_five_reps_calls_a_real_difference_with_its_interval():
    rows = json.loads(run("compare", A, B, "--format", "json").output)["rows"]
    base = rows[0]
    assert base["decode_ci_low"] is None and base["decode_call"] is None
    mlx = [r for r in rows if r["model"] == "demo-tiny-mlx-f16"]  # 30x slower than the llama.cpp baseline
    for row in rows[1:]:
        for key in ("decode", "ttft"):
            assert row[f"{key}_ci_low"] <= row[f"{key}_ci_high"] and row[f"{key}_sizes"] == [5, 5]
            assert row[f"{key}_call"] != "cannot tell" and row[f"{key}_why"] is None
    for row in mlx:
        assert row["decode_call"] == "slower" and row["decode_ci_high"] < 1
        assert row["ttft_call"] == "slower" and row["ttft_ci_low"] > 1


def test_interval_in_every_format():
    again = json.loads(run("compare", A, B, "--format", "json").output)
    assert json.loads(run("compare", A, B, "--format", "json").output) == again  # seeded: the same each time
    low, high = again["rows"][1]["decode_ci_low"], again["rows"][1]["decode_ci_high"]
    cell = f"x{low:.2f}..x{high:.2f}"
    csv = run("compare", A, B, "--format", "csv").output
    head = csv.splitlines()[0].split(",")
    second = csv.splitlines()[2].split(",")
    assert float(second[head.index("decode_ci_low")]) == low and float(second[head.index("decode_ci_high")]) == high
    for fmt in ("table", "markdown"):
        out = run("compare", A, B, "--format", fmt).output
        assert "decode 95% CI" in out and cell in out and "percentile bootstrap" in out


def test_three_reps_cannot_tell(tmp_path):
    a3, b3 = _trimmed(A, tmp_path), _trimmed(B, tmp_path)
    rows = json.loads(run("compare", a3, b3, "--format", "json").output)["rows"]
    for row in rows[1:]:
        for key in ("decode", "ttft"):
            assert row[f"{key}_call"] == "cannot tell" and row[f"{key}_sizes"] == [3, 3]
            assert row[f"{key}_min_reps_per_side"] == 4
            assert row[f"{key}_ci_low"] is not None  # the interval is still given
    table = run("compare", a3, b3).output
    assert "no significant difference" not in table
    assert table.count("cannot tell: 3 vs 3 requests, p >= 0.1; needs >= 4 per side") == 2 * (len(rows) - 1)


def test_fail_if_cannot_judge_exits_2_naming_the_reps(tmp_path):
    a3, b3 = _trimmed(A, tmp_path), _trimmed(B, tmp_path)
    r = CliRunner().invoke(main, ["compare", str(a3), str(b3), "--fail-if", "decode:-5%"])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("macprof: error: --fail-if cannot judge decode tok/s of ")
    for name in ("demo-tiny-q8_0", "demo-tiny-q4_k_m", "demo-tiny-mlx-f16", "demo-tiny-mlx-8bit"):
        assert f"{name}@tiny-b-3 (3 vs 3 requests)" in r.stderr
    assert "record at least 4 per side (--reps 4)" in r.stderr
    # memory is one figure per run, not a sample: nothing to test, so nothing undecidable
    assert run("compare", a3, b3, "--fail-if", "memory:+10%").exit_code == 0
    # at 4 reps the test can reach alpha: judged, no regression past -99%
    assert run("compare", _trimmed(A, tmp_path, 4), _trimmed(B, tmp_path, 4), "--fail-if", "decode:-99%").exit_code == 0


# -- loading: validation, migration, refusal -------------------------------------------------
def test_older_schema_is_migrated():
    log = runlog.load(LOGS / "schema1.json")
    assert log.schema_version == SCHEMA_VERSION and log.migrated_from == 1
    assert "tiny-q4" in run("show", LOGS / "schema1.json").output
    roof = log.models[0].phases.warm.roofline
    assert "schema_version 1" in roof.reason  # not recorded then: null with the reason, never a number


@pytest.mark.parametrize("name,message", [
    ("truncated.json", "not valid JSON (truncated or corrupt)"),
    ("newer.json", "is newer than this macprof understands"),
    ("malformed.json", "does not match the run-log schema"),
])
def test_bad_logs_are_refused_in_one_line(name, message):
    r = run("show", LOGS / name)
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1


def test_incomplete_log_shows(tmp_path):
    out = run("show", LOGS / "incomplete.journal.jsonl").output
    assert "INCOMPLETE" in out


def test_hostile_strings_never_reach_the_terminal(tmp_path):
    log = json.loads(A.read_text())
    log["models"][0]["identity"]["name"] = "evil\x1b]0;pwned\x07\x1b[2J"
    (tmp_path / "evil.json").write_text(json.dumps(log))
    for cmd in (["show"], ["compare"]):
        out = run(*cmd, tmp_path / "evil.json").output
        assert "\x1b" not in out and "\x07" not in out


# -- share -----------------------------------------------------------------------------------
def test_share_removes_user_host_and_home(tmp_path):
    log = json.loads(A.read_text())
    log["models"][0]["identity"]["path"] = "/Users/alice/models/x.gguf"
    log["models"][0]["failures"] = [{"status": "error", "reason": "boom at /home/alice/.cache/x on alice-mbp.local"},
                                    {"status": "refused", "reason": "/Users/alice/models/x.gguf: case d4096 needs 4161 tokens"}]
    log["models"][1]["identity"]["path"] = "/srv/team-models/y.gguf"  # outside any home directory
    log["models"][1]["failures"] = [{"status": "refused", "reason": "/srv/team-models/y.gguf: too big"}]
    ids = [("/Users/alice", "<home>"), ("alice-mbp.local", "<host>"), ("alice", "<user>")]
    shared, removed = redact(log, ids)
    text = json.dumps(shared)
    assert "alice" not in text and "/Users/" not in text and "/home/" not in text and "team-models" not in text
    assert shared["machine"]["host_id"] is None and removed
    runlog.validate(shared)
    # files stay identified by name, size and sha256
    assert shared["models"][0]["identity"]["files"] == log["models"][0]["identity"]["files"]


def test_share_cli_writes_only_the_chosen_output(tmp_path):
    src = tmp_path / "a.json"
    shutil.copy(LOGS / "schema1.json", src)  # as recorded: model paths and the host id in it
    r = run("share", src, "-o", tmp_path / "out" / "shared.json")
    assert r.exit_code == 0 and "removed: host id" in r.output and "removed: model path of tiny-q4" in r.output
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.json", "shared.json"]
    assert runlog.load(tmp_path / "out" / "shared.json").redacted.by == "macprof share"


# -- plot ------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".png", ".svg", ".html"])
def test_plot(tmp_path, suffix):
    out = tmp_path / f"chart{suffix}"
    r = run("plot", A, B, "-o", out)
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 10_000
    if suffix == ".png":
        from PIL import Image

        assert Image.open(out).size == (round((1.6 * 8 + 4) * 120), round(5.5 * 120))  # 8 model rows, 120 dpi


def test_the_plot_caption_gives_each_phase_its_own_parameters():
    """A conversation (tasks, speculative) run's caption gave the warm phase's "prompt / gen, reps":
    each measured phase says its own."""
    from macprof.render.plot import _describe

    log = runlog.load(A)
    m = log.models[0]

    def described(**settings) -> str:
        return _describe(log.replace(models=(m.replace(settings=m.settings.replace(**settings)),)))

    mixed = described(phases=("warm", "speculative", "conversation", "tasks"), turns=6, apps=2, turn_tokens=64,
                      system_tokens=128, tool_tokens=0, attempts=2, draft="ngram", draft_tokens=(1, 4))
    assert "warm prompt 32 / gen 8 tokens, reps 5" in mixed
    assert "speculative draft ngram, k [1, 4], prompt 32 / gen 8 tokens, reps 5" in mixed
    assert "conversation 2 app(s) x 6 turns, system 128 / user 64 tokens, replies to EOS or 8 tokens" in mixed
    assert "tasks the shipped set, 2 attempt(s)" in mixed
    alone = described(phases=("conversation",), turns=6, apps=1, turn_tokens=64, system_tokens=128, tool_tokens=16)
    assert "reps" not in alone and "prompt 32" not in alone and "user 64 / tool 16 tokens" in alone


def _copies(tmp_path, n):
    """n distinct runs of the recorded six-model log (each its own start), decode scaled per copy."""
    base = json.loads(OTHER.read_text())
    paths = []
    for i in range(n):
        log = json.loads(json.dumps(base))
        log["started_utc"] = f"2026-01-01T{i:02d}:00:00+00:00"
        for model in log["models"]:
            for req in model["phases"]["warm"]["requests"]:
                if req.get("decode_tok_s"):
                    req["decode_tok_s"] *= 1 + i / 100
        paths.append(tmp_path / f"run-{i:02d}.json")
        paths[-1].write_text(json.dumps(log))
    return paths


def test_many_logs_give_a_bar_per_model_at_the_median_with_each_log_a_dot(tmp_path):
    from macprof.analyse.compare import rows_from
    from macprof.render.plot import MANY_LOGS, _across_logs

    paths = _copies(tmp_path, MANY_LOGS + 1)
    rows = [row for p in paths for row in rows_from(runlog.load(p), p.stem)]
    bars, ceilings = _across_logs(rows, [(1.0, 2.0 + i) for i in range(len(rows))])
    models = [m["identity"]["name"] for m in json.loads(OTHER.read_text())["models"]]
    assert [b["model"] for b in bars] == models and all(b["source"] == f"{len(paths)} logs" for b in bars)
    for k, bar in enumerate(bars):
        own = [r for r in rows if r["model"] == bar["model"]]
        assert bar["decode_tok_s"] == median([r["decode_tok_s"] for r in own])
        assert sorted(bar["spread"]["decode_tok_s"]) == sorted(r["decode_tok_s"] for r in own)
        assert ceilings[k][1] == median([2.0 + i for i, r in enumerate(rows) if r["model"] == bar["model"]])
    out = tmp_path / "many.png"
    r = run("plot", *paths, "-o", out)
    assert r.exit_code == 0, r.output
    from PIL import Image

    assert Image.open(out).size == (round((1.6 * len(models) + 4) * 120), round(5.5 * 120))  # a bar per model
    few = run("plot", *paths[:MANY_LOGS], "-o", tmp_path / "few.png")  # up to MANY_LOGS: a bar per model per log
    assert few.exit_code == 0 and Image.open(tmp_path / "few.png").size[0] == round((1.6 * len(models) * MANY_LOGS + 4) * 120)


def test_compare_intervals_computed_together_are_each_rows_own():
    # compare draws every interval in one batch (median_ratio_intervals): each row still gets the
    # interval of its own samples against the baseline's, and against its twin in the baseline's run
    from macprof.analyse.compare import compare, rows_from
    from macprof.measure.significance import median_ratio_interval

    rows = [row for path in (A, B, OTHER) for row in rows_from(runlog.load(path), path.stem)]
    result = compare(rows, baseline=f"{rows[1]['model']}@{rows[1]['source']}")
    base = rows[1]
    by_name = {f"{r['model']}@{r['source']}": r for r in rows}
    judged = 0
    for r, row in zip(rows, result["rows"]):
        if r is base:
            assert row["intervals"] == {}
            continue
        assert list(row["intervals"]) == ["decode", "ttft"]
        for key in ("decode", "ttft"):
            assert row["intervals"][key] == median_ratio_interval(base["samples"][key], r["samples"][key])
            if row["same_model"]:
                twin = by_name[row["same_model_baseline"]]
                assert row["same_model"]["intervals"][key] == median_ratio_interval(twin["samples"][key], r["samples"][key])
                judged += 1
    assert judged and any(row["intervals"]["decode"]["low"] is not None for row in result["rows"] if not row["baseline"])
