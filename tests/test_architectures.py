"""K/V bytes read per generated token for real architecture families, from constructed GGUF
headers and MLX config.json + safetensors headers (metadata only: the tensor data is a sparse
hole), each against a figure computed by hand here. f16 K/V (2 bytes) unless said."""

import json
import os
from pathlib import Path

import gguf
import pytest

from macprof.analyse.ceilings import roofline_for
from macprof.analyse.estimate import ModelFile, estimate
from macprof.collect.modelinfo import inspect
from macprof.errors import MacprofError
from macprof.model.log import Bandwidth, MeasuredBandwidth, SpecBandwidth
from macprof.model.phases import Metrics

C = 4096
F16 = gguf.GGMLQuantizationType.F16


def write_gguf(path: Path, arch: str, kv: dict, tensors: dict[str, tuple]) -> Path:
    """A GGUF header: ``kv`` under "<arch>." (ints as u32, lists as arrays), f16 tensor infos,
    then the data region as a hole of the right size."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        if isinstance(value, list):
            w.add_array(f"{arch}.{key}", value)
        else:
            w.add_uint32(f"{arch}.{key}", value)
    total = 0
    for name, shape in tensors.items():
        n = 1
        for d in shape:
            n *= d
        w.add_tensor_info(name, shape, gguf.np.dtype(gguf.np.float16), n * 2, raw_dtype=F16)
        total += n * 2 + (-(n * 2) % 32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    size = path.stat().st_size
    os.truncate(path, size + (-size % 32) + total)
    return path


def write_mlx(path: Path, config: dict, tensors: dict[str, tuple]) -> Path:
    """config.json and a model.safetensors whose header lists bf16 tensors over a hole."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path / "model.safetensors", "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
    os.truncate(path / "model.safetensors", 8 + len(raw) + offset)
    return path


EMB = {"token_embd.weight": (1000, 64)}  # numpy order, as GGUFWriter takes it: 1000 rows of 64
HEAD = {"output.weight": (1000, 64)}


def _dense(tmp: Path, arch="llama", extra=None) -> Path:
    # Llama 3 8B's attention: 32 layers, 8 KV heads of 128
    kv = {"block_count": 32, "embedding_length": 4096, "attention.head_count": 32, "attention.head_count_kv": 8,
          **(extra or {})}
    return write_gguf(tmp / f"{arch}.gguf", arch, kv, {**EMB, **HEAD})


def _gemma3(tmp: Path, extra=None) -> Path:
    # Gemma 3 4B: 34 layers, 4 KV heads of 256, window 1024, 5 local : 1 global (default pattern 6)
    kv = {"block_count": 34, "embedding_length": 2560, "attention.head_count": 8, "attention.head_count_kv": 4,
          "attention.key_length": 256, "attention.value_length": 256, "attention.sliding_window": 1024, **(extra or {})}
    return write_gguf(tmp / "gemma3.gguf", "gemma3", kv, EMB)  # no output.weight: tied head


def _gpt_oss(tmp: Path) -> Path:
    # gpt-oss 20B: 24 layers, 8 KV heads of 64, alternating window 128 / full; 32 experts, 4 active
    kv = {"block_count": 24, "embedding_length": 2880, "attention.head_count": 64, "attention.head_count_kv": 8,
          "attention.key_length": 64, "attention.value_length": 64, "attention.sliding_window": 128,
          "expert_count": 32, "expert_used_count": 4}
    experts = {"blk.0.ffn_up_exps.weight": (64, 32, 32), "blk.0.attn_q.weight": (64, 64)}
    return write_gguf(tmp / "gpt-oss.gguf", "gpt-oss", kv, {**EMB, **HEAD, **experts})


def _deepseek3(tmp: Path) -> Path:
    # DeepSeek V3 as convert_hf_to_gguf writes it with MLA: one KV "head" of
    # key_length = kv_lora_rank 512 + rope 64 = 576, value_length 512 (a view of K)
    kv = {"block_count": 61, "embedding_length": 7168, "attention.head_count": 128, "attention.head_count_kv": 1,
          "attention.key_length": 576, "attention.value_length": 512, "attention.key_length_mla": 192,
          "attention.value_length_mla": 128, "attention.kv_lora_rank": 512, "rope.dimension_count": 64,
          "expert_count": 256, "expert_used_count": 8, "expert_shared_count": 1}
    return write_gguf(tmp / "deepseek2.gguf", "deepseek2", kv, {**EMB, **HEAD})


LFM2_KVH = [0, 0, 8, 0, 0, 8, 0, 0, 8, 0, 8, 0, 8, 0, 8, 0]  # LFM2 1.2B: attention at 2, 5, 8, 10, 12, 14


def _lfm2(tmp: Path) -> Path:
    kv = {"block_count": 16, "embedding_length": 2048, "attention.head_count": 32, "attention.head_count_kv": LFM2_KVH,
          "shortconv.l_cache": 3}
    return write_gguf(tmp / "lfm2.gguf", "lfm2", kv, EMB)


def _qwen3next(tmp: Path) -> Path:
    # Qwen3-Next 80B: 48 layers, every 4th full attention (2 KV heads of 256), the rest gated delta net
    kv = {"block_count": 48, "embedding_length": 2048, "attention.head_count": 16, "attention.head_count_kv": 2,
          "attention.key_length": 256, "attention.value_length": 256, "ssm.conv_kernel": 4, "ssm.inner_size": 4096,
          "ssm.state_size": 128, "ssm.group_count": 16, "ssm.time_step_rank": 32}
    return write_gguf(tmp / "qwen3next.gguf", "qwen3next", kv, {**EMB, **HEAD})


def _granite_hybrid(tmp: Path) -> Path:
    # Granite 4 style: mamba2 layers (head_count_kv 0) and 2 attention layers of 8 KV heads x 128
    kv = {"block_count": 8, "embedding_length": 1024, "attention.head_count": 8,
          "attention.head_count_kv": [0, 0, 0, 8, 0, 0, 0, 8], "ssm.conv_kernel": 4, "ssm.inner_size": 2048,
          "ssm.state_size": 128, "ssm.group_count": 1, "ssm.time_step_rank": 32}
    return write_gguf(tmp / "granitehybrid.gguf", "granitehybrid", kv, {**EMB, **HEAD})


def _jamba(tmp: Path) -> Path:
    # Jamba style: mamba (no groups) everywhere but layer 4, attention of 8 KV heads x 128
    kv = {"block_count": 8, "embedding_length": 4096, "attention.head_count": 32,
          "attention.head_count_kv": [0, 0, 0, 0, 8, 0, 0, 0], "ssm.conv_kernel": 4, "ssm.inner_size": 8192,
          "ssm.state_size": 16, "ssm.time_step_rank": 256}
    return write_gguf(tmp / "jamba.gguf", "jamba", kv, {**EMB, **HEAD})


# family -> (builder, hand-computed K/V (and state) bytes read per token at c = 4096)
GGUF_FAMILIES = {
    # 32 layers x 4096 positions x 2 (K, V) x 8 heads x 128 x 2 B
    "llama (dense GQA)": (_dense, 32 * C * 2 * 8 * 128 * 2),  # 536,870,912
    # Mistral 7B v0.1 (llama arch): llama.cpp's llama loader reads no window, so it attends to all of c
    "mistral v0.1 (llama arch)": (lambda t: _dense(t, extra={"attention.sliding_window": 4096}), 32 * C * 2 * 8 * 128 * 2),
    # layers 5, 11, 17, 23, 29 full (il % 6 == 5), 29 sliding; per layer 4 x (256 + 256) x 2 = 4096 B
    "gemma3 (SWA 5:1, 1024)": (_gemma3, 5 * C * 4096 + 29 * 1024 * 4096),  # 205,520,896
    # sliding_window_pattern 0: every layer slides (set_swa_pattern(0))
    "gemma3, all layers SWA": (lambda t: _gemma3(t, {"attention.sliding_window_pattern": 0}), 34 * 1024 * 4096),
    # 12 full + 12 sliding (window 128); per layer 8 x (64 + 64) x 2 = 2048 B
    "gpt-oss (SWA 1:1, 128)": (_gpt_oss, 12 * C * 2048 + 12 * 128 * 2048),  # 103,809,024
    # 61 layers x 4096 x 576 x 2 B (one latent shared by K and V)
    "deepseek v3 (MLA)": (_deepseek3, 61 * C * 576 * 2),  # 287,834,112
    # 6 attention layers x 4096 x 8 x (64 + 64) x 2 B + 10 conv layers x 2048 x (3 - 1) x 4 B (f32 state)
    "lfm2 (hybrid short conv)": (_lfm2, 6 * C * 8 * 128 * 2 + 10 * 2048 * 2 * 4),  # 50,495,488
    # 12 full x 4096 x 2 x (256 + 256) x 2 B + 36 x ((4 - 1)(4096 + 2 x 16 x 128) + 128 x 4096) x 4 B
    "qwen3next (hybrid delta net)": (_qwen3next, 12 * C * 2048 + 36 * (3 * 8192 + 128 * 4096) * 4),  # 179,699,712
    # 2 attention x 4096 x 8 x 256 x 2 B + 6 mamba2 x ((4 - 1)(2048 + 2 x 128) + 128 x 2048) x 4 B
    "granitehybrid (mamba2)": (_granite_hybrid, 2 * C * 8 * 256 * 2 + 6 * (3 * 2304 + 128 * 2048) * 4),  # 40,011,776
    # 1 attention x 4096 x 8 x 256 x 2 B + 7 mamba x ((4 - 1) x 8192 + 16 x 8192) x 4 B
    "jamba (mamba)": (_jamba, C * 8 * 256 * 2 + 7 * (3 * 8192 + 16 * 8192) * 4),  # 21,135,360
}


def _recurrent(tmp: Path, arch: str, kv: dict) -> Path:
    return write_gguf(tmp / f"{arch}.gguf", arch, {"attention.head_count": 0, **kv}, {**EMB, **HEAD})


# purely recurrent (llm_arch_is_recurrent): per layer n_embd_r + n_embd_s f32 values, nothing per
# position, so the same bytes at c = 0 as at c = 4096 (llama-hparams.cpp n_embd_r / n_embd_s)
RECURRENT = {
    # Mamba 130M: 24 layers, d_inner 1536, d_state 16, d_conv 4, no groups:
    # ((4 - 1) x 1536 + 16 x 1536) x 4 B = 116,736 per layer; x 24 = 2,801,664
    "mamba": ({"block_count": 24, "embedding_length": 768, "ssm.conv_kernel": 4, "ssm.inner_size": 1536,
               "ssm.state_size": 16, "ssm.time_step_rank": 48}, 24 * (3 * 1536 + 16 * 1536) * 4),
    # Mamba2 130M: 24 layers, d_inner 1536, d_state 128, 1 group, d_conv 4:
    # ((4 - 1)(1536 + 2 x 1 x 128) + 128 x 1536) x 4 B = 807,936 per layer; x 24 = 19,390,464
    "mamba2": ({"block_count": 24, "embedding_length": 768, "ssm.conv_kernel": 4, "ssm.inner_size": 1536,
                "ssm.state_size": 128, "ssm.group_count": 1, "ssm.time_step_rank": 24},
               24 * (3 * (1536 + 2 * 128) + 128 * 1536) * 4),
    # RWKV6 1.6B: 24 layers, n_embd 2048, wkv head 64, token_shift_count 2 written:
    # (2 x 2048 + 2048 x 64) x 4 B = 540,672 per layer; x 24 = 12,976,128
    "rwkv6": ({"block_count": 24, "embedding_length": 2048, "wkv.head_size": 64, "token_shift_count": 2},
              24 * (2 * 2048 + 2048 * 64) * 4),
    # RWKV7 190M: 12 layers, n_embd 768, wkv head 64, no token_shift_count key (llama.cpp's default 2):
    # (2 x 768 + 768 x 64) x 4 B = 202,752 per layer; x 12 = 2,433,024
    "rwkv7": ({"block_count": 12, "embedding_length": 768, "wkv.head_size": 64}, 12 * (2 * 768 + 768 * 64) * 4),
}


@pytest.mark.parametrize("arch", RECURRENT)
def test_recurrent_models_hold_a_constant_state(tmp_path, arch):
    """A pure Mamba / RWKV model's ceiling stays flat with depth: its cache is a fixed state,
    never attention K/V growing with c."""
    kv, by_hand = RECURRENT[arch]
    info = inspect(_recurrent(tmp_path, arch, kv))
    assert info.kv_layout.known, info.kv_layout.reason
    assert [g.kind for g in info.kv_layout.groups] == ["state"]
    assert info.kv_bytes_read(0) == info.kv_bytes_read(C) == by_hand
    assert info.kv_bytes_per_token is None  # not c x a constant
    shape = info.to_dict()
    flat = {roofline_for(Metrics(), shape, c, _bandwidth(), info.file_bytes).spec.ceiling_tok_s for c in (1, C, 32 * C)}
    assert len(flat) == 1


def test_rwkv_without_embedding_length_is_unknown_with_the_reason(tmp_path):
    info = inspect(_recurrent(tmp_path, "rwkv7", {"block_count": 12, "wkv.head_size": 64}))
    assert not info.kv_layout.known and "embedding_length" in (info.kv_layout.reason or "")


@pytest.mark.parametrize("family", GGUF_FAMILIES)
def test_gguf_kv_bytes_read_at_4096(tmp_path, family):
    build, by_hand = GGUF_FAMILIES[family]
    info = inspect(build(tmp_path))
    assert info.kv_layout.known, info.kv_layout.reason
    assert info.kv_bytes_read(C) == by_hand


def test_only_full_attention_keeps_the_linear_figure(tmp_path):
    assert inspect(_dense(tmp_path)).kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert inspect(_deepseek3(tmp_path)).kv_bytes_per_token == 61 * 576 * 2
    assert inspect(_gemma3(tmp_path)).kv_bytes_per_token is None  # windows: not c x a constant
    assert inspect(_lfm2(tmp_path)).kv_bytes_per_token is None


def test_sliding_layers_read_the_whole_context_below_the_window(tmp_path):
    info = inspect(_gemma3(tmp_path))
    assert info.kv_bytes_read(512) == 34 * 512 * 4096  # c < window: every layer reads all c
    assert info.kv_bytes_read(0) == 0


@pytest.mark.parametrize("kv_type, per_element", [("q8_0", 34 / 32), ("q4_0", 18 / 32)])
def test_quantized_kv_cache(tmp_path, kv_type, per_element):
    # 32 layers x 4096 x 2 x 8 x 128 elements; q8_0 34 B per 32, q4_0 18 B per 32
    info = inspect(_dense(tmp_path), kv_type=kv_type)
    assert info.kv_bytes_read(C) == 32 * C * 2 * 8 * 128 * per_element  # 285,212,672 / 150,994,944
    assert info.to_dict()["kv_layout"]["kv_type"] == kv_type


def test_tied_head_and_experts_in_the_weights_read(tmp_path):
    # gpt-oss above: embedding 64 x 1000 (one row read), head 64 x 1000, attn 64 x 64, experts
    # 32 x 32 x 64 of which 4 of 32 are read; f16
    info = inspect(_gpt_oss(tmp_path))
    assert info.weight_bytes_per_token == (64 + 64_000 + 4096 + 32 * 32 * 64 * 4 // 32) * 2
    tied = inspect(_gemma3(tmp_path))  # no output.weight: the head reads the whole table
    assert tied.tied_embeddings and tied.weight_bytes_per_token == 64_000 * 2


def test_shared_experts_are_always_read(tmp_path):
    # Qwen2-MoE / DeepSeek: shared experts ("_shexp") read every token, routed ("_exps") 2 of 8
    kv = {"block_count": 1, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 4,
          "expert_count": 8, "expert_used_count": 2, "expert_shared_count": 1}
    tensors = {**EMB, **HEAD, "blk.0.ffn_up_exps.weight": (64, 128, 8), "blk.0.ffn_up_shexp.weight": (64, 128)}
    info = inspect(write_gguf(tmp_path / "q2moe.gguf", "qwen2moe", kv, tensors))
    assert info.experts_shared == 1
    assert info.weight_bytes_per_token == (64 + 64_000 + 64 * 128 * 8 * 2 // 8 + 64 * 128) * 2


# -- MLX --------------------------------------------------------------------------------------
MLX_TENSORS = {"model.embed_tokens.weight": (1000, 64), "lm_head.weight": (1000, 64)}

MLX_FAMILIES = {
    # gemma3_text: sliding_window 1024, pattern 6: layer i slides unless (i + 1) % 6 == 0
    "gemma3_text": ({"model_type": "gemma3_text", "num_hidden_layers": 34, "hidden_size": 2560,
                     "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 1024,
                     "sliding_window_pattern": 6}, 5 * C * 4096 + 29 * 1024 * 4096),
    "gpt_oss": ({"model_type": "gpt_oss", "num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64,
                 "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128, "num_local_experts": 32,
                 "num_experts_per_tok": 4}, 12 * C * 2048 + 12 * 128 * 2048),
    # mistral -> llama.py: no layer_types, so every layer a KVCache despite sliding_window
    "mistral": ({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "sliding_window": 4096}, 32 * C * 2 * 8 * 128 * 2),
    # deepseek_v3.py caches the latent (512) and the rope key (64)
    "deepseek_v3": ({"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                     "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
                     "qk_rope_head_dim": 64, "n_routed_experts": 256, "num_experts_per_tok": 8,
                     "n_shared_experts": 1}, 61 * C * (512 + 64) * 2),
    # 6 attention layers; 10 conv layers of (3 - 1) x 2048 bf16
    "lfm2": ({"model_type": "lfm2", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
              "num_key_value_heads": 8, "conv_L_cache": 3, "full_attn_idxs": [2, 5, 8, 10, 12, 14]},
             6 * C * 2 * 8 * 64 * 2 + 10 * 2 * 2048 * 2),  # 50,413,568
    # 12 full x 2 x 2 x 256 x 2 B; 36 linear: conv (4 - 1) x (2 x 16 x 128 + 32 x 128) bf16 + 32 x 128 x 128 f32
    "qwen3_next": ({"model_type": "qwen3_next", "num_hidden_layers": 48, "hidden_size": 2048,
                    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                    "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
                    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4},
                   12 * C * 2048 + 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 4)),  # 177,930,240
}


@pytest.mark.parametrize("family", MLX_FAMILIES)
def test_mlx_kv_bytes_read_at_4096(tmp_path, family):
    config, by_hand = MLX_FAMILIES[family]
    info = inspect(write_mlx(tmp_path / family, config, MLX_TENSORS))
    assert info.kv_layout.known, info.kv_layout.reason
    assert info.kv_bytes_read(C) == by_hand


def test_mlx_shared_experts_are_dense(tmp_path):
    config = {**MLX_FAMILIES["deepseek_v3"][0], "num_hidden_layers": 1, "vocab_size": 1000}
    tensors = {**MLX_TENSORS, "model.layers.0.mlp.switch_mlp.up_proj.weight": (256, 8, 8),
               "model.layers.0.mlp.shared_experts.up_proj.weight": (8, 8)}
    info = inspect(write_mlx(tmp_path / "ds", config, tensors))
    assert (info.experts_total, info.experts_active, info.experts_shared) == (256, 8, 1)
    # embedding one row of 64, head 64,000, routed 256 x 64 x 8 / 256, shared 64, bf16
    assert info.weight_bytes_per_token == (64 + 64_000 + 64 * 8 + 64) * 2


def test_mlx_quantized_kv_cache(tmp_path):
    # kv_bits 8, group 64: 1 B + an f16 scale and bias per 64 = 1.0625 B per element
    info = inspect(write_mlx(tmp_path / "m", MLX_FAMILIES["mistral"][0], MLX_TENSORS), kv_type="q8_0")
    assert info.kv_bytes_read(C) == 32 * C * 2 * 8 * 128 * (1 + 4 / 64)


# -- unknown: measured anyway, no ceiling ------------------------------------------------------
def _bandwidth() -> Bandwidth:
    return Bandwidth(spec=SpecBandwidth(gbs=100.0), measured=MeasuredBandwidth(gbs=80.0))


def test_unknown_architecture_gives_an_unknown_ceiling_with_the_reason(tmp_path):
    kv = {"block_count": 24, "embedding_length": 2048, "attention.head_count": 16}
    info = inspect(write_gguf(tmp_path / "x.gguf", "t5", kv, {**EMB, **HEAD}))
    assert not info.kv_layout.known and "t5" in (info.kv_layout.reason or "")
    assert info.kv_bytes_per_token is None and info.kv_bytes_read(C) is None
    ceiling = roofline_for(Metrics(), info.to_dict(), C, _bandwidth(), info.file_bytes)
    assert ceiling.reason and "t5" in ceiling.reason and not ceiling.has("spec")
    with pytest.raises(MacprofError, match="unknown"):
        estimate(model=ModelFile(tmp_path / "x.gguf", info), bandwidth_gbs=100, context=C)
    assert estimate(model=ModelFile(tmp_path / "x.gguf", info), bandwidth_gbs=100, context=0)["ceiling_tok_s"] > 0


def test_ceilings_and_estimate_use_the_layout(tmp_path):
    path = _gemma3(tmp_path)
    info = inspect(path)
    shape = info.to_dict()
    ceiling = roofline_for(Metrics(), shape, C, _bandwidth(), info.file_bytes)
    assert ceiling.kv_bytes_read == 5 * C * 4096 + 29 * 1024 * 4096 and ceiling.kv_type == "f16"
    assert ceiling.spec.ceiling_tok_s == pytest.approx(100e9 / (info.weight_bytes_per_token + ceiling.kv_bytes_read))
    e = estimate(model=ModelFile(path, info), bandwidth_gbs=100, context=C)
    assert e["kv_bytes_at_context"] == ceiling.kv_bytes_read
    assert e["ceiling_tok_s"] == pytest.approx(ceiling.spec.ceiling_tok_s)


def test_a_log_with_only_the_scalar_still_gives_its_ceiling():
    shape = {"weight_bytes_per_token": 1e9, "kv_bytes_per_token": 1000}  # a shape written before layouts
    ceiling = roofline_for(Metrics(), shape, 4000, _bandwidth(), 0)
    assert ceiling.kv_bytes_read == 4e6
    assert ceiling.spec.ceiling_tok_s == pytest.approx(100e9 / (1e9 + 4e6))


# -- the run option ------------------------------------------------------------------------------
def test_kv_type_is_a_setting_recorded_with_the_shape(fake_dir):
    from macprof import config
    from macprof.collect.facts import model_start_event

    cfg = config.load(fake_dir / "models.toml", {"kv_type": "q8_0"}, check_engines=False)
    model = cfg.models[0]
    assert model.settings.kv_type == "q8_0"
    start = model_start_event(model)
    assert start.settings.kv_type == "q8_0" and start.shape["kv_layout"]["kv_type"] == "q8_0"
    with pytest.raises(MacprofError, match="kv_type"):
        config.load(fake_dir / "models.toml", {"kv_type": "q5_1"}, check_engines=False)


@pytest.mark.slow  # the real engines on the tiny demo model
@pytest.mark.parametrize("engine_name, rel", [("llama.cpp", "gguf/demo-tiny-f16.gguf"), ("mlx", "mlx/demo-tiny-f16")])
def test_quantized_kv_cache_on_the_demo_model(tiny_dir, engine_name, rel):
    from macprof import engines
    from macprof.engines.base import EngineSettings
    from macprof.run.prompts import PromptBuilder

    held, versions = {}, {}
    for kv_type in ("f16", "q8_0"):
        engine = engines.create(engine_name)
        engine.load_model(tiny_dir / rel, EngineSettings(n_ctx=512, kv_type=kv_type))
        engine.load_tokenizer()
        ids = PromptBuilder(engine, seed=1).prompt("kv", 64).ids
        engine.reset()
        assert len(list(engine.generate(list(ids), 8))) == 8
        held[kv_type], versions[kv_type] = engine.kv_cache_bytes(), engine.versions()
        engine.close()
    if engine_name == "llama.cpp":  # q8_0 K and V, with the flash attention llama.cpp needs for a quantized V
        assert versions["q8_0"]["kv_type"] == "q8_0" and versions["q8_0"]["load"]["flash_attn"] == "enabled"
    else:
        assert versions["q8_0"]["kv_bits"] == 8 and versions["f16"]["kv_bits"] is None
    assert held["q8_0"] < 0.7 * held["f16"]  # about 1.06 of 2 bytes per element
