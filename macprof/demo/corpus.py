"""A seeded synthetic text corpus for training the demo tokenizer.

The corpus is generated, never read from disk, so the trained tokenizer is bit-identical on
every machine: numpy's PCG64 generator and the arithmetic below are platform independent.
It imitates the statistics a BPE trainer cares about: a Zipf-distributed lexicon of
pronounceable words, capitalised sentences, punctuation, numbers and line breaks.
"""

from __future__ import annotations

import numpy as np

_ONSETS = ["", "b", "br", "c", "ch", "d", "dr", "f", "fl", "g", "gr", "h", "j", "k", "l", "m",
           "n", "p", "pl", "qu", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y"]
_CODAS = ["", "", "", "n", "r", "s", "l", "m", "nd", "st", "ck", "x"]
_PUNCT = [",", ",", ",", ";", ":", " -"]
_ENDS = [".", ".", ".", ".", "?", "!"]


def _syllables(rng: np.random.Generator, count: int) -> list[str]:
    o = rng.integers(0, len(_ONSETS), count)
    v = rng.integers(0, len(_VOWELS), count)
    c = rng.integers(0, len(_CODAS), count)
    return [_ONSETS[a] + _VOWELS[b] + _CODAS[d] for a, b, d in zip(o, v, c)]


def lexicon(seed: int, size: int) -> list[str]:
    """``size`` distinct pseudo-words, most frequent first."""
    rng = np.random.default_rng([seed, 1])
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        lengths = rng.integers(1, 5, 4096)
        sylls = _syllables(rng, int(lengths.sum()))
        pos = 0
        for n in lengths:
            word = "".join(sylls[pos:pos + n])
            pos += n
            if word not in seen:
                seen.add(word)
                words.append(word)
                if len(words) == size:
                    break
    return words


def generate(seed: int, n_words: int, lexicon_size: int = 60000) -> list[str]:
    """Lines of text, about ``n_words`` words in all, deterministic in ``seed``."""
    words = lexicon(seed, lexicon_size)
    rng = np.random.default_rng([seed, 2])
    ranks = np.arange(1, lexicon_size + 1, dtype=np.float64)
    probs = 1.0 / ranks**1.05
    probs /= probs.sum()
    picks = rng.choice(lexicon_size, size=n_words, p=probs)
    sentence_len = rng.integers(4, 22, n_words // 4 + 1)
    extras = rng.random(n_words)
    numbers = rng.integers(0, 100000, n_words)
    lines: list[str] = []
    line: list[str] = []
    sentence: list[str] = []
    s_idx = 0
    for i, pick in enumerate(picks):
        word = words[pick]
        if not sentence:
            word = word.capitalize()
        if extras[i] < 0.02:
            word = str(numbers[i])
        elif extras[i] < 0.07:
            word += _PUNCT[numbers[i] % len(_PUNCT)]
        sentence.append(word)
        if len(sentence) >= sentence_len[s_idx]:
            line.append(" ".join(sentence) + _ENDS[numbers[i] % len(_ENDS)])
            sentence = []
            s_idx += 1
            if extras[i] < 0.35:
                lines.append(" ".join(line))
                line = []
    if sentence:
        line.append(" ".join(sentence) + ".")
    if line:
        lines.append(" ".join(line))
    return lines
