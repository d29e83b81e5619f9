"""Synthesise the demo models: one set of seeded weights and one tokenizer, six formats.

GGUF F16 / Q8_0 / Q4_K_M (llama.cpp's own quantizer) and MLX float16 / 8-bit / 4-bit
(mlx-lm's quantizer), all from the same float16 weights, so comparisons across engines and
quantizations compare like with like. Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from macprof.errors import MacprofError
from macprof.files.fileid import cache_dir, sha256_file

BUILD_VERSION = 1  # bump when the recipe changes: existing builds are then rebuilt
SEED = 20261130


@dataclass(frozen=True)
class DemoSpec:
    size: str
    vocab_size: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    context: int
    corpus_words: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# Every matrix dimension is a multiple of 256 so that Q4_K / Q8_0 / MLX groups fit exactly.
SPECS = {
    "tiny": DemoSpec("tiny", vocab_size=4096, hidden=256, layers=2, heads=4, kv_heads=2,
                     intermediate=768, context=1024, corpus_words=300_000),
    "small": DemoSpec("small", vocab_size=32000, hidden=512, layers=8, heads=8, kv_heads=4,
                      intermediate=1536, context=4096, corpus_words=1_000_000),
}

# (model name suffix, engine, relative path, quant label)
VARIANTS = [
    ("f16", "llama.cpp", "gguf/demo-{size}-f16.gguf", "F16"),
    ("q8_0", "llama.cpp", "gguf/demo-{size}-q8_0.gguf", "Q8_0"),
    ("q4_k_m", "llama.cpp", "gguf/demo-{size}-q4_k_m.gguf", "Q4_K_M"),
    ("mlx-f16", "mlx", "mlx/demo-{size}-f16", "float16"),
    ("mlx-8bit", "mlx", "mlx/demo-{size}-8bit", "8bit"),
    ("mlx-4bit", "mlx", "mlx/demo-{size}-4bit", "4bit"),
]

RMS_EPS = 1e-5
ROPE_THETA = 10000.0
# The demo model emits EOS now and then (its output-head row is scaled up), as real models do,
# so tests can see that generation ignores it.
EOS_HEAD_SCALE = 2.0
# Output-head scale: logits with a clear top-1 margin, so greedy paths are stable.
HEAD_STD = 0.6


def default_dir() -> Path:
    return cache_dir() / "demo"


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


def hf_weights(spec: DemoSpec) -> dict[str, np.ndarray]:
    """Seeded float16 weights under Hugging Face Llama names (the MLX layout)."""
    h, kv = spec.hidden, spec.kv_heads * spec.head_dim

    def normal(name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        return (_rng(name).standard_normal(shape, dtype=np.float32) * std).astype(np.float16)

    w: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": normal("embed", (spec.vocab_size, h), 1.0),
        "model.norm.weight": np.ones(h, np.float16),
    }
    head = normal("head", (spec.vocab_size, h), HEAD_STD)
    head[1] = (head[1].astype(np.float32) * EOS_HEAD_SCALE).astype(np.float16)
    w["lm_head.weight"] = head
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float16)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float16)
        w[p + "self_attn.q_proj.weight"] = normal(p + "q", (h, h), h**-0.5)
        w[p + "self_attn.k_proj.weight"] = normal(p + "k", (kv, h), h**-0.5)
        w[p + "self_attn.v_proj.weight"] = normal(p + "v", (kv, h), h**-0.5)
        w[p + "self_attn.o_proj.weight"] = normal(p + "o", (h, h), 0.5 * h**-0.5)
        w[p + "mlp.gate_proj.weight"] = normal(p + "gate", (spec.intermediate, h), h**-0.5)
        w[p + "mlp.up_proj.weight"] = normal(p + "up", (spec.intermediate, h), h**-0.5)
        w[p + "mlp.down_proj.weight"] = normal(p + "down", (h, spec.intermediate),
                                               0.5 * spec.intermediate**-0.5)
    return w


def parameter_count(spec: DemoSpec) -> int:
    return sum(int(a.size) for a in hf_weights(spec).values())


def hf_config(spec: DemoSpec) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.context,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "hidden_act": "silu",
        "torch_dtype": "float16",
    }


def _tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 20,
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def write_mlx_f16(out: Path, spec: DemoSpec, weights: dict[str, np.ndarray], tok_json: str) -> None:
    from safetensors.numpy import save_file

    out.mkdir(parents=True)
    save_file(dict(sorted(weights.items())), str(out / "model.safetensors"), metadata={"format": "mlx"})
    _write_json(out / "config.json", hf_config(spec))
    (out / "tokenizer.json").write_text(tok_json)
    _write_json(out / "tokenizer_config.json", _tokenizer_config())


def _permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp's convert_hf_to_gguf.py permutes q/k rows: HF stores rotate-half order,
    # GGML's rope expects interleaved pairs. Same model, different layout.
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_gguf_f16(path: Path, spec: DemoSpec, weights: dict[str, np.ndarray], tok_json: str) -> None:
    import gguf

    from macprof.demo.tokenizer import vocab_and_merges

    tokens, merges = vocab_and_merges(tok_json)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"macprof demo {spec.size}")
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.hidden)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.intermediate)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_vocab_size(spec.vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in ("<s>", "</s>") else gguf.TokenType.NORMAL
                       for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    w.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for i in range(spec.layers):
        for hf, gg in GGUF_NAMES.items():
            a = weights[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                a = _permute_qk(a, spec.heads)
            elif hf == "self_attn.k_proj":
                a = _permute_qk(a, spec.kv_heads)
            if a.ndim == 1:  # llama.cpp keeps norms in f32
                a = a.astype(np.float32)
            w.add_tensor(f"blk.{i}.{gg}.weight", a)
    w.add_tensor("output_norm.weight", weights["model.norm.weight"].astype(np.float32))
    w.add_tensor("output.weight", weights["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


GGUF_QUANTS = ("Q8_0", "Q4_K_M", "Q4_0")


def quantize_gguf(src: Path, dst: Path, quant: str, requantize: bool = False) -> None:
    """llama.cpp's quantizer (llama_model_quantize) from ``src`` to ``dst`` as ``quant`` (one of
    GGUF_QUANTS); ``requantize``: ``src`` is quantized already (a draft made from a published
    Q4_1 model, as tests/test_speculative_real.py makes one), which llama.cpp refuses unless told."""
    from macprof.engines import require

    llama_cpp = require("llama.cpp")
    import macprof.engines.llama_cpp  # noqa: F401  (quiets llama.cpp's per-tensor log)
    if quant not in GGUF_QUANTS:
        raise MacprofError(f"{dst}: no GGUF quantization {quant!r} here (one of {', '.join(GGUF_QUANTS)})")
    ftype = {"Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0, "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
             "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}[quant]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = requantize
    params.nthread = os.cpu_count() or 1
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise MacprofError(f"{dst}: llama.cpp quantization to {quant} failed (code {rc})")


def quantize_mlx(src: Path, dst: Path, bits: int) -> None:
    from macprof.engines import require

    require("mlx")
    import contextlib
    import io

    from mlx_lm.convert import convert

    with contextlib.redirect_stdout(io.StringIO()):  # its [INFO] lines are not ours to print
        convert(str(src), str(dst), quantize=True, q_bits=bits, q_group_size=64)


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _manifest_path(root: Path, size: str) -> Path:
    return root / f"demo-{size}.manifest.json"


def is_intact(root: Path, size: str) -> bool:
    """True when a previous build of this recipe is there and every file hashes as recorded."""
    try:
        manifest = json.loads(_manifest_path(root, size).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("build_version") != BUILD_VERSION or not (root / "models.toml").is_file():
        return False
    for rel, digest in manifest.get("files", {}).items():
        p = root / rel
        if not p.is_file() or sha256_file(p) != digest:
            return False
    return bool(manifest.get("files"))


def models_toml(root: Path, sizes: list[str]) -> str:
    lines = ["# Demo models synthesised by `macprof demo` (seeded random weights, locally trained tokenizer).", ""]
    for size in sizes:
        for suffix, engine, rel, quant in VARIANTS:
            lines += ["[[models]]", f'name = "demo-{size}-{suffix}"', f'engine = "{engine}"',
                      f'path = "{rel.format(size=size)}"', f'quant = "{quant}"', ""]
    return "\n".join(lines)


def build(size: str, root: Path | None = None, progress: Callable[[str], None] = lambda s: None) -> Path:
    """Build the six demo models of ``size`` into ``root``; a no-op when already intact."""
    from macprof.demo import tokenizer

    if size not in SPECS:
        raise MacprofError(f"unknown demo size {size!r}: choose one of {', '.join(SPECS)}")
    spec = SPECS[size]
    root = Path(root or default_dir()).expanduser().resolve()
    if is_intact(root, size):
        progress(f"demo-{size} models already built in {root}")
        return root
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Build in a scratch folder beside the target, then move into place: an interrupted
    # build never leaves a half-written model that looks complete.
    with tempfile.TemporaryDirectory(dir=root, prefix=f".build-{size}-") as scratch:
        tmp = Path(scratch)
        progress(f"training the demo-{size} tokenizer (vocabulary {spec.vocab_size})")
        tok_json = tokenizer.train(SEED, spec.vocab_size, spec.corpus_words)
        progress(f"generating seeded weights ({parameter_count(spec) / 1e6:.1f} M parameters)")
        weights = hf_weights(spec)
        paths = {suffix: tmp / rel.format(size=size) for suffix, _, rel, _ in VARIANTS}
        write_mlx_f16(paths["mlx-f16"], spec, weights, tok_json)
        write_gguf_f16(paths["f16"], spec, weights, tok_json)
        del weights
        for suffix, quant in (("q8_0", "Q8_0"), ("q4_k_m", "Q4_K_M")):
            progress(f"quantizing GGUF to {quant} with llama.cpp")
            quantize_gguf(paths["f16"], paths[suffix], quant)
        for suffix, bits in (("mlx-8bit", 8), ("mlx-4bit", 4)):
            progress(f"quantizing MLX to {bits}-bit with mlx-lm")
            quantize_mlx(paths["mlx-f16"], paths[suffix], bits)
        files: dict[str, str] = {}
        for suffix, _, rel, _ in VARIANTS:
            rel_path = rel.format(size=size)
            dst = root / rel_path
            if dst.exists():
                shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(paths[suffix], dst)
            for f in _files(dst):
                files[str(f.relative_to(root))] = sha256_file(f)
    sizes = sorted({p.name.split(".")[0].removeprefix("demo-") for p in root.glob("demo-*.manifest.json")} | {size},
                   key=list(SPECS).index)
    _write_json(_manifest_path(root, size), {"build_version": BUILD_VERSION, "spec": asdict(spec), "files": files})
    (root / "models.toml").write_text(models_toml(root, sizes))
    progress(f"demo-{size} models ready in {root}")
    return root
