"""Speculative decoding reported (issue #25): the per-token acceptance and the roofline's round
(one formula, measure/speculative.py, for the run's prediction and `macprof estimate --draft`),
the builder over a phase run on the fake engine with an injected clock, the summary table,
`show`'s round breakdown, compare's columns and fields, the plot's panel, the draft's load and
memory; and the whole path on the demo pair (slow)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from macprof.measure.roofline import Roofline
from macprof.model.records import ABSENT
from macprof.measure.speculative import acceptance_per_token, predicted_round, tokens_per_round
from tests.conftest import cli


# -- pure: the acceptance and the round ------------------------------------------------------------
def test_acceptance_per_token_counts_only_the_drafts_the_target_judged():
    assert acceptance_per_token([(4, 4), (4, 4), (2, 2)]) == 1.0  # all accepted: α = 1
    assert acceptance_per_token([(4, 0), (4, 0)]) == 0.0  # each round's first draft rejected: α = 0
    # (4, 1): one accepted, the second rejected, the last two never judged -> 1 of 2
    assert acceptance_per_token([(4, 1)]) == 0.5
    assert acceptance_per_token([(4, 1), (4, 4), (1, 0)]) == 5 / (2 + 4 + 1)
    assert acceptance_per_token([(0, 0)]) is None and acceptance_per_token([]) is None
    # accepted / drafted of the same rounds falls with k; the per-token α does not
    rounds_k8 = [(8, 2)] * 10
    assert sum(a for _, a in rounds_k8) / sum(d for d, _ in rounds_k8) == 0.25
    assert acceptance_per_token(rounds_k8) == pytest.approx(2 / 3)


def test_predicted_round_at_alpha_one_and_zero_and_with_no_draft():
    target = Roofline(weight_bytes=1e9, bandwidth=100e9, kv_per_token=1e5)
    draft = Roofline(weight_bytes=1e8, bandwidth=100e9, kv_per_token=1e4)
    for k in (1, 2, 4, 8):
        one = predicted_round(target, draft, k, 1.0, 64)
        assert one["tokens_per_round"] == k + 1  # exactly: self-draft
        assert one["verify_s"] == target.read_s(64)  # a verify of k + 1 tokens reads the weights once
        assert one["draft_s"] == k * draft.step_s(64) and one["round_s"] == one["draft_s"] + one["verify_s"]
        assert one["speedup"] == pytest.approx((k + 1) * target.step_s(64) / one["round_s"])
        zero = predicted_round(target, draft, k, 0.0, 64)
        assert zero["tokens_per_round"] == 1.0 and zero["speedup"] < 1  # a round costs more than a plain step
        ngram = predicted_round(target, None, k, 1.0, 64)
        assert ngram["draft_s"] == 0.0 and ngram["speedup"] == pytest.approx(k + 1)
    assert "speedup" not in predicted_round(target, draft, 2, None, 64)  # no acceptance, no speed-up
    # the compute side: k + 1 tokens of compute where that is the larger
    slow = Roofline(weight_bytes=1e6, bandwidth=100e9, active_params=1e9, flops=1e12)
    assert predicted_round(slow, None, 3, 0.5, 0)["verify_s"] == slow.compute_s(4)
    assert predicted_round(target, draft, 3, 0.7, 0)["tokens_per_round"] == tokens_per_round(0.7, 3)


def test_a_lookup_draft_s_rounds_are_figured_as_they_drafted():
    """Prompt lookup drafts fewer than k where its context has no match, none where it has nothing:
    tokens per round over the rounds free to draft k (a request's last, capped to end at its length,
    left out) is what the run emitted, drafts per round their mean, and the prediction is made
    over the rounds as they drafted, not as if each drafted k (issue #38: 3.56 tokens per round
    shown where the run emitted 2.20, x1.77 predicted for a measured x1.00)."""
    from macprof.analyse.ceilings import speculative_prediction
    from macprof.analyse.speculative import _case, free_rounds, per_round
    from macprof.measure.speculative import predicted_rounds
    from macprof.model.log import Bandwidth, MeasuredBandwidth
    from macprof.model.phases import Request
    from macprof.model.speculative import Round, SpeculativeRequest

    def rnd(d: int, a: int) -> Round:
        return Round(drafted=d, accepted=a, t_draft_start=0, t_verify_start=1, t_verify_end=2, t_rewind_end=3,
                     drafts=tuple(range(d)), tokens=tuple(range(a + 1)))

    # k = 4, 16 tokens: the prefill's, then rounds of 5, 1 (no match), 2, 3 tokens; the last two
    # rounds had 4 and then 1 token left to emit: capped to 3 and 0 drafts
    rounds = (rnd(4, 4), rnd(0, 0), rnd(2, 1), rnd(4, 2), rnd(3, 2), rnd(0, 0))
    req = Request(index=0, kind="measured", status="ok", t0=0, tokens=tuple(range(16)), decode_tok_s=10.0)
    assert [(x.drafted, x.accepted) for x in free_rounds(SpeculativeRequest(request=req, rounds=rounds), 4)] == \
        [(4, 4), (0, 0), (2, 1), (4, 2)]
    shape = {"weight_bytes_per_token": 1e8, "kv_bytes_per_token": 1e4, "params": 5e7}
    bw = Bandwidth(measured=MeasuredBandwidth(gbs=50.0))
    case = _case(4, "k4", [req], {("k4", 0): rounds}, {}, {}, [10.0], shape, None, 64.0, bw, True)
    assert case.tokens_per_round == (5 + 1 + 2 + 3) / 4 and case.drafts_per_round == (4 + 0 + 2 + 4) / 4
    assert per_round(case) == (case.tokens_per_round, case.drafts_per_round)
    every_k = speculative_prediction(shape, None, 4, case.acceptance_per_token, 64.0, bw, True)
    as_drafted = speculative_prediction(shape, None, 4, case.acceptance_per_token, 64.0, bw, True, [4, 0, 2, 4])
    assert case.predicted_tokens_per_round == pytest.approx(as_drafted["tokens_per_round"])
    assert case.predicted_speedup == pytest.approx(as_drafted["speedup"]) and as_drafted["speedup"] < every_k["speedup"]
    a = case.acceptance_per_token
    assert as_drafted["tokens_per_round"] == pytest.approx(sum(tokens_per_round(a, d) for d in (4, 0, 2, 4)) / 4)
    # all rounds drafting k: the k-every-round prediction itself
    target = Roofline(weight_bytes=1e9, bandwidth=100e9, kv_per_token=1e5)
    same, one = predicted_rounds(target, None, [3, 3, 3], 0.6, 64), predicted_round(target, None, 3, 0.6, 64)
    assert all(same[key] == pytest.approx(one[key]) for key in ("tokens_per_round", "round_s", "speedup"))
    # an older log (no drafts_per_round: its tokens per round was over the rounds that drafted k) is
    # read by the same rule, from its rounds
    old = case.replace(tokens_per_round=5.0, drafts_per_round=ABSENT)
    assert per_round(old) == (case.tokens_per_round, case.drafts_per_round)


# -- the phase on the fake engine, an injected clock --------------------------------------------------
def _fake_models(tmp_path: Path):
    from macprof.engines.fake import write_model

    return write_model(tmp_path / "t.gguf", hidden=64), write_model(tmp_path / "d.gguf", hidden=32)


def _phase(tmp_path: Path, draft_path: Path, ks=(1, 3), step_ns: int = 1000):
    """The speculative protocol on the fake engine with a clock that moves ``step_ns`` a read,
    and its record as the builder makes it."""
    from macprof import config
    from macprof.analyse.speculative import build_speculative_phase
    from macprof.collect import modelinfo
    from macprof.engines.base import EngineSettings
    from macprof.engines.fake import FakeEngine
    from macprof.model.events import parse_event
    from macprof.model.log import Bandwidth, MeasuredBandwidth
    from macprof.model.speculative import DraftSpec
    from macprof.run.phases.common import PhaseContext
    from macprof.run.phases.speculative import run_speculative
    from macprof.run.prompts import PromptBuilder

    target_path, _ = _fake_models(tmp_path)
    engine = FakeEngine()
    engine.load_model(target_path, EngineSettings(n_ctx=512))
    engine.load_tokenizer()
    s = config.Settings(phases=("speculative",), prompt_tokens=24, gen_tokens=12, reps=2, draft_tokens=tuple(ks))
    now = [0]

    def clock() -> int:
        now[0] += step_ns
        return now[0]

    events: list = []
    spec = DraftSpec(kind="model", ref=str(draft_path), engine="fake", path=str(draft_path), target="t",
                     shape=modelinfo.inspect(draft_path, "f16").to_dict())
    run_speculative(PhaseContext(engine, PromptBuilder(engine), s, lambda e: events.append(
        parse_event({**e.to_json(), "model": "t"})), clock=clock, n_ctx=512, prepared=spec))
    head = types.SimpleNamespace(settings=s, shape=modelinfo.inspect(target_path, "f16").to_dict())
    ctx = types.SimpleNamespace(events=events, head=head, failures=[],
                                bw=Bandwidth(measured=MeasuredBandwidth(gbs=50.0)))
    return build_speculative_phase(ctx, "speculative"), events


def test_self_draft_gives_alpha_one_and_k_plus_one_tokens_per_round_predicted_exactly(tmp_path):
    target_path, _ = _fake_models(tmp_path)
    ph, _ = _phase(tmp_path, target_path, ks=(1, 2, 4))
    assert [c.k for c in ph.cases] == [1, 2, 4]
    for c in ph.cases:
        assert c.acceptance == 1.0 and c.acceptance_per_token == 1.0
        assert c.tokens_per_round == c.k + 1 and c.predicted_tokens_per_round == c.k + 1
        assert c.predicted_speedup is not None and c.prediction_reason is None
        assert c.checks.n == 2 and c.checks.identical == 2
        # the stamps split each round: one clock step drafting, one verifying, the rest rewinding
        # (and stamping the round's tokens, yielded at verify end); a round is the three together
        assert c.draft_s_per_round == c.verify_s_per_round == 1e-6
        assert c.rewind_s_per_round >= 1e-6
        assert c.round_s_per_round == pytest.approx(2e-6 + c.rewind_s_per_round)


class _Rejected:
    """A drafter whose every token the target rejects (one byte token it never picks)."""

    def prepare(self, ids):
        pass

    def propose(self, context, k):
        return [3] * k

    def rewind(self, keep):
        pass

    def reset(self):
        pass


def test_a_draft_that_is_always_rejected_has_alpha_zero_and_one_token_per_round(tmp_path, monkeypatch):
    from macprof.model.speculative import DraftLoaded
    from macprof.run.phases import speculative

    def load(ctx):
        ctx.emit(DraftLoaded(phase="speculative", draft="rejected", engine="fake", shape=ctx.prepared.shape))
        return _Rejected(), None

    monkeypatch.setattr(speculative, "load_draft", load)
    _, draft_path = _fake_models(tmp_path)
    ph, _ = _phase(tmp_path, draft_path, ks=(2, 4))
    for c in ph.cases:
        assert c.acceptance == c.acceptance_per_token == 0.0
        assert c.tokens_per_round == 1.0 and c.predicted_tokens_per_round == 1.0
        assert c.predicted_speedup is not None and c.predicted_speedup < 1  # a round costs more than a plain step
        assert c.checks.identical == c.checks.n == 2  # rejected drafts never change the output


def test_the_drafts_load_and_memory_are_in_the_record(tmp_path):
    target_path, draft_path = _fake_models(tmp_path)
    ph, events = _phase(tmp_path, draft_path, ks=(1,))
    dm = ph.draft_memory
    assert ph.draft_load_s is not None and ph.draft_load_s >= 0
    assert dm.file_bytes == draft_path.stat().st_size
    assert dm.rss_before_load_bytes and dm.rss_after_load_bytes
    assert dm.load_rss_bytes == dm.rss_after_load_bytes - dm.rss_before_load_bytes
    assert dm.weights_held == "mapped" and dm.mapped_resident_bytes is not None  # as the fake holds its file
    # the K/V the draft held at the end: the last request's context, as its shape computes it
    assert dm.kv_cache_bytes and dm.kv_computed_bytes and dm.kv_cache_bytes <= dm.kv_computed_bytes
    assert any(e.KIND == "draft_end" for e in events)


def test_a_mapped_drafts_resident_bytes_join_the_footprint_headline():
    from macprof.analyse.speculative import _with_draft_weights
    from macprof.model.phases import PhaseMemory
    from macprof.model.speculative import DraftMemory

    foot = PhaseMemory(peak_rss_bytes=100, peak_footprint_bytes=50, weights_held="copied")
    mapped = DraftMemory(weights_held="mapped", mapped_resident_bytes=30)
    joined = _with_draft_weights(foot, mapped)
    assert joined.weights_held == "mapped" and joined.mapped_resident_bytes == 30
    both = _with_draft_weights(foot.replace(weights_held="mapped", mapped_resident_bytes=20), mapped)
    assert both.mapped_resident_bytes == 50
    unknown = _with_draft_weights(foot, DraftMemory(weights_held="mapped", mapped_resident_bytes=None))
    assert unknown.weights_held == "mapped" and unknown.mapped_resident_bytes is None  # unknown, never 0
    rss = PhaseMemory(peak_rss_bytes=100)  # no footprint (Linux): RSS has the mapped pages already
    assert _with_draft_weights(rss, mapped) is rss


# -- the reports, through the registry --------------------------------------------------------------
@pytest.fixture(scope="module")
def self_draft_log(tmp_path_factory):
    """A fake-engine run of cold, warm and speculative with the target its own draft."""
    from macprof.engines.fake import write_model
    from tests.test_run import macprof

    folder = tmp_path_factory.mktemp("spec")
    write_model(folder / "t.gguf", hidden=64)
    (folder / "models.toml").write_text('[[models]]\nname = "t"\nengine = "fake"\npath = "t.gguf"\n')
    log = folder / "run.json"
    proc = macprof("run", "--config", str(folder / "models.toml"), "--phases", "cold,warm,speculative",
                   "--cold-trials", "1", "--prompt-tokens", "24", "--gen-tokens", "12", "--reps", "2",
                   "--draft-tokens", "1,3", "--draft", str(folder / "t.gguf"), "--log", str(log), "--force-overwrite")
    return log, proc


def test_the_summary_has_a_row_per_k_and_the_drafts_lines(self_draft_log):
    log, proc = self_draft_log
    data = json.loads(log.read_text())
    cases = data["models"][0]["phases"]["speculative"]["cases"]
    out = proc.stdout
    assert "Speculative decoding" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("t ") and "t.gguf" in line]
    assert [r[2] for r in rows] == ["1", "3"]  # target, draft, k
    for row, case in zip(rows, cases):
        assert row[3] == row[4] == "1.000"  # α and α/token
        assert row[5] == f"{case['k']:.2f}"  # drafts/round: a self-draft drafts k in every round free to
        assert row[6] == f"{case['k'] + 1:.2f}" and row[7] == f"({case['k'] + 1:.2f})"  # measured (predicted)
        assert f"x{case['speedup']['value']:.2f}" in " ".join(row) and "2/2 identical" in " ".join(row)
        assert f"x{case['predicted_speedup']:.2f}" in row
    assert "draft (fake) loaded in" in out and "cold start with the draft: ready" in out


def test_show_gives_the_round_breakdown_per_k(self_draft_log):
    log, _ = self_draft_log
    r = cli("show", log)
    assert r.exit_code == 0, r.output
    spec = json.loads(log.read_text())["models"][0]["phases"]["speculative"]
    for case in spec["cases"]:
        k = case["k"]
        assert f"speculative k={k}: {case['rounds']} rounds, drafted {case['drafted']}, accepted {case['accepted']}" in r.output
        assert f"{k + 1:.2f} tokens/round (predicted {k + 1:.2f})" in r.output
    assert r.output.count("     per round: draft ") == 2 and "speculative memory: phase peak RSS" in r.output
    md = cli("show", log, "--format", "markdown").output  # the summary row per (target, draft, k), as markdown
    rows = [line for line in md[md.index("**Speculative decoding (draft k tokens, verify in one pass)**"):].splitlines()
            if line.startswith("| t ")]
    assert len(rows) == len(spec["cases"]) and all("2/2 identical" in row for row in rows)


def test_compare_columns_and_fields_name_the_best_k(self_draft_log):
    log, _ = self_draft_log
    spec = json.loads(log.read_text())["models"][0]["phases"]["speculative"]
    best = max(spec["cases"], key=lambda c: c["speedup"]["value"])
    text = cli("compare", log)
    assert text.exit_code == 0, text.output
    assert "speculative best" in text.output and f"at k={best['k']}" in text.output
    row = json.loads(cli("compare", log, "--format", "json").output)["rows"][0]
    assert row["speculative_best_k"] == best["k"] and row["speculative_speedup"] == best["speedup"]["value"]
    assert row["speculative_speedup_low"] == best["speedup"]["low"]
    assert row["speculative_acceptance"] == 1.0 and row["speculative_tokens_per_round"] == best["k"] + 1
    assert row["speculative_identical"] == row["speculative_checked"] == 2
    header = cli("compare", log, "--format", "csv").output.splitlines()[0].split(",")
    assert {"speculative_best_k", "speculative_speedup", "speculative_predicted_speedup"} <= set(header)


def test_compare_of_logs_without_the_phase_keeps_its_columns_out():
    from tests.test_compare import A

    r = cli("compare", A)
    assert r.exit_code == 0 and "speculative" not in r.output


def test_the_plot_draws_speed_up_against_k_beside_the_prediction(self_draft_log, tmp_path):
    from macprof.render.plot import _models
    from macprof.render.speculative import speculative_series
    from macprof.store import runlog

    log, _ = self_draft_log
    loaded = runlog.load(log)
    spec = json.loads(log.read_text())["models"][0]["phases"]["speculative"]
    (series,) = speculative_series(list(_models([("run", loaded)])))
    assert series["k"] == [1, 3] and series["draft"].endswith("t.gguf")
    assert series["speedup"] == [c["speedup"]["value"] for c in spec["cases"]]
    assert series["low"] == [c["speedup"]["low"] for c in spec["cases"]]
    assert series["predicted"] == [c["predicted_speedup"] for c in spec["cases"]]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from macprof.render.speculative import _speculative

    fig, ax = plt.subplots()
    _speculative(ax, [series])  # the series drawn are the ones read above
    (bars,) = ax.containers  # the measured points with their intervals
    assert "measured" in bars.get_label() and list(bars.lines[0].get_ydata()) == series["speedup"]
    (segments,) = bars.lines[2]
    # matplotlib draws each end as value -/+ its distance from it: equal to the interval up to rounding
    ends = [tuple(seg[:, 1]) for seg in segments.get_segments()]
    assert ends == [pytest.approx(pair, rel=1e-12) for pair in zip(series["low"], series["high"])]
    predicted = next(line for line in ax.get_lines() if "roofline" in line.get_label())
    assert list(predicted.get_xdata()) == series["k"] and list(predicted.get_ydata()) == series["predicted"]
    plt.close(fig)
    out = tmp_path / "chart.png"
    r = cli("plot", log, "-o", out)
    assert r.exit_code == 0, r.output and out.stat().st_size > 10_000


def test_the_speculative_panel_spans_its_figure_and_its_legend_covers_nothing(self_draft_log):
    """A lone panel filled half its figure (a grid of two, the other blank) and the speculative
    legend sat inside the axes, over the points and the break-even line: the panel now spans the
    figure, its legend is below the axes, and the x ticks are the k's measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from macprof.render.plot import _models, layout
    from macprof.render.speculative import _speculative, speculative_series
    from macprof.store import runlog

    assert layout(1, 0) == (1, 1, 10) and layout(2, 8) == (1, 2, 1.6 * 8 + 4) and layout(5, 3) == (2, 3, 17)
    series = speculative_series(list(_models([("run", runlog.load(self_draft_log[0]))])))
    fig, ax = plt.subplots(figsize=(10, 5.5))
    _speculative(ax, series)
    fig.tight_layout()
    fig.canvas.draw()
    box, legend = ax.get_window_extent(), ax.get_legend().get_window_extent()
    assert legend.y1 < box.y0  # entirely below the axes: over no point, line or tick of the panel
    assert legend.y1 <= ax.xaxis.label.get_window_extent().y0  # and below the tick labels and the axis label
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3"] and list(ax.get_xticks()) == [1, 3]
    plt.close(fig)


# -- estimate --draft ---------------------------------------------------------------------------------
def test_estimate_with_a_draft_uses_the_runs_formula(tmp_path):
    from macprof.analyse.ceilings import speculative_prediction
    from macprof.analyse.estimate import ModelFile, estimate
    from macprof.collect import modelinfo
    from macprof.model.log import Bandwidth, MeasuredBandwidth

    target, draft = _fake_models(tmp_path)
    target_file, draft_file = (ModelFile(p, modelinfo.inspect(p, "f16")) for p in (target, draft))
    e = estimate(model=target_file, bandwidth_gbs=50.0, context=30, draft=draft_file, acceptance=0.7, draft_tokens=[1, 2, 4])
    rows = e["speculative"]["rounds"]
    assert [r["k"] for r in rows] == [1, 2, 4]
    shapes = [modelinfo.inspect(p, "f16").to_dict() for p in (target, draft)]
    bw = Bandwidth(measured=MeasuredBandwidth(gbs=50.0))
    for r in rows:  # the same numbers as a run's prediction from the same shapes and bandwidth
        run = speculative_prediction(shapes[0], shapes[1], r["k"], 0.7, 30, bw)
        for key in ("round_s", "draft_s", "verify_s", "tokens_per_round", "speedup"):
            assert r[key] == pytest.approx(run[key]), key
        assert r["tokens_per_round"] == pytest.approx(tokens_per_round(0.7, r["k"]))
    assert e["speculative"]["rounds"][0]["plain_tok_s"] == pytest.approx(e["ceiling_tok_s"])
    ngram = estimate(model=target_file, bandwidth_gbs=50.0, draft="ngram", acceptance=1.0)
    assert [r["k"] for r in ngram["speculative"]["rounds"]] == [1, 2, 4, 8]  # run's --draft-tokens default
    assert all(r["draft_s"] == 0 and r["speedup"] == pytest.approx(r["k"] + 1) for r in ngram["speculative"]["rounds"])


def test_estimate_draft_command_and_its_bad_input(tmp_path):
    target, draft = _fake_models(tmp_path)
    r = cli("estimate", target, "--bandwidth", "50", "--draft", draft, "--acceptance", "0.7", "--draft-tokens", "1,2")
    assert r.exit_code == 0, r.output
    assert "decode ceiling" in r.output and "speculative, draft" in r.output and "per-token acceptance 0.7" in r.output
    after = r.output[r.output.index("speculative, draft"):].splitlines()
    table = [line.split() for line in after if line[:2] in ("1 ", "2 ")]
    assert [t[0] for t in table] == ["1", "2"] and all(t[-1].startswith("x") for t in table)
    data = json.loads(cli("estimate", target, "--bandwidth", "50", "--draft", "ngram", "--acceptance", "0", "--json").output)
    assert all(row["tokens_per_round"] == 1.0 for row in data["speculative"]["rounds"])
    for args, says in ((["--draft", draft, "--acceptance", "1.5"], "--acceptance must be a number from 0 to 1"),
                       (["--draft", draft, "--acceptance", "nan"], "--acceptance must be a number from 0 to 1"),
                       (["--draft", draft, "--acceptance", "-0.1"], "--acceptance must be a number from 0 to 1"),
                       (["--draft", tmp_path / "none.gguf", "--acceptance", "0.5"], "estimate --draft:"),
                       (["--acceptance", "0.5"], "go together"), (["--draft", draft], "go together"),
                       (["--draft", draft, "--acceptance", "0.5", "--draft-tokens", "0"], "--draft-tokens must be")):
        bad = cli("estimate", target, "--bandwidth", "50", *args)
        assert bad.exit_code == 2 and says in bad.output, (args, bad.output)
        assert len(bad.output.strip().splitlines()) == 1 and "Traceback" not in bad.output


# -- the demo pair, end to end (real llama.cpp) ---------------------------------------------------------
@pytest.fixture
def small_build(request, cache_root) -> Path:
    """The small demo models (the F16 target, the Q4_K_M draft: one tokenizer), built once."""
    from macprof.demo.build import build

    if request.node.get_closest_marker("slow") is None:
        pytest.fail("the demo models run the real engines: mark the test @pytest.mark.slow")
    return build("small", cache_root / "demo")


@pytest.mark.slow
def test_demo_pair_end_to_end(tmp_path, small_build):
    from tests.test_run import macprof

    log = tmp_path / "run.json"
    target = small_build / "gguf" / "demo-small-f16.gguf"
    draft = small_build / "gguf" / "demo-small-q4_k_m.gguf"
    proc = macprof("run", str(target), "--phases", "speculative", "--draft", str(draft), "--draft-tokens", "1,2",
                   "--prompt-tokens", "32", "--gen-tokens", "16", "--reps", "2", "--log", str(log), "--force-overwrite")
    spec = json.loads(log.read_text())["models"][0]["phases"]["speculative"]
    assert spec["draft_status"] == "ok" and [c["k"] for c in spec["cases"]] == [1, 2]
    for c in spec["cases"]:
        assert 0 <= c["acceptance"] <= 1 and c["checks"]["failed"] == 0 and c["checks"]["n"] == 2
        assert c["predicted_speedup"] is not None and c["predicted_tokens_per_round"] is not None
        assert 1 <= c["tokens_per_round"] <= c["k"] + 1
    assert spec["draft_memory"]["file_bytes"] == draft.stat().st_size and spec["draft_memory"]["kv_cache_bytes"]
    assert spec["memory"]["peak_rss_bytes"] >= spec["draft_memory"]["rss_after_load_bytes"]
    rows = [line for line in proc.stdout.splitlines() if "demo-small-q4_k_m.gguf" in line and "identical" in line]
    assert len(rows) == 2
    shown = cli("show", log)
    assert shown.exit_code == 0 and "speculative k=2:" in shown.output and "per round: draft" in shown.output
    compared = cli("compare", log)
    assert compared.exit_code == 0 and "speculative best" in compared.output


def test_a_refused_draft_is_one_line_in_the_summary_and_in_compare(tmp_path):
    from macprof.engines.fake import write_model
    from tests.test_run import macprof

    write_model(tmp_path / "t.gguf", hidden=64)
    write_model(tmp_path / "other.gguf", vocab_size=3000)  # another tokenizer
    (tmp_path / "models.toml").write_text('[[models]]\nname = "t"\nengine = "fake"\npath = "t.gguf"\n')
    log = tmp_path / "run.json"
    proc = macprof("run", "--config", str(tmp_path / "models.toml"), "--phases", "warm,speculative", "--prompt-tokens",
                   "24", "--gen-tokens", "10", "--reps", "2", "--draft", str(tmp_path / "other.gguf"), "--log", str(log),
                   "--force-overwrite")
    refused = [line for line in proc.stdout.splitlines() if "draft refused:" in line]
    assert len(refused) == 1 and "another tokenizer" in refused[0] and "other.gguf" in refused[0]
    row = json.loads(cli("compare", log, "--format", "json").output)["rows"][0]
    assert row["speculative_status"] == "refused" and row["speculative_speedup"] is None
    assert "refused" in cli("compare", log).output
