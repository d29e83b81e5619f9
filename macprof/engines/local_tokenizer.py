"""The tokenizer of a served model, loaded here from its file, when macprof knows the file (a
server ``--serve`` started, or a models.toml endpoint with ``path``): prompts of an exact token
count, built as for an in-process engine (macprof/run/prompts.py). The server tokenizes the
same text with the same vocabulary (raw completions, BOS added as here); the count it reports
is recorded beside and checked against the one asked for (a differing count is flagged).

A GGUF file's vocabulary only (``vocab_only``: no weights), or an MLX directory's tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(path: Path) -> Any:
    """An object with ``tokenize``, ``detokenize`` and ``vocab_size``, or None where the file
    is not one macprof reads (the server's word prompts then stand)."""
    path = Path(path)
    if path.is_dir() and (path / "config.json").is_file():
        from macprof.engines.mlx import MlxEngine
        from macprof.files.modelconfig import json_object

        mlx = MlxEngine()
        mlx._path, mlx.config = path, json_object(path / "config.json")
        mlx.load_tokenizer()
        return mlx
    if path.is_file() and path.suffix.lower() == ".gguf":
        from macprof.engines.llama_cpp import LlamaCppEngine, lc

        lc.llama_backend_init()
        params = lc.llama_model_default_params()
        params.vocab_only = True
        model = lc.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            return None
        eng = LlamaCppEngine()
        eng.model, eng.vocab = model, lc.llama_model_get_vocab(model)
        return eng
    return None


def eos_ids(tok: Any) -> list[int]:
    """The ids that end a generation by this tokenizer (EOS, EOT and the like): what a
    ``logit_bias`` must hold off so that a server without ``ignore_eos`` reaches the asked length."""
    mlx_tok = getattr(tok, "tokenizer", None)
    if mlx_tok is not None and hasattr(mlx_tok, "eos_token_ids"):  # mlx-lm's TokenizerWrapper
        return sorted(int(i) for i in mlx_tok.eos_token_ids)
    vocab = getattr(tok, "vocab", None)
    if vocab is not None:  # a GGUF's vocabulary: every end-of-generation token it declares
        from macprof.engines.llama_cpp import lc

        return [i for i in range(int(lc.llama_vocab_n_tokens(vocab))) if lc.llama_vocab_is_eog(vocab, i)]
    return []
