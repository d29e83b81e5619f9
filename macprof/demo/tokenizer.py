"""Train the demo models' byte-level BPE tokenizer on the seeded corpus.

Byte-level BPE with the GPT-2 pre-tokenizer regex: llama.cpp reads the same vocabulary and
merges from GGUF (``tokenizer.ggml.model = gpt2``, ``pre = gpt-2``), and mlx-lm / transformers
read ``tokenizer.json``, so both engines turn a text into the same ids.
"""

from __future__ import annotations

import json

from macprof.demo import corpus

BOS = "<s>"
EOS = "</s>"
SPECIAL_TOKENS = [BOS, EOS]  # ids 0 and 1


def train(seed: int, vocab_size: int, n_words: int) -> str:
    """Return the trained tokenizer as ``tokenizer.json`` text (deterministic in its inputs)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.generate(seed, n_words), trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"demo corpus too small: trained {tok.get_vocab_size()} of {vocab_size} tokens")
    # Canonical text: sorted keys so the file is byte-identical everywhere.
    return json.dumps(json.loads(tok.to_str()), sort_keys=True, ensure_ascii=False, indent=1)


def vocab_and_merges(tokenizer_json: str) -> tuple[list[str], list[str]]:
    """Tokens in id order and merges as "a b" strings, as GGUF stores them."""
    data = json.loads(tokenizer_json)
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges
