"""The engine protocol, on the fake engine (fast tier) and on the real engines with the tiny demo
models, every quantization of each (slow)."""

import pytest

from macprof import engines
from macprof.engines.base import EngineSettings
from macprof.engines.capabilities import lacks
from macprof.run.prompts import PromptBuilder
from tests.conftest import ALL_VARIANTS

GEN = 12
EOS = 1


VARIANTS = [pytest.param(("fake", "fake", "fake-b.gguf"), id="fake")] + [
    pytest.param(v, id=v[1], marks=pytest.mark.slow) for v in ALL_VARIANTS]


@pytest.fixture(scope="module", params=VARIANTS)
def loaded(request):
    engine_name, _, rel = request.param
    root = request.getfixturevalue("fake_dir" if engine_name == "fake" else "tiny_build")
    engine = engines.create(engine_name)
    engine.load_model(root / rel, EngineSettings(n_ctx=512))
    engine.load_tokenizer()
    yield engine
    engine.close()


def test_round_trip(loaded):
    text = "Brast quoul thendio, mai zeck. Tri 4521 shoubra!\nNew line."
    ids = loaded.tokenize(text)
    assert len(ids) > 5
    assert loaded.detokenize(ids) == text


def test_prompt_builder_exact_counts(loaded):
    b = PromptBuilder(loaded, seed=3)
    for n in (1, 17, 64):
        p = b.prompt(f"t{n}", n)
        assert len(p.ids) == n and tuple(loaded.tokenize(p.text)) == p.ids
    prefix = b.prompt("pre", 40)
    full = b.prefixed(prefix, "suf", 56)
    assert full.ids[:40] == prefix.ids and len(full.ids) == 56


def test_exact_token_count_through_eos(loaded):
    """The demo head (and the fake engine) make EOS likely: generation must go on past it, exactly GEN tokens."""
    b = PromptBuilder(loaded, seed=11)
    saw_eos_midway = False
    for i in range(16):  # stops at the first path that hits EOS (usually the first or second)
        ids = list(b.prompt(f"eos{i}", 24).ids)
        loaded.reset()
        out = list(loaded.generate(ids, GEN))
        assert len(out) == GEN
        if EOS in out[:-1]:
            saw_eos_midway = True
            break
    assert saw_eos_midway, "no greedy path hit EOS: the test did not exercise EOS"


def test_greedy_is_deterministic(loaded):
    ids = list(PromptBuilder(loaded, seed=5).prompt("det", 32).ids)
    loaded.reset()
    a = list(loaded.generate(ids, GEN))
    loaded.reset()
    b = list(loaded.generate(ids, GEN))
    assert a == b


def test_reset_recomputes_whole_prompt(loaded):
    ids = list(PromptBuilder(loaded, seed=6).prompt("reset", 32).ids)
    loaded.reset()
    list(loaded.generate(ids, 4))
    loaded.reset()
    assert loaded.cached_tokens() == 0
    out = list(loaded.generate(ids, 4))
    assert loaded.reused_tokens == 0
    assert loaded.cached_tokens() == len(ids) + len(out) - 1  # the last token is never fed back


def _stable_prompt(engine, builder, prefix, n_total, n_gen):
    """A prompt whose uncached greedy path has no near-tie (top-2 margin >= 0.25 everywhere)."""
    for i in range(8):
        p = builder.prefixed(prefix, f"stable{i}", n_total)
        engine.reset()
        out = list(engine.generate(list(p.ids), n_gen))
        if all(engine.top2(list(p.ids) + out[:k]).margin >= 0.25 for k in range(len(out))):
            return p, out
    raise AssertionError("no prompt without near-ties in 8 tries")


def test_prefix_reuse(loaded):
    b = PromptBuilder(loaded, seed=7)
    prefix = b.prompt("shared", 16)
    prompt, reference = _stable_prompt(loaded, b, prefix, 24, 4)
    loaded.reset()
    list(loaded.generate(list(prefix.ids), 1))  # the prefix, and nothing else, is cached
    assert loaded.cached_tokens() == 16
    out = list(loaded.generate(list(prompt.ids), 4))
    assert loaded.reused_tokens == 16
    assert out == reference


def test_truncate_restores_a_filled_cache(loaded):
    """A depth case: the cache holds d tokens, a request adds to it, truncate(d) puts it back
    and the next request reuses exactly those d tokens, with the same output."""
    b = PromptBuilder(loaded, seed=8)
    context = b.prompt("ctx", 40)
    request = b.prefixed(context, "req", 41)
    loaded.reset()
    list(loaded.generate(list(context.ids), 1))
    assert loaded.cached_tokens() == 40
    first = list(loaded.generate(list(request.ids), 6))
    assert loaded.reused_tokens == 40 and loaded.cached_tokens() == 40 + 1 + 6 - 1
    loaded.truncate(40)
    assert loaded.cached_tokens() == 40
    again = list(loaded.generate(list(request.ids), 6))
    assert loaded.reused_tokens == 40 and again == first


def test_batch_equals_one_at_a_time(loaded):
    """B sequences decoded together give, for every sequence, exactly GEN tokens, the same as
    the prompt run alone (greedy); a divergence is allowed only at a floating-point near-tie."""
    from macprof.run.phases.common import compare_outputs

    b = PromptBuilder(loaded, seed=9)
    n = 6  # MLX's quantized matmul is slow on Linux CPUs: keep this short
    prompts = [b.prompt(f"batch{j}", 8 + 3 * j) for j in range(3)]  # unequal lengths too
    loaded.open_batch(3, 32)
    try:
        loaded.reset()
        steps = list(loaded.generate_batch([list(p.ids) for p in prompts], n))
    finally:
        loaded.close_batch()
    assert len(steps) == n and all(len(step) == 3 for step in steps)
    for j, prompt in enumerate(prompts):
        loaded.reset()
        alone = list(loaded.generate(list(prompt.ids), n))
        together = [step[j] for step in steps]
        check = compare_outputs(loaded, prompt, alone, together)
        assert check.passed, (j, alone, together, check)


def test_versions_record_how_the_model_was_loaded(loaded):
    """What two logs need to be compared: llama.cpp's devices, offload, flash attention, load
    mode and thread source; MLX's wired limit (none on a machine without Metal, with why)."""
    v = loaded.versions()
    if loaded.name == "llama.cpp":
        load = v["load"]
        assert load["n_layer"] > 0 and load["devices"] and load["load_mode"] and load["flash_attn"]
        assert load["offloaded_layers"] == 0 and not load["gpu_offload"]  # this CPU-only build
        assert v["threads"] > 0 and v["threads_source"]
    elif loaded.name == "mlx":
        assert "wired_limit_bytes" in v and (v["wired_limit_bytes"] or v["wired_reason"])
        assert lacks(loaded, "batch") is None


def test_settings_recorded_as_resolved(loaded):
    """Every setting as the engine resolved it, beside what was asked: llama.cpp's flash attention
    settled (never "auto"), its context's own n_ctx / n_batch / threads; MLX's device and K/V type."""
    resolved = loaded.resolved_settings()
    assert all(r.value is not None or r.unknown for r in resolved.values()), resolved
    if loaded.name == "llama.cpp":
        assert resolved["flash_attn"].asked == "auto" and resolved["flash_attn"].value in ("enabled", "disabled")
        assert resolved["n_ctx"].value >= 512 and resolved["n_ctx"].value % 256 == 0  # padded to 256 cells
        assert resolved["n_batch"].asked == 2048 and resolved["n_batch"].value == 512  # at most the context asked
        assert resolved["n_threads"].value == resolved["n_threads"].asked == loaded.threads
        assert resolved["type_k"].value == resolved["type_v"].value == "f16"
        assert resolved["n_gpu_layers"].value == 0  # this CPU-only build
    elif loaded.name == "mlx":
        assert resolved["device"].value in ("cpu", "gpu") and resolved["flash_attn"].value == "enabled"
        assert resolved["type_k"].value in ("float16", "bfloat16", "float32") and resolved["n_threads"].unknown


@pytest.mark.slow
def test_llama_cpp_quantized_cache_resolves_flash_attention(tiny_dir):
    """A quantized V cache needs flash attention: asked enabled, resolved enabled, the K/V types as
    llama.cpp allocated them."""
    engine = engines.create("llama.cpp")
    engine.load_model(tiny_dir / "gguf/demo-tiny-q8_0.gguf", EngineSettings(n_ctx=512, kv_type="q8_0"))
    try:
        resolved = engine.resolved_settings()
        assert resolved["flash_attn"].value == "enabled"
        assert resolved["type_k"].value == resolved["type_v"].value == "q8_0"
    finally:
        engine.close()


def test_prefill_computes_the_ids_into_the_cache(loaded):
    """The bench phase's pp test: the ids computed with no token generated; the cache then holds
    them, and a generation that extends them reuses every one (greedy output as from scratch)."""
    assert lacks(loaded, "prefill") is None
    ids = PromptBuilder(loaded, seed=5).prompt("prefill", 40).ids
    loaded.reset()
    loaded.prefill(list(ids))
    assert loaded.cached_tokens() == len(ids)
    more = list(ids) + [ids[-1]]
    after = list(loaded.generate(more, 4))
    assert loaded.reused_tokens == len(ids)
    loaded.reset()
    assert after == list(loaded.generate(more, 4))
