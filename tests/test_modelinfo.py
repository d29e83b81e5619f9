"""`macprof inspect`: shape and bytes from metadata, checked against the weights themselves and
against synthetic GGUF headers of a tied-embedding model and a mixture-of-experts model."""

import json

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from macprof.cli import main
from macprof.demo.build import SPECS, hf_weights
from macprof.collect.modelinfo import inspect

SPEC = SPECS["tiny"]


@pytest.mark.slow  # the demo models: built with the real engines' quantizers
def test_f16_demo_bytes_per_token_from_the_weights(tiny_dir):
    w = hf_weights(SPEC)
    emb = w["model.embed_tokens.weight"]
    # GGUF keeps 1-D norms in f32 (4 bytes), everything else f16
    total = sum(a.size * (4 if a.ndim == 1 else 2) for a in w.values())
    expected = total - emb.nbytes + emb.nbytes // SPEC.vocab_size
    info = inspect(tiny_dir / "gguf/demo-tiny-f16.gguf")
    assert info.n_params == sum(a.size for a in w.values())
    assert info.tensor_bytes == total and info.weight_bytes_per_token == expected
    assert (info.n_layers, info.n_heads, info.n_kv_heads, info.head_dim) == (SPEC.layers, SPEC.heads, SPEC.kv_heads, SPEC.head_dim)
    assert info.kv_bytes_per_token == 2 * SPEC.layers * SPEC.kv_heads * SPEC.head_dim * 2
    assert not info.tied_embeddings and info.quant == "F16" and info.architecture == "llama"
    mlx = inspect(tiny_dir / "mlx/demo-tiny-f16")
    f16_total = sum(a.nbytes for a in w.values())
    assert mlx.tensor_bytes == f16_total
    assert mlx.weight_bytes_per_token == f16_total - emb.nbytes + emb.nbytes // SPEC.vocab_size


@pytest.mark.slow  # the demo models: built with the real engines' quantizers
def test_quantized_demos_read_fewer_bytes(tiny_dir):
    f16 = inspect(tiny_dir / "gguf/demo-tiny-f16.gguf").weight_bytes_per_token
    q8 = inspect(tiny_dir / "gguf/demo-tiny-q8_0.gguf").weight_bytes_per_token
    q4 = inspect(tiny_dir / "gguf/demo-tiny-q4_k_m.gguf").weight_bytes_per_token
    assert f16 > q8 > q4
    m4 = inspect(tiny_dir / "mlx/demo-tiny-4bit")
    assert m4.quant == "4bit" and m4.n_params == inspect(tiny_dir / "mlx/demo-tiny-f16").n_params


def _write_gguf(path, tensors, meta):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(meta["layers"])
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(2048)
    if "experts" in meta:
        w.add_expert_count(meta["experts"])
        w.add_expert_used_count(meta["used"])
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_tied_embeddings(tmp_path):
    p = tmp_path / "tied.gguf"
    _write_gguf(p, {"token_embd.weight": (1000, 64), "blk.0.attn_q.weight": (64, 64)}, {"layers": 1})
    info = inspect(p)
    assert info.tied_embeddings
    # tied: the output head reads the whole table, so no row-only discount
    assert info.weight_bytes_per_token == (1000 * 64 + 64 * 64) * 2
    assert info.kv_bytes_per_token == 2 * 1 * 2 * 16 * 2


def test_mixture_of_experts(tmp_path):
    p = tmp_path / "moe.gguf"
    tensors = {"token_embd.weight": (1000, 64), "output.weight": (1000, 64), "blk.0.attn_q.weight": (64, 64),
               "blk.0.ffn_gate_exps.weight": (8, 128, 64), "blk.0.ffn_up_exps.weight": (8, 128, 64),
               "blk.0.ffn_down_exps.weight": (8, 64, 128)}
    _write_gguf(p, tensors, {"layers": 1, "experts": 8, "used": 2})
    info = inspect(p)
    experts = 3 * 8 * 128 * 64
    assert (info.experts_total, info.experts_active) == (8, 2)
    assert info.n_params == 2 * 1000 * 64 + 64 * 64 + experts
    assert info.active_params == info.n_params - experts + experts * 2 // 8
    expected = (1000 * 64 + 64 * 64 + experts * 2 // 8) * 2 + 64 * 2  # head whole, one embedding row, 2 of 8 experts
    assert info.weight_bytes_per_token == expected


@pytest.mark.slow  # the demo models: built with the real engines' quantizers
def test_inspect_cli(tiny_dir):
    r = CliRunner().invoke(main, ["inspect", str(tiny_dir / "gguf/demo-tiny-q4_k_m.gguf"), "--json"])
    d = json.loads(r.output)
    assert d["quant"] == "Q4_K_M" and d["weight_bytes_per_token"] < d["tensor_bytes"]
    bad = CliRunner().invoke(main, ["inspect", str(tiny_dir / "models.toml")])
    assert bad.exit_code == 2 and "not a GGUF file" in bad.output
