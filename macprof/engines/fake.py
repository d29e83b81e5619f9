"""A deterministic fake engine for the fast test tier: the whole run path (workers, journal,
phases, run log, reports) exercised in seconds, with no inference library loaded.

Its model file is an ordinary GGUF (``write_model`` writes a tiny one), so macprof inspects,
hashes, caches and refuses it exactly as it does a real model; the engine reads its vocabulary
size and KV shape from that header (and refuses a GGUF without them). Its "logits" are a pure
function of the token ids: a 64-bit state folded over the context one token at a time, the
next token read off the state (EOS one time in 16, which generation must go past). So a cached
prefix and a recomputed one give the same tokens exactly, batched decoding equals one
sequence at a time, and no output is ever a near-tie. Sampled decoding draws from the same
logits ``score`` gives, by a generator seeded with the call's seed: reproducible, as a real
engine's is on the same build. It never sleeps: its speed is whatever
Python manages, and no test may assert one.

Its cache can be told (``write_model(cache=...)``, a header key) to refuse cuts the way real
ones do, for the orchestration tests: ``window:N``, like a sliding-window layer (MLX's
RotatingKVCache, llama.cpp's SWA cache), cannot be cut back once it has held more than N tokens;
``recurrent``, like a recurrent state (MLX's ArraysCache, llama.cpp's recurrent memory), can
only be extended or emptied.

A model written with ``write_model(chat_template=...)`` carries that template in its header
(``tokenizer.chat_template``, as a real GGUF does), for the tests of what a template does to a
phase (one that hangs, raises, or builds too much); the demo models carry none.

Vocabulary: 0 is BOS (added by ``tokenize``), 1 is EOS (never stops generation), 2..257 are the
256 byte values (so any text round-trips), and every id from 258 is a space plus a fixed-length
lowercase word (the words ``PromptBuilder`` builds prompts from).
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

from macprof.engines.base import CacheCutRefused, ChatTemplate, EngineSettings, Later, PrefixReuse, TopTwo
from macprof.engines.capabilities import IN_PROCESS, NativeReport
from macprof.errors import MacprofError

ARCH = "macprof-fake"
TEMPLATE_KEY = "tokenizer.chat_template"
BOS, EOS = 0, 1
_BYTE0 = 2  # ids 2..257: the byte values
_WORD0 = _BYTE0 + 256  # ids from here: " " + a word of _word_len(vocab) letters
_MASK = (1 << 64) - 1
_SEED = 0x6D616370726F66  # "macprof"


def _mix(state: int, token: int) -> int:
    """splitmix64 of the state and the next token: the state after one more token."""
    x = (state + (token + 1) * 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _word_len(vocab: int) -> int:
    n = 2  # at least two letters: PromptBuilder wants words of 3+ characters with the space
    while 26 ** n < vocab - _WORD0:
        n += 1
    return n


class FakeEngine(PrefixReuse):
    name = "fake"
    kind: Literal["in_process"] = "in_process"
    separate_tokenizer = False  # the vocabulary comes with the model file
    capabilities: dict[str, str | None] = IN_PROCESS
    weights_held: str | None = "mapped"  # as llama.cpp's default: the file mapped and every page touched

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._template: Any = None
        self.vocab = 0
        self.n_ctx = 0
        self.kv_bytes_per_token = 0
        self._letters = 2
        self._word_re: re.Pattern[str] = re.compile("")
        self._history: list[int] = []  # ids fed so far; the cache holds the first len(_states)
        self._states: list[int] = []  # the state after each cached token: the fake's KV cache
        self._reused = 0
        self._refused: str | None = None
        self.cache_kind = "full"  # or "window:N" / "recurrent" (the header's macprof-fake.cache)
        self._batch = (0, 0)  # (sequences, tokens per sequence) of the open batch
        self._native: tuple[Any, int] | None = None  # (draft engine or None: n-gram lookup, n-gram size)
        self._report = NativeReport(impl="fake", unknown="no native request yet")
        self.threads: int | None = None

    # -- loading -------------------------------------------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        meta = read_header(Path(path))
        self.vocab, self.n_ctx = meta["vocab_size"], settings.n_ctx
        self.threads = settings.threads
        self.kv_bytes_per_token = 2 * meta["block_count"] * meta["head_count_kv"] * meta["head_dim"] * 2  # K, V in f16
        self.cache_kind = str(meta.get("cache") or "full")
        self._template = meta.get("chat_template")
        self._letters = _word_len(self.vocab)
        self._word_re = re.compile(rf" [a-z]{{{self._letters}}}(?![a-z])")
        # a real load reads every weight; llama.cpp's maps the file and keeps the mapping: so does
        # this one, one byte read a page so every page is resident and mapped (as the footprint
        # and RSS figures of a mapped model are on a real engine)
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._map[::mmap.PAGESIZE]

    def load_tokenizer(self) -> None:
        """The vocabulary is computed from the header's size: nothing to load."""

    # -- tokens --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        ids, pos = [BOS], 0
        for m in self._word_re.finditer(text):
            ids += _bytes(text[pos:m.start()])
            word = self._word_id(m.group()[1:])
            ids += [word] if word is not None else _bytes(m.group())
            pos = m.end()
        return ids + _bytes(text[pos:])

    def _word_id(self, letters: str) -> int | None:
        n = 0
        for c in letters:
            n = n * 26 + ord(c) - ord("a")
        return _WORD0 + n if _WORD0 + n < self.vocab else None

    def detokenize(self, ids: Sequence[int]) -> str:
        out = bytearray()
        for t in ids:
            if _BYTE0 <= t < _WORD0:
                out.append(t - _BYTE0)
            elif t >= _WORD0:
                n, letters = t - _WORD0, []
                for _ in range(self._letters):
                    n, r = divmod(n, 26)
                    letters.append(chr(ord("a") + r))
                out += (" " + "".join(reversed(letters))).encode()
        return out.decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return self.vocab

    @property
    def eos_ids(self) -> set[int]:
        return {EOS}

    def tokenize_chat(self, text: str) -> list[int]:
        return self.tokenize(text)  # no special tokens beyond BOS, which tokenize adds

    def chat_template(self) -> ChatTemplate | None:
        # the demo models' and this one's vocabulary has no chat markup: a template only where one was written
        return ChatTemplate(f"GGUF {TEMPLATE_KEY}", self._template) if isinstance(self._template, str) else None

    # -- cache ---------------------------------------------------------------------------
    def reset(self) -> None:
        self._history, self._states = [], []

    def truncate(self, n_tokens: int) -> None:
        refusal = self.cut_refusal(n_tokens)
        if refusal:
            raise CacheCutRefused(refusal)
        del self._states[n_tokens:]
        del self._history[n_tokens:]

    def cached_tokens(self) -> int:
        return len(self._states)

    def cut_refusal(self, n_tokens: int) -> str | None:
        held = len(self._states)
        if n_tokens >= held or n_tokens == 0:  # extending or emptying: any cache can
            return None
        if self.cache_kind == "recurrent" and n_tokens > 0:
            return f"recurrent state (fake engine): it holds {held} tokens and cannot be rewound to {n_tokens}"
        window = int(self.cache_kind.partition(":")[2] or 0) if self.cache_kind.startswith("window:") else 0
        if window and held > window:
            return (f"sliding-window cache of {window} tokens (fake engine): it has held {held}, "
                    f"the tokens before its window are gone")
        return None

    def _next(self, state: int) -> int:
        # EOS one time in 16, as the demo models' head favours it: generation must go on past it
        return EOS if (state >> 32) % 16 == 0 else state % self.vocab

    def prefill(self, ids: Sequence[int]) -> None:
        held = len(self._states)
        self._history = self._history[:held] + list(ids)
        _feed(self._states, ids, self.n_ctx)

    # -- generation ----------------------------------------------------------------------
    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        return self._loop(ids, n, self._next)

    def propose(self, ids: Sequence[int], n: int) -> list[int]:
        """Computed token by token: nothing to read back together."""
        return list(self.generate(ids, n))

    def generate_sampled(self, ids: Sequence[int], n: int, temperature: float, seed: int) -> Iterator[int]:
        """Each token drawn from softmax(logits / temperature) of the logits ``score`` gives
        (noise seeded by the state, the greedy token 8 above), by a numpy generator seeded with
        ``seed``: a pure function of (ids, temperature, seed), as a real engine's is of its build."""
        import numpy as np

        rng = np.random.default_rng(seed)

        def pick(state: int) -> int:
            z = self._logits(state).astype(np.float64) / temperature
            p = np.exp(z - z.max())
            return int(rng.choice(self.vocab, p=p / p.sum()))

        return self._loop(ids, n, pick)

    def _loop(self, ids: Sequence[int], n: int, pick: Callable[[int], int]) -> Iterator[int]:
        """The decoding loop of generate and generate_sampled: the cache cut to what it shares with
        ``ids``, the rest fed, then n tokens, each ``pick`` of the last state."""
        keep = self._reused = self._keep_for(self._history, ids)  # 0 where refused: measured without reuse
        del self._states[keep:]
        self._history = history = list(ids)
        if n <= 0:
            return
        _feed(self._states, ids[keep:], self.n_ctx)
        for i in range(n):
            token = pick(self._states[-1])
            history.append(token)
            yield token
            if i + 1 < n:
                _feed(self._states, [token], self.n_ctx)

    def _logits(self, state: int):
        import numpy as np

        out = np.random.default_rng(state).standard_normal(self.vocab, dtype=np.float32)
        out[self._next(state)] += 8.0
        return out

    def verify(self, ids: Sequence[int], drafts: Sequence[int] = ()) -> Later:
        """Fed when the verdict is read, as the llama.cpp engine's (it computes synchronously)."""
        def run() -> list[int]:
            fed = [*ids, *drafts]
            held = len(self._states)
            self._history = self._history[:held] + fed
            _feed(self._states, fed, self.n_ctx)
            return [self._next(state) for state in self._states[held:]]

        return Later(run)

    # -- "its own" speculative decoding, for the fast tier's tests of the phase's native path ----
    def native_refusal(self, draft: Any) -> str | None:
        if draft is not None and not isinstance(draft, FakeEngine):
            return f"the fake engine's own speculative decoding drafts with a fake model, not a {draft.name} one"
        return None

    def open_native(self, draft: Any, ngram: int) -> None:
        why = self.native_refusal(draft)
        if why:
            raise MacprofError(why)
        self._native = (draft, ngram)

    def native_generate(self, ids: Sequence[int], n: int, k: int) -> Iterator[int]:
        """A plain speculative loop of its own, shaped and reporting as the real engines': as
        mlx-lm's, every round drafts (the first from the prompt on) and ends with one target
        token, at most k drafted and no more than the tokens left; with a draft model it tells
        per-token flags only (mlx-lm's from_draft), with n-gram lookup every round's drafted and
        accepted counts too (as the llama.cpp adapter records them)."""
        from macprof.measure.speculative import accepted_prefix, ngram_draft

        if self._native is None:
            raise MacprofError("native_generate before open_native")
        draft, ngram = self._native
        self.reset()
        if draft is not None:
            draft.reset()
        out: list[int] = []
        flags: list[bool] = []
        drafted: list[int] = []
        accepted: list[int] = []
        while len(out) < n:
            history = list(ids) + out
            budget = min(k, n - len(out))
            proposal = (list(draft.generate(history, budget)) if draft is not None else ngram_draft(history, ngram, budget))
            fed = list(ids) if not out else [out[-1]]
            held = self.cached_tokens()
            choices = self.verify(fed, proposal)[len(fed) - 1:]
            a = accepted_prefix(proposal, choices)
            drafted.append(len(proposal))
            accepted.append(a)
            self.truncate(held + len(fed) + a)
            if draft is not None:
                draft.truncate(len(history) + a)
            for j, token in enumerate([*proposal[:a], choices[a]][:n - len(out)]):
                out.append(token)
                flags.append(j < a)
                yield token
        if draft is not None:
            self._report = NativeReport(impl=f"fake draft-model loop (k={k})", from_draft=tuple(flags),
                                        unknown="as mlx-lm, it tells per token whether it was a draft, not what it drafted")
        else:
            self._report = NativeReport(impl=f"fake prompt lookup (ngram={ngram}, k={k})", from_draft=tuple(flags),
                                        drafted=tuple(drafted), accepted=tuple(accepted))

    def native_report(self) -> NativeReport:
        return self._report

    # -- batched generation ----------------------------------------------------------------
    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        self._batch = (size, tokens_per_seq)

    def close_batch(self) -> None:
        self._batch = (0, 0)

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        size, per_seq = self._batch
        if len(prompts) > size:
            raise MacprofError(f"{len(prompts)} sequences for a batch opened for {size}")
        caches: list[list[int]] = [[] for _ in prompts]
        for cache, ids in zip(caches, prompts):
            _feed(cache, ids, per_seq)
        for step in range(n):
            tokens = [self._next(cache[-1]) for cache in caches]
            yield tokens
            if step + 1 < n:
                for cache, token in zip(caches, tokens):
                    _feed(cache, [token], per_seq)

    def top2(self, ids: Sequence[int]) -> TopTwo:
        """The generated token first; a distinct runner-up at least 1.0 below: never a near-tie."""
        self.reset()
        states: list[int] = []
        _feed(states, ids, max(self.n_ctx, len(ids)))
        state = states[-1]
        first = self._next(state)
        logit = 8.0 + (state >> 40 & 0xFF) / 256
        return TopTwo(first, logit, (first + 1) % self.vocab, logit - 1.0 - (state >> 48 & 0xFF) / 256)

    def score(self, ids: Sequence[int]):
        """Logits for every position, a pure function of the context like its tokens: noise
        seeded by the state after each token, with the token ``generate`` would pick 8 above."""
        import numpy as np

        states: list[int] = []
        _feed(states, ids, max(self.n_ctx, len(ids)))
        out = np.empty((len(ids), self.vocab), dtype=np.float32)
        for i, state in enumerate(states):
            out[i] = self._logits(state)
        return out

    # -- memory and facts ----------------------------------------------------------------
    def kv_cache_bytes(self) -> int | None:
        """What a real cache of this shape would hold for the cached tokens."""
        return len(self._states) * self.kv_bytes_per_token

    def memory(self) -> dict:
        return {}

    def reset_peak_memory(self) -> None:
        """No engine-side memory counters: process RSS covers it."""

    def versions(self) -> dict:
        from macprof import __version__

        return {"fake": __version__}

    def resolved_settings(self) -> dict:
        """As a real engine reports them, for the orchestration tests: the context it holds, its
        threads (the fake computes in one, whatever was asked) and its K/V type."""
        from macprof.model.resolved import Resolved, as_passed

        return {"n_ctx": as_passed(self.n_ctx, "the context the worker asked for"),
                "n_threads": Resolved(asked=self.threads, value=1, source="the fake engine computes in Python, one thread"),
                "type_k": as_passed("f16", "the fake's K/V size assumes f16"),
                "type_v": as_passed("f16", "the fake's K/V size assumes f16")}

    def close(self) -> None:
        self.close_batch()
        self.reset()
        if self._map is not None:
            self._map.close()
            self._map = None


def _bytes(text: str) -> list[int]:
    return [_BYTE0 + b for b in text.encode("utf-8")]


def _feed(states: list[int], ids: Sequence[int], capacity: int) -> None:
    """Append the state after each of ``ids``; like llama_decode, fail when the context is full."""
    if len(states) + len(ids) > capacity:
        raise MacprofError(f"fake engine: {len(states)} + {len(ids)} tokens exceed the context of {capacity}")
    state = states[-1] if states else _SEED
    for t in ids:
        state = _mix(state, int(t))
        states.append(state)


# -- the model file ----------------------------------------------------------------------------
_KEYS = ("vocab_size", "context_length", "block_count", "head_count_kv", "head_dim")


def read_header(path: Path) -> dict[str, Any]:
    """The few numbers the fake engine needs, from a GGUF header (``write_model``'s keys), read
    by macprof's own header reader without the tensor list: a fake worker then imports neither
    gguf nor numpy, and starts in a fraction of the time."""
    from macprof.files import ggufheader

    h = ggufheader.read_header(path, lambda key: key.startswith(f"{ARCH}.") or key == TEMPLATE_KEY, tensors=False)

    def field(key: str) -> Any:
        v = h.kv.get(f"{ARCH}.{key}")
        return None if v is None else v.value

    meta = {"cache": field("cache"), "vocab_size": field("vocab_size"), "context_length": field("context_length"),
            "block_count": field("block_count"), "head_count_kv": field("attention.head_count_kv"),
            "head_dim": field("attention.key_length"),
            "chat_template": h.kv[TEMPLATE_KEY].value if TEMPLATE_KEY in h.kv else None}
    missing = [k for k in _KEYS if not isinstance(meta[k], int)]
    if missing:
        raise MacprofError(f"{path}: not a fake-engine model (no {ARCH}.{missing[0]} in the GGUF header)")
    if meta["vocab_size"] < _WORD0 + 16:
        raise MacprofError(f"{path}: vocabulary of {meta['vocab_size']} ids; the fake engine needs at least {_WORD0 + 16}")
    return meta


def write_model(path: Path, vocab_size: int = 4096, context_length: int = 1024, layers: int = 2, hidden: int = 32,
                heads: int = 2, kv_heads: int = 2, ffn: int = 64, cache: str = "full",
                chat_template: str | None = None) -> Path:
    """A tiny GGUF the fake engine (and macprof's inspector) reads: llama-shaped f16 tensors of
    zeros, so its shape, bytes and roofline figures are those of a real model of this size.
    ``cache``: "full", "window:N" or "recurrent" (see the module's docstring); ``chat_template``:
    its ``tokenizer.chat_template``."""
    import gguf
    import numpy as np

    head_dim = hidden // heads
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_vocab_size(vocab_size)
    if cache != "full":
        if cache != "recurrent" and not (cache.startswith("window:") and cache[7:].isdigit()):
            raise MacprofError(f"fake model cache {cache!r}: expected full, window:N or recurrent")
        w.add_string(f"{ARCH}.cache", cache)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.add_context_length(context_length)
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    shapes = {"token_embd.weight": (vocab_size, hidden), "output_norm.weight": (hidden,),
              "output.weight": (vocab_size, hidden)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.attn_q.weight": (hidden, hidden),
                   f"blk.{i}.attn_k.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_v.weight": (kv_heads * head_dim, hidden),
                   f"blk.{i}.attn_output.weight": (hidden, hidden), f"blk.{i}.ffn_norm.weight": (hidden,),
                   f"blk.{i}.ffn_gate.weight": (ffn, hidden), f"blk.{i}.ffn_up.weight": (ffn, hidden),
                   f"blk.{i}.ffn_down.weight": (hidden, ffn)}
    for name, shape in shapes.items():
        w.add_tensor(name, np.zeros(shape, dtype=np.float32 if len(shape) == 1 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


ENGINE = FakeEngine
