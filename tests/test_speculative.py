"""Speculative decoding (issue #25): the engines' "verify" capability (one forward pass of
appended tokens, the greedy choice after each), the loop (draft, verify, rewind) and the
n-gram draft, on the fake engine and on the demo models."""

from __future__ import annotations

from pathlib import Path

import pytest

from macprof.engines.base import EngineSettings
from macprof.engines.capabilities import CAPABILITIES, lacks


def _fake(tmp_path: Path, name: str = "m", **shape):
    from macprof.engines.fake import FakeEngine, write_model

    engine = FakeEngine()
    engine.load_model(write_model(tmp_path / f"{name}.gguf", **shape), EngineSettings(n_ctx=512))
    return engine


def _real(engine_name: str, path: Path):
    from macprof import engines

    engine = engines.create(engine_name)
    engine.load_model(path, EngineSettings(n_ctx=256))
    engine.load_tokenizer()
    engine.reset()
    return engine


def _verify_matches_generate(engine, prompt: list[int], n: int = 8) -> None:
    engine.reset()
    plain = list(engine.generate(prompt, n + 1))
    engine.reset()
    first = list(engine.generate(prompt, 1))
    assert first == plain[:1] and engine.cached_tokens() == len(prompt)
    # all of the plain tokens but the last appended at once: the choice after each is the next one
    assert list(engine.verify(plain[:n])) == plain[1:n + 1]
    assert engine.cached_tokens() == len(prompt) + n
    # rewound past the last four, and verified again from there: the same choices
    engine.truncate(len(prompt) + n - 4)
    assert engine.cached_tokens() == len(prompt) + n - 4
    # the last emitted token and the drafts apart, as the loop passes them: the same pass
    assert list(engine.verify(plain[n - 4:n - 3], plain[n - 3:n])) == plain[n - 3:n + 1]
    # a wrong token's choices differ after it, and the cache rewinds to before it
    engine.truncate(len(prompt) + 2)
    wrong = (plain[2] + 7) % engine.vocab_size
    verdict = engine.verify([wrong])
    assert engine.cached_tokens() == len(prompt) + 2  # drafts of no engine's own: the pass runs when read
    assert len(verdict) == 1 and engine.cached_tokens() == len(prompt) + 3
    engine.truncate(len(prompt) + 2)
    assert list(engine.verify([plain[2]])) == [plain[3]]
    # generate after a verify reuses what the cache holds (the history is the cache's tokens)
    again = list(engine.generate(prompt + plain[:3], 3))
    assert again == plain[3:6] and engine.reused_tokens == len(prompt) + 2


def _propose_matches_generate(engine, prompt: list[int], n: int = 6) -> None:
    """propose (the draft step, read back together) gives generate's tokens and leaves the
    cache as generate does: from empty, as a catch-up of a few tokens, after a rewind."""
    engine.reset()
    plain = list(engine.generate(prompt, n + 4))
    engine.reset()
    assert list(engine.propose(prompt, n)) == plain[:n]
    assert engine.cached_tokens() == len(prompt) + n - 1 and engine.reused_tokens == 0  # the last one not fed
    # the speculative loop's next round: the last proposal and one more fed in the first step
    assert list(engine.propose(prompt + plain[:n + 1], 3)) == plain[n + 1:n + 4]
    assert engine.reused_tokens == len(prompt) + n - 1
    engine.truncate(len(prompt) + 2)
    assert list(engine.propose(prompt + plain[:3], 2)) == plain[3:5] and engine.reused_tokens == len(prompt) + 2
    assert list(engine.propose(prompt + plain[:5], 0)) == []


def test_verify_is_declared():
    assert "verify" in CAPABILITIES


def test_fake_verify_equals_generate(tmp_path):
    engine = _fake(tmp_path)
    assert lacks(engine, "verify") is None
    _verify_matches_generate(engine, engine.tokenize("a prompt of a few words"), 12)
    _propose_matches_generate(engine, engine.tokenize("a prompt of a few words"))


@pytest.mark.slow
@pytest.mark.parametrize("engine_name, rel", [("llama.cpp", "gguf/demo-tiny-f16.gguf"), ("mlx", "mlx/demo-tiny-f16")])
def test_real_verify_equals_generate(tiny_dir, engine_name, rel):
    engine = _real(engine_name, tiny_dir / rel)
    try:
        assert lacks(engine, "verify") is None
        _verify_matches_generate(engine, engine.tokenize("the quick brown fox jumps over the lazy dog"), 8)
        _propose_matches_generate(engine, engine.tokenize("the quick brown fox jumps over the lazy dog"))
    finally:
        engine.close()


# -- pure helpers ---------------------------------------------------------------------------------
def test_ngram_draft_continues_the_most_recent_longest_match():
    from macprof.measure.speculative import ngram_draft

    ctx = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7, 3, 4, 5, 6]
    # suffix [5, 6] last seen at 7..8 (followed by 7, 3, 4), before that at 0..1
    assert ngram_draft(ctx, 2, 3) == [7, 3, 4]
    assert ngram_draft(ctx, 2, 10) == [7, 3, 4, 5, 6]  # up to the end of the context
    assert ngram_draft([1, 2, 3, 9, 2, 3], 3, 2) == [9, 2]  # [9,2,3] and [2,3]... the longest that recurs: [2, 3]
    assert ngram_draft([1, 2, 3, 4], 3, 4) == []  # nothing recurs
    assert ngram_draft([1, 2, 1], 2, 0) == []
    assert ngram_draft([4, 4, 4, 4], 2, 3) == [4]  # [4, 4] last seen at 1..2, one token after it


def test_accepted_prefix_budget_and_expected_tokens_per_round():
    from macprof.measure.speculative import accepted_prefix, draft_budget, tokens_per_round

    assert accepted_prefix([1, 2, 3], [1, 2, 9, 4]) == 2
    assert accepted_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert accepted_prefix([], [7]) == 0
    assert accepted_prefix([5], [1, 2]) == 0
    assert draft_budget(4, 10) == 4 and draft_budget(4, 3) == 2 and draft_budget(4, 1) == 0
    assert tokens_per_round(1.0, 4) == 5.0
    assert tokens_per_round(0.0, 4) == 1.0
    assert tokens_per_round(0.5, 1) == pytest.approx(1.5)
    assert tokens_per_round(0.8, 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)


# -- the loop, on the fake engine -------------------------------------------------------------------
class _WrongDraft:
    """Proposes tokens the target never picks (its own choice + 1): every draft rejected."""

    def __init__(self, target) -> None:
        self.target = target

    def prepare(self, ids):
        pass

    def propose(self, context, k):
        return [3] * k  # one byte token throughout: rejected wherever the target picks another

    def rewind(self, keep):
        pass

    def reset(self):
        pass


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_self_draft_accepts_everything_and_ends_exactly(tmp_path, k):
    from macprof.run.phases.speculative import ModelDraft, speculative_tokens

    target, draft = _fake(tmp_path, "t"), _fake(tmp_path, "d")
    prompt = target.tokenize("a prompt of a few words")
    n = 21
    target.reset()
    plain = list(target.generate(prompt, n))
    target.reset()
    rounds: list = []
    out = list(speculative_tokens(target, ModelDraft(draft), prompt, n, k, rounds))
    assert out == plain and len(out) == n
    assert all(r.accepted == r.drafted for r in rounds)
    full = [r for r in rounds if r.drafted == k]
    assert full and all(len(r.tokens) == k + 1 for r in full)
    assert sum(len(r.tokens) for r in rounds) == n - 1  # the first token is the prefill's
    assert all(r.t_draft_start <= r.t_verify_start <= r.t_verify_end <= r.t_rewind_end for r in rounds)
    assert target.cached_tokens() == len(prompt) + n - 1  # as after plain decoding: the last token not fed


def test_rejected_drafts_still_give_the_plain_output(tmp_path):
    from macprof.run.phases.speculative import speculative_tokens

    target = _fake(tmp_path, "t")
    prompt = target.tokenize("another prompt here")
    plain = list(target.generate(prompt, 17))
    target.reset()
    rounds: list = []
    out = list(speculative_tokens(target, _WrongDraft(target), prompt, 17, 4, rounds))
    assert out == plain
    rejected = [r for r in rounds if r.accepted < r.drafted]
    assert rejected and all(len(r.tokens) == r.accepted + 1 for r in rounds)


def test_ngram_loop_on_a_prompt_that_repeats_itself(tmp_path):
    from macprof.run.phases.speculative import NgramDraft, speculative_tokens

    # a small vocabulary, every id of it in the prompt (twice): whatever the target picks has
    # occurred before, so every round drafts; the fake's choices depend on the whole context, so
    # the drafts are mostly rejected, and the output is the plain one all the same
    target = _fake(tmp_path, "t", vocab_size=300)
    prompt = [0, *range(2, 300), *range(2, 100)]
    plain = list(target.generate(prompt, 12))
    target.reset()
    rounds: list = []
    out = list(speculative_tokens(target, NgramDraft(3), prompt, 12, 4, rounds))
    assert out == plain
    assert all(r.drafted > 0 for r in rounds[:-1])


def test_tokenizer_mismatch_is_one_line_naming_both(tmp_path):
    from macprof.run.phases.speculative import tokenizer_mismatch

    a, b, c = _fake(tmp_path, "a"), _fake(tmp_path, "b", hidden=64), _fake(tmp_path, "c", vocab_size=3000)
    assert tokenizer_mismatch(a, b, "A", "B") is None
    why = tokenizer_mismatch(a, c, "A", "C")
    assert why and "C" in why and "A" in why and "\n" not in why and "3000" in why and "4096" in why


# -- the phase, end to end on the fake engine ------------------------------------------------------
SPEC_ARGS = ["--phases", "warm,speculative", "--prompt-tokens", "24", "--gen-tokens", "12", "--reps", "2",
             "--draft-tokens", "1,3"]


@pytest.fixture
def fakes(tmp_path):
    from macprof.engines.fake import write_model

    write_model(tmp_path / "t.gguf", hidden=64)
    write_model(tmp_path / "d.gguf", hidden=32)  # same vocabulary: the fake's tokens are the target's
    write_model(tmp_path / "other.gguf", vocab_size=3000)
    (tmp_path / "models.toml").write_text('[[models]]\nname = "t"\nengine = "fake"\npath = "t.gguf"\n')
    return tmp_path


def _spec_run(folder, *args, env=None):
    import json

    from tests.test_run import macprof

    log = folder / "run.json"
    proc = macprof("run", "--config", str(folder / "models.toml"), *SPEC_ARGS, *args, "--log", str(log),
                   "--force-overwrite", env=env)
    return json.loads(log.read_text()), proc


def test_phase_with_a_same_tokenizer_draft(fakes):
    log, proc = _spec_run(fakes, "--draft", str(fakes / "d.gguf"))
    model = log["models"][0]
    spec = model["phases"]["speculative"]
    assert spec["draft_status"] == "ok" and spec["draft_engine"] == "fake"
    assert [c["k"] for c in spec["cases"]] == [1, 3]
    assert len([r for r in spec["plain"] if r["kind"] == "measured"]) == 2
    for case in spec["cases"]:
        assert case["acceptance"] == 1.0 and case["tokens_per_round"] == case["k"] + 1
        assert case["checks"] == {"n": 2, "identical": 2, "near_ties": 0, "failed": 0}
        for r in case["requests"]:
            assert r["request"]["n_tokens"] == 12 and r["rounds"]
        assert case["speedup"]["value"] is not None and case["speedup"]["low"] is not None
    # the same prompts as the warm phase: the plain requests' tokens are the warm ones
    warm = [r["tokens"] for r in model["phases"]["warm"]["requests"]]
    assert [r["tokens"] for r in spec["plain"]] == warm


def test_a_draft_with_another_tokenizer_is_refused_and_the_rest_kept(fakes):
    log, proc = _spec_run(fakes, "--draft", str(fakes / "other.gguf"))
    model = log["models"][0]
    spec = model["phases"]["speculative"]
    assert spec["draft_status"] == "refused" and "another tokenizer" in spec["draft_reason"]
    assert "other.gguf" in spec["draft_reason"] and "t" in spec["draft_reason"]
    assert spec["cases"] == [] and len(model["phases"]["warm"]["requests"]) == 3


def test_no_draft_is_a_refusal_of_the_phase(fakes):
    log, proc = _spec_run(fakes)
    fails = [f for f in log["models"][0]["failures"] + log["models"][0]["phases"]["speculative"]["failures"]
             if f.get("phase") == "speculative"]
    assert fails and "no draft given" in fails[0]["reason"]
    assert len(log["models"][0]["phases"]["warm"]["requests"]) == 3


def test_ngram_phase(fakes):
    log, proc = _spec_run(fakes, "--draft", "ngram", "--ngram", "2")
    spec = log["models"][0]["phases"]["speculative"]
    assert spec["draft"] == "ngram" and spec["draft_status"] == "ok"
    assert all(c["checks"]["failed"] == 0 for c in spec["cases"])


def test_a_draft_killed_mid_run_is_a_recorded_failure(fakes):
    import json

    fault = {"kind": "oom", "phase": "speculative", "after_requests": 4 + 3}  # the warm phase's 3, then 3 more
    log, proc = _spec_run(fakes, "--draft", str(fakes / "d.gguf"), env={"MACPROF_TEST_FAULT": json.dumps(fault)})
    model = log["models"][0]
    fails = [f for f in model["phases"]["speculative"]["failures"] if f.get("status") == "crashed"]
    assert fails and fails[0]["signal"] == "SIGKILL"
    assert len(model["phases"]["warm"]["requests"]) == 3 and model["phases"]["warm"]["summary"]["decode_tok_s"]["n"] == 2


# -- the engine's own speculative decoding (--speculative-impl), on the fake engine -------------------
def test_flag_and_proposal_rounds():
    from macprof.measure.speculative import flag_rounds, proposal_rounds

    # mlx-lm's shape: every round ends with one target token (False), the first token included
    assert flag_rounds([True, True, False, False, True, False, True]) == [2, 0, 1, 1]
    assert flag_rounds([]) == []
    # llama-cpp-python's: proposals (index of the token they draft for, tokens) against the output
    emitted = [5, 6, 7, 8, 9, 10]
    assert proposal_rounds([(1, [6, 7, 1]), (3, []), (4, [9, 10, 11]), (9, [1])], emitted) == ([3, 0, 3], [2, 0, 2])


@pytest.mark.parametrize("draft_kind", ["model", "ngram"])
def test_fake_native_path_gives_the_plain_output_and_tells_its_rounds(tmp_path, draft_kind):
    from macprof.measure.speculative import flag_rounds

    target = _fake(tmp_path, "t", vocab_size=300)
    draft = _fake(tmp_path, "d", vocab_size=300) if draft_kind == "model" else None
    prompt = [0, *range(2, 300), *range(2, 100)]
    assert lacks(target, "native_draft") is None and target.native_refusal(draft) is None
    plain = list(target.generate(prompt, 13))
    target.open_native(draft, 3)
    out = list(target.native_generate(prompt, 13, 4))
    told = target.native_report()
    assert out == plain and len(told.from_draft) == 13
    if draft_kind == "model":  # the same model drafting: all accepted, k per round, told only by flags
        assert told.drafted is None and told.unknown
        assert flag_rounds(told.from_draft) == [4, 4, 3]  # 5 + 5 + 3 tokens, the last round ended at 13
    else:
        assert told.drafted is not None and sum(told.accepted) == sum(told.from_draft)


NATIVE_ARGS = ["--speculative-impl", "both"]


def test_phase_with_both_implementations(fakes):
    log, proc = _spec_run(fakes, "--draft", str(fakes / "d.gguf"), *NATIVE_ARGS)
    spec = log["models"][0]["phases"]["speculative"]
    assert log["models"][0]["settings"]["speculative_impl"] == "both"
    assert [c["k"] for c in spec["cases"]] == [1, 3] and [c["k"] for c in spec["native"]] == [1, 3]
    assert spec["native_reason"] is None
    for case in spec["native"]:
        assert case["impl"].startswith("fake draft-model loop") and "not what it drafted" in case["unknown"]
        assert case["acceptance"] is None and case["drafted"] == 0  # untold
        assert case["tokens_per_round"] == case["k"] + 1 and case["rounds"] > 0
        assert case["checks"] == {"n": 2, "identical": 2, "near_ties": 0, "failed": 0}
        assert case["speedup"]["value"] is not None and case["speedup"]["low"] is not None
        for r in case["requests"]:
            assert r["request"]["n_tokens"] == 12 and len(r["from_draft"]) == 12 and r["drafted_per_round"] is None
            assert sum(r["accepted_per_round"]) == sum(r["from_draft"])
    # macprof's loop measured alongside, unchanged
    assert all(c["acceptance"] == 1.0 for c in spec["cases"])
    # both in the end-of-run table, a row per k each, and in show
    rows = [line for line in proc.stdout.splitlines() if "d.gguf" in line and "identical" in line]
    assert len(rows) == 4 and sum("engine's own" in line for line in rows) == 2


def test_native_only_with_ngram_tells_acceptance(fakes):
    log, proc = _spec_run(fakes, "--draft", "ngram", "--speculative-impl", "native")
    spec = log["models"][0]["phases"]["speculative"]
    assert spec["cases"] == [] and [c["k"] for c in spec["native"]] == [1, 3]
    for case in spec["native"]:
        assert case["drafted"] >= case["accepted"] >= 0 and case["checks"]["failed"] == 0
        assert all(len(r["drafted_per_round"]) == len(r["accepted_per_round"]) for r in case["requests"])


def test_a_native_path_the_engine_refuses_is_recorded_and_the_loop_kept(fakes, tmp_path):
    """The fake's own path drafts with a fake model only: an MLX-format draft would be refused;
    here the refusal comes through the engine's native_refusal for a draft of another kind, and
    without one (capability absent) through lacks: both land in native_reason."""
    from macprof.engines.fake import FakeEngine
    from macprof.run.phases.speculative import open_native

    emitted: list = []

    class Ctx:
        engine = FakeEngine()
        settings = type("S", (), {"ngram": 2})()
        emit = emitted.append

    class Other:
        name = "llama.cpp"

    assert open_native(Ctx(), Other()) is None
    assert "fake model, not a llama.cpp one" in emitted[0].reason
    Ctx.engine.capabilities = {**Ctx.engine.capabilities, "native_draft": "not here"}
    assert open_native(Ctx(), None) is None and emitted[1].reason == "not here"


@pytest.mark.parametrize("draft", ["model", "ngram"])
def test_overhead_of_the_speculative_loop_against_the_engines_own(tmp_path, draft):
    """`macprof overhead --path speculative` on the fake engine: alternated pairs, every output the
    plain one, a ratio per pair and its interval; no timing is asserted."""
    from macprof.bench.speculative import measure, notes
    from macprof.engines.fake import write_model

    target = write_model(tmp_path / "t.gguf", hidden=64)
    d = write_model(tmp_path / "d.gguf", hidden=32) if draft == "model" else None
    r = measure("fake", target, "ngram" if d is None else "d", None if d is None else "fake", d, 3, 12, 32, 3, None)
    assert r["pairs"] == 3 and len(r["ratios"]) == 3 and r["ratio_ci95"][0] is not None
    assert r["macprof"]["identical"] == r["native"]["identical"] == 3
    if draft == "model":
        assert r["macprof"]["acceptance"] == 1.0 and r["native"]["acceptance"] is None  # the fake tells flags only
    assert any("k=3" in line for line in notes([r]))


def test_overhead_draft_outside_the_speculative_path_is_one_line(fake_dir):
    from tests.conftest import cli

    result = cli("overhead", "--config", fake_dir / "models.toml", "--models", "fake-a", "--draft", "ngram",
                 "--path", "loop")
    assert result.exit_code != 0 and "--draft applies to --path speculative" in result.output
    assert "Traceback" not in result.output
