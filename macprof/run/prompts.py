"""Deterministic prompts of an exact token count, built from the model's own vocabulary.

A prompt is text (so that tokenization is timed, as docs/design.md's t0 requires) made of
whole-word tokens: vocabulary entries that are a space plus letters and that the model's
tokenizer turns back into exactly that one id. Pre-tokenizers split at spaces, so such
words concatenate without merging, and the count is exact; every prompt is verified by
tokenizing it, and a prompt that does not come out at the requested length is an error,
never silently accepted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from macprof.errors import MacprofError

if TYPE_CHECKING:
    from macprof.engines.base import AnyEngine

_SCAN = 6000  # vocabulary ids examined for word tokens (seeded sample)


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: tuple[int, ...]
    # a rendered chat prompt: its special-token texts read as those tokens (the engine's tokenize_chat),
    # as the request's own tokenization must read them
    chat: bool = False
    # a conversation's messages, sent as they are to a server that applies its own template (--api chat)
    messages: tuple[dict, ...] | None = None


class PromptBuilder:
    def __init__(self, engine: AnyEngine, seed: int = 0) -> None:
        self.engine = engine
        self.seed = seed
        self.lead = engine.tokenize("")  # what the tokenizer adds on its own (BOS)
        self.words = self._word_tokens()

    def _word_tokens(self) -> list[str]:
        # a server's tokenizer answers over HTTP: it offers the ids of a sample text to pick the
        # words from, and how many are enough (engines/openai.py), instead of a vocabulary scan
        offered = self.engine.prompt_candidates() if self.engine.kind == "server" else None
        enough = self.engine.prompt_words if self.engine.kind == "server" and offered is not None else None
        if offered is None:
            vocab = self.engine.vocab_size
            rng = random.Random(f"{self.seed}:scan")
            offered = rng.sample(range(vocab), min(_SCAN, vocab))
        lead = list(self.lead)
        words = []
        for i in offered:
            piece = self.engine.detokenize([i])
            if len(piece) >= 3 and piece[0] == " " and piece[1:].isascii() and piece[1:].isalpha() \
                    and self.engine.tokenize(piece) == lead + [i]:
                words.append(piece)
                if enough and len(words) >= enough:
                    break
        if len(words) < 16:
            raise MacprofError(f"the model's vocabulary gave only {len(words)} single-token words to build prompts from")
        return sorted(words)

    def _text(self, key: str, n_words: int) -> str:
        rng = random.Random(f"{self.seed}:{key}")
        return "".join(rng.choice(self.words) for _ in range(n_words))

    def words_text(self, key: str, n_words: int) -> str:
        """Seeded text of ``n_words`` single-token words, without its leading space (a chat
        message's content: a template puts its own separator before it)."""
        return self._text(key, n_words)[1:]

    def prompt(self, key: str, n_tokens: int) -> Prompt:
        """A prompt of exactly ``n_tokens`` tokens (BOS included where the model adds one)."""
        return self.prefixed(None, key, n_tokens)

    def prefixed(self, prefix: Prompt | None, key: str, n_tokens: int) -> Prompt:
        """``prefix`` + a distinct suffix, ``n_tokens`` in all, whose ids start with the
        prefix's ids (checked)."""
        head = prefix.text if prefix else ""
        base = len(prefix.ids) if prefix else len(self.lead)
        need = n_tokens - base
        if need < (1 if prefix else 0):
            raise MacprofError(f"a prompt of {n_tokens} tokens cannot hold its {base}-token start plus at least one token")
        for attempt in range(8):
            text = head + self._text(f"{key}:{attempt}", need)
            ids = tuple(self.engine.tokenize(text))
            if len(ids) == n_tokens and (prefix is None or ids[: len(prefix.ids)] == prefix.ids):
                return Prompt(text, ids)
        raise MacprofError(f"could not build a prompt of exactly {n_tokens} tokens from this tokenizer")
