"""Caches that cannot always be cut back to a prefix (sliding-window, recurrent): each engine
says why (``cut_refusal``), never reports a recomputed prefix as reused, and the prefix and
depth protocols record "reuse not possible" and still measure. The fast tier drives the fake
engine's window / recurrent caches; the slow tier runs tiny random MLX models whose own caches
are a RotatingKVCache (gemma3_text) and an ArraysCache (lfm2), and a tiny random Mamba GGUF on
llama.cpp's recurrent memory."""

import json
import shutil
from pathlib import Path

import pytest

from macprof import config
from macprof.analyse import build
from macprof.engines.base import CacheCutRefused, EngineSettings
from macprof.engines.fake import FakeEngine, write_model
from macprof.model.events import parse_event
from macprof.render.summary import _reuse_warnings
from macprof.store import runlog
from tests.test_run import macprof


def _fake(tmp_path: Path, cache: str) -> FakeEngine:
    engine = FakeEngine()
    engine.load_model(write_model(tmp_path / f"{cache.replace(':', '-')}.gguf", cache=cache), EngineSettings(n_ctx=1024))
    return engine


# -- the fake engine's caches ------------------------------------------------------------------
def test_recurrent_fake_extends_but_cannot_rewind(tmp_path):
    engine = _fake(tmp_path, "recurrent")
    ids = list(range(300, 340))
    list(engine.generate(ids, 4))  # the cache holds 40 + 3
    assert engine.cut_refusal(engine.cached_tokens()) is None and engine.cut_refusal(0) is None
    reason = engine.cut_refusal(40)
    assert reason and "recurrent" in reason and "cannot be rewound to 40" in reason
    with pytest.raises(CacheCutRefused) as exc:
        engine.truncate(40)
    assert exc.value.reason == reason and engine.cached_tokens() == 43  # untouched
    other = ids[:30] + [500, 501]
    got = list(engine.generate(other, 5))  # shares 30 tokens, but keeping them needs a cut
    assert engine.reused_tokens == 0 and "cannot be rewound to 30" in engine.reuse_refused
    engine.reset()
    assert got == list(engine.generate(other, 5)) and engine.reuse_refused is None
    list(engine.generate(other + got, 2))  # extending what it holds needs no cut
    assert engine.reused_tokens == len(other) + 4 and engine.reuse_refused is None


def _run_prefix_depth(root, models: dict, depths, prompt, prefix, gen, reps, timeout):
    """`macprof run` of the prefix phase and a depth sweep on the models (file -> engine) in
    root, each named after its file: -> (the run log's path, the finished process)."""
    toml = [f'[[models]]\nname = "{f.removesuffix(".gguf")}"\nengine = "{engine}"\npath = "{f}"\n'
            for f, engine in models.items()]
    (root / "models.toml").write_text("\n".join(toml))
    log = root / "run.json"
    proc = macprof("run", "--config", str(root / "models.toml"), "--phases", "prefix,depth", "--depth", depths,
                   "--prompt-tokens", prompt, "--prefix-tokens", prefix, "--gen-tokens", gen, "--reps", reps,
                   "--timeout", timeout, "--log", str(log))
    return log, proc


def test_window_fake_cuts_only_while_nothing_left_its_window(tmp_path):
    engine = _fake(tmp_path, "window:32")
    list(engine.generate(list(range(300, 320)), 4))  # 23 held: nothing has left the window
    engine.truncate(10)
    assert engine.cached_tokens() == 10
    list(engine.generate(list(range(300, 340)), 4))  # 43 held
    assert "sliding-window cache of 32 tokens" in engine.cut_refusal(20)
    with pytest.raises(CacheCutRefused):
        engine.truncate(20)


def test_fake_cache_option_is_checked(tmp_path):
    from macprof.errors import MacprofError

    with pytest.raises(MacprofError, match="expected full, window:N or recurrent"):
        write_model(tmp_path / "x.gguf", cache="window")


# -- the protocols --------------------------------------------------------------------------------
class NoPrefixCache(FakeEngine):
    """An engine that can keep nothing it computed for a later prompt (each request starts empty)."""

    def cut_refusal(self, n_tokens):
        return "this engine keeps no prompt cache between requests" if n_tokens else None


def test_prefix_phase_records_reuse_not_possible(tmp_path):
    """The reuse half is measured from an empty cache (reused 0, never called reuse), the phase
    says why, there is no speed-up figure, and the summary warns."""
    from macprof.run.phases import PhaseContext
    from macprof.run.phases.prefix import run_prefix
    from macprof.run.prompts import PromptBuilder

    engine = NoPrefixCache()
    engine.load_model(write_model(tmp_path / "m.gguf"), EngineSettings(n_ctx=1024))
    s = config.Settings(phases=("prefix",), prefix_tokens=40, prompt_tokens=48, gen_tokens=4, reps=2)
    events = []
    run_prefix(PhaseContext(engine, PromptBuilder(engine), s, lambda e: events.append(parse_event({**e.to_json(), "model": "m"}))))
    refusals = [e for e in events if e.KIND == "reuse_not_possible"]
    assert len(refusals) == 3 and refusals[0].reason == "this engine keeps no prompt cache between requests"
    phase = build._build_prefix(events, [], lambda summary: None)
    assert phase.reuse_not_possible == refusals[0].reason and phase.summary.ttft_speedup is None
    assert all(p.reuse.reused_tokens == 0 and p.check.passed for p in phase.pairs)
    assert phase.to_json()["reuse_not_possible"] == refusals[0].reason
    (warning,) = _reuse_warnings("m", _Phases(prefix=phase))
    assert warning.startswith("m: prefix reuse not possible for this model: this engine keeps no prompt cache")


class _Phases:
    def __init__(self, prefix=None, depth=None):
        self.prefix, self.depth = prefix, depth


def test_depth_refills_where_the_cache_cannot_be_cut(tmp_path):
    """A recurrent and a sliding-window fake model: each depth request still starts from d cached
    tokens (refilled, untimed), the case says why; the prefix phase extends its cached prefix,
    which every cache can, so it reuses it. A full cache is cut back as before."""
    kinds = {"fake-full": "full", "fake-recurrent": "recurrent", "fake-window": "window:44"}
    for name, cache in kinds.items():
        write_model(tmp_path / f"{name}.gguf", cache=cache)
    log, proc = _run_prefix_depth(tmp_path, {f"{name}.gguf": "fake" for name in kinds}, "0,40", "40", "32", "8", "2", "60")
    runlog.load(log)
    data = json.loads(log.read_text())
    for m in data["models"]:
        name, prefix = m["identity"]["name"], m["phases"]["prefix"]
        assert "reuse_not_possible" not in prefix
        assert all(p["reuse"]["reused_tokens"] == 32 and p["check"]["passed"] for p in prefix["pairs"])
        d0, d40 = m["phases"]["depth"]["cases"]
        assert "reuse_not_possible" not in d0
        for r in d40["requests"]:
            assert r["cached_tokens_before"] == 40 and r["reused_tokens"] == 40 and r["computed_prompt_tokens"] == 1
        if name == "fake-full":
            assert "reuse_not_possible" not in d40
        else:
            assert d40["status"] == "ok" and ("recurrent" if name == "fake-recurrent" else "sliding-window") \
                in d40["reuse_not_possible"]
            assert f"{name}: depth d40: the cache cannot be cut back to its fill" in proc.stdout
    assert "refilled" in proc.stdout


# -- the engines' decisions, from the facts they read --------------------------------------------
def test_llama_cpp_cut_decision():
    pytest.importorskip("llama_cpp")
    from macprof.engines.llama_cpp_facts import cut_refusal

    plain = dict(recurrent=False, hybrid=False, n_swa=0, swa_full=True, pos_min=0)
    assert cut_refusal(100, 40, **plain) is None
    assert "recurrent memory" in cut_refusal(100, 40, **plain | {"recurrent": True})
    assert "hybrid" in cut_refusal(100, 40, **plain | {"hybrid": True})
    assert cut_refusal(100, 100, **plain | {"recurrent": True}) is None  # extending: nothing to cut
    assert cut_refusal(100, 0, **plain | {"recurrent": True}) is None  # emptying
    swa = plain | {"n_swa": 16, "swa_full": False}
    assert "holds positions from 84 on; cutting back to 40 tokens needs them from 24" in cut_refusal(100, 40, **swa | {"pos_min": 84})
    assert cut_refusal(100, 90, **swa | {"pos_min": 74}) is None  # the window before 90 is still held
    assert cut_refusal(100, 40, **plain | {"n_swa": 16}) is None  # swa_full: every position kept (pos_min 0)


def test_mlx_cut_decision_on_mlx_lm_caches():
    pytest.importorskip("mlx_lm")
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    from macprof.engines.mlx import cut_refusal

    def fed(cache, n):
        cache.update_and_fetch(mx.zeros((1, 1, n, 2)), mx.zeros((1, 1, n, 2)))
        return cache

    assert cut_refusal([fed(KVCache(), 10), fed(RotatingKVCache(max_size=16), 10)], 10, 4) is None
    reason = cut_refusal([fed(KVCache(), 20), fed(RotatingKVCache(max_size=16), 20)], 20, 4)
    assert reason.startswith("1 of 2 layers cannot be cut back from 20 to 4 tokens: sliding-window layers")
    recurrent = ArraysCache(size=1)
    recurrent[0] = mx.zeros((1, 3, 8))
    assert "recurrent layers (mlx-lm ArraysCache)" in cut_refusal([fed(KVCache(), 10), recurrent], 10, 4)
    assert cut_refusal([fed(KVCache(), 10), recurrent], 10, 10) is None


# -- slow: real MLX caches, tiny random models of mlx-lm's own classes ---------------------------
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "sliding_window": 16,
          "sliding_window_pattern": 2, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6}
LFM2 = {"model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 1024, "norm_eps": 1e-5, "conv_bias": False,
        "conv_L_cache": 3, "block_dim": 64, "block_multiple_of": 16, "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False, "block_ff_dim": 128, "layer_types": ["conv", "full_attention"]}


def write_mlx_model(out: Path, arch: dict, tokenizer_dir: Path) -> Path:
    """mlx-lm's own model class with its own (seeded random) initial weights, in float16, with the
    tiny demo's tokenizer: what `mlx_lm.utils.load_model` reads like any converted model."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    cfg = {**arch, "vocab_size": json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"],
           "bos_token_id": 0, "eos_token_id": 1}
    model_cls, args_cls = _get_classes(cfg)
    mx.random.seed(0)
    model = model_cls(args_cls.from_dict(cfg))
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"),
                        {k: v.astype(mx.float16) for k, v in tree_flatten(model.parameters())}, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(cfg))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / f, out / f)
    return out


@pytest.mark.slow
def test_mlx_sliding_window_and_recurrent_caches(tiny_dir, tmp_path):
    """The prefix phase reuses the cached prefix (it extends it, past the 16-token window too);
    a depth case deeper than the window (gemma3_text) or on a recurrent layer (lfm2) cannot be
    cut back: refilled, with mlx-lm's reason recorded."""
    pytest.importorskip("mlx_lm")
    for name, arch in (("gemma3-swa", GEMMA3), ("lfm2-conv", LFM2)):
        write_mlx_model(tmp_path / name, arch, tiny_dir / "mlx" / "demo-tiny-f16")
    log, proc = _run_prefix_depth(tmp_path, {"gemma3-swa": "mlx", "lfm2-conv": "mlx"}, "24", "28", "24", "6", "1", "120")
    runlog.load(log)
    for m, what in zip(json.loads(log.read_text())["models"], ("RotatingKVCache, window 16", "ArraysCache")):
        prefix = m["phases"]["prefix"]
        assert "reuse_not_possible" not in prefix
        assert all(p["reuse"]["reused_tokens"] == 24 and p["check"]["passed"] for p in prefix["pairs"])
        (d24,) = m["phases"]["depth"]["cases"]
        assert d24["status"] == "ok" and what in d24["reuse_not_possible"]
        assert all(r["reused_tokens"] == 24 and r["cached_tokens_before"] == 24 for r in d24["requests"])
    assert "the cache cannot be cut back to its fill" in proc.stdout



# -- slow: llama.cpp's recurrent memory, a tiny random Mamba GGUF ---------------------------------
def write_mamba_gguf(path: Path, tok_json: str, hidden: int = 64, layers: int = 2, d_state: int = 8, d_conv: int = 4,
                     dt_rank: int = 4) -> Path:
    """A Mamba model as convert_hf_to_gguf writes one (the keys and tensors llama.cpp's mamba
    loader asks for), seeded random f32 weights, with the tiny demo's BPE vocabulary."""
    import gguf
    import numpy as np

    from macprof.demo.tokenizer import vocab_and_merges

    tokens, merges = vocab_and_merges(tok_json)
    d_inner, rng = 2 * hidden, np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_context_length(1 << 20)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_block_count(layers)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in ("<s>", "</s>") else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)

    def normal(*shape: int, std: float = 0.2):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # numpy shapes are ggml's reversed: ssm_in {n_embd, 2 d_inner} is (2 d_inner, n_embd)
    w.add_tensor("token_embd.weight", normal(len(tokens), hidden, std=1.0))
    for i in range(layers):
        for name, a in (("attn_norm.weight", np.ones(hidden, np.float32)), ("ssm_in.weight", normal(2 * d_inner, hidden)),
                        ("ssm_conv1d.weight", normal(d_inner, d_conv)), ("ssm_conv1d.bias", normal(d_inner)),
                        ("ssm_x.weight", normal(dt_rank + 2 * d_state, d_inner)), ("ssm_dt.weight", normal(d_inner, dt_rank)),
                        ("ssm_dt.bias", normal(d_inner)), ("ssm_a", -np.exp(normal(d_inner, d_state))),
                        ("ssm_d", np.ones(d_inner, np.float32)), ("ssm_out.weight", normal(hidden, d_inner))):
            w.add_tensor(f"blk.{i}.{name}", a)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output.weight", normal(len(tokens), hidden, std=1.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.slow
def test_llama_cpp_recurrent_memory(tiny_dir, tmp_path):
    """The real binding: llama.cpp says the model is recurrent, its seq_rm refuses a partial
    removal, the engine refuses the cut with its reason, extends its state (real reuse), and a
    prompt that would need a cut is recomputed, reported as such, with the fresh path's tokens;
    a depth case through `macprof run` is refilled and says why."""
    import llama_cpp as lc

    from macprof.engines.llama_cpp import LlamaCppEngine

    path = write_mamba_gguf(tmp_path / "mamba.gguf", (tiny_dir / "mlx" / "demo-tiny-f16" / "tokenizer.json").read_text())
    engine = LlamaCppEngine()
    engine.load_model(path, EngineSettings(n_ctx=256))
    try:
        assert engine.memory_facts["recurrent"] is True
        ids = engine.tokenize(" the cache of a recurrent model keeps a state and not one entry per token")
        first = list(engine.generate(ids, 5))  # holds ids + 4
        held = len(ids) + 4
        assert engine.cached_tokens() == held and "cannot be rewound to 10" in engine.cut_refusal(10)
        with pytest.raises(CacheCutRefused, match="recurrent memory"):
            engine.truncate(10)
        list(engine.generate(ids + first + [20], 3))  # extends what it holds: no cut
        assert engine.reused_tokens == held and engine.reuse_refused is None
        cut = list(engine.generate(ids[:10] + [20, 21], 4))
        assert engine.reused_tokens == 0 and "recurrent" in engine.reuse_refused
        engine.reset()
        assert list(engine.generate(ids[:10] + [20, 21], 4)) == cut
        assert not lc.llama_memory_seq_rm(lc.llama_get_memory(engine.ctx), 0, 5, -1)  # llama.cpp's own refusal
    finally:
        engine.close()
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "mamba"\nengine = "llama.cpp"\npath = "{path}"\n')
    log = tmp_path / "run.json"
    macprof("run", "--config", str(tmp_path / "models.toml"), "--phases", "prefix,depth", "--depth", "24",
            "--prompt-tokens", "28", "--prefix-tokens", "24", "--gen-tokens", "6", "--reps", "1", "--timeout", "60",
            "--log", str(log))
    (m,) = json.loads(log.read_text())["models"]
    assert all(p["reuse"]["reused_tokens"] == 24 for p in m["phases"]["prefix"]["pairs"])
    (d24,) = m["phases"]["depth"]["cases"]
    assert "llama.cpp recurrent memory" in d24["reuse_not_possible"]
    assert all(r["reused_tokens"] == 24 and r["cached_tokens_before"] == 24 for r in d24["requests"])
    # the ceiling's K/V term is Mamba's constant state, not attention growing with depth (a
    # wrong per-position term once put this case at 104 % of its ceiling): 2 layers x
    # ((4 - 1) x 128 + 8 x 128) x 4 B = 11,264 B, the same at the prefix's context and at depth 24
    assert [g["kind"] for g in m["shape"]["kv_layout"]["groups"]] == ["state"]
    assert d24["roofline"]["kv_bytes_read"] == m["phases"]["prefix"]["roofline"]["kv_bytes_read"] == 2 * (3 * 128 + 8 * 128) * 4
    # (no efficiency <= 1 here: a 2.4 MB model decodes from the CPU's caches, and its share of a
    # bandwidth probed on a busy machine is a timing, which no test asserts; the bytes above are the check)
