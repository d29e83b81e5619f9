"""Speculative decoding (issue #25): the engines' "verify" capability (one forward pass of
appended tokens, the greedy choice after each), the loop (draft, verify, rewind) and the
n-gram draft, on the fake engine and on the demo models."""

from __future__ import annotations

from pathlib import Path

import pytest

from macprof.engines.base import CAPABILITIES, EngineSettings, lacks


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
    assert engine.verify(plain[:n]) == plain[1:n + 1]
    assert engine.cached_tokens() == len(prompt) + n
    # rewound past the last four, and verified again from there: the same choices
    engine.truncate(len(prompt) + n - 4)
    assert engine.cached_tokens() == len(prompt) + n - 4
    assert engine.verify(plain[n - 4:n]) == plain[n - 3:n + 1]
    # a wrong token's choices differ after it, and the cache rewinds to before it
    engine.truncate(len(prompt) + 2)
    wrong = (plain[2] + 7) % engine.vocab_size
    engine.verify([wrong])
    engine.truncate(len(prompt) + 2)
    assert engine.verify([plain[2]]) == [plain[3]]
    # generate after a verify reuses what the cache holds (the history is the cache's tokens)
    again = list(engine.generate(prompt + plain[:3], 3))
    assert again == plain[3:6] and engine.reused_tokens == len(prompt) + 2


def test_verify_is_declared():
    assert "verify" in CAPABILITIES


def test_fake_verify_equals_generate(tmp_path):
    engine = _fake(tmp_path)
    assert lacks(engine, "verify") is None
    _verify_matches_generate(engine, engine.tokenize("a prompt of a few words"), 12)


@pytest.mark.slow
@pytest.mark.parametrize("engine_name, rel", [("llama.cpp", "gguf/demo-tiny-f16.gguf"), ("mlx", "mlx/demo-tiny-f16")])
def test_real_verify_equals_generate(tiny_dir, engine_name, rel):
    engine = _real(engine_name, tiny_dir / rel)
    try:
        assert lacks(engine, "verify") is None
        _verify_matches_generate(engine, engine.tokenize("the quick brown fox jumps over the lazy dog"), 8)
    finally:
        engine.close()
