"""The one narrow protocol every engine adapter follows.

Engines never time themselves: ``generate`` yields token ids as soon as each is available
(materialised), and the caller takes the timestamps. Generation is greedy (``generate_sampled``
draws at a temperature instead: the tasks phase's sampled retries) and ignores EOS: an EOS id
is just another token and generation goes on, so every request yields exactly ``n`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

from macprof.errors import MacprofError


@dataclass(frozen=True)
class EngineSettings:
    n_ctx: int = 4096  # context the engine must hold (prompt + generated + margin)
    threads: int | None = None  # None: the engine's own default
    kv_type: str = "f16"  # K/V cache type (f16, q8_0, q4_0)
    endpoint: dict | None = None  # the openai engine's server: url, model, api, timeout (engines/openai.py)


@dataclass(frozen=True)
class TopTwo:
    """The two highest logits after a token sequence (for near-tie diagnosis)."""

    first_id: int
    first_logit: float
    second_id: int
    second_logit: float

    @property
    def margin(self) -> float:
        return self.first_logit - self.second_logit


class Later(Sequence[int]):
    """Token ids an engine has queued but not read back: reading them (iterating, ``len``,
    indexing) waits for them, once, and keeps them. ``handle`` is the engine's own lazy object,
    for another call of that engine's kind to build on without waiting (MLX: the draft's
    async_eval'd array, on which the target's verify is queued before the drafts are read, as
    mlx-lm's speculative step queues it); None where there is nothing to build on."""

    def __init__(self, read: Callable[[], Sequence[int]], handle: Any = None) -> None:
        self._read: Callable[[], Sequence[int]] | None = read
        self._tokens: list[int] = []
        self.handle = handle

    def tokens(self) -> list[int]:
        if self._read is not None:
            read, self._read = self._read, None
            self._tokens = [int(t) for t in read()]
        return self._tokens

    def __iter__(self) -> Iterator[int]:
        return iter(self.tokens())

    def __len__(self) -> int:
        return len(self.tokens())

    def __getitem__(self, i):  # type: ignore[override]  # a list's indexing and slicing
        return self.tokens()[i]


# How an engine holds the weights once loaded: "mapped" (the model file mapped, its pages the
# OS page cache's: llama.cpp's default use_mmap; macOS's physical footprint does not count such
# clean file-backed pages, so the headline adds their resident bytes, analyse/headline.py),
# "copied" (read into the engine's own buffers: MLX, counted by the footprint), or None where
# another process holds them (a server).
WEIGHTS_HELD = ("mapped", "copied")

# What an engine can do beyond the core protocol. Every engine declares each one in its
# ``capabilities``: None where it can, else the reason it cannot, which the phase that needs
# it records as its refusal (never imitating the capability). Phases ask ``lacks``, never an
# engine's name or ``hasattr``.
CAPABILITIES = {
    "score": "the logits of every position of a sequence, in one forward pass (the quality phase)",
    "stream": "requests streamed to a server, chunk by chunk, with the server's own counts (every phase "
              "against a server; the concurrency phase needs one)",
    "batch": "B sequences decoded together, one weight read per step (the batch phase)",
    "cache_cut": "the KV cache cut back to a prefix (prefix reuse, depth cases); cut_refusal says when one cut "
                 "cannot be made",
    "top2": "the two best next tokens after a sequence (the output checks' near-tie diagnosis)",
    "sample": "sampled decoding at a temperature from a seed (the tasks phase's --temperature retries: "
              "generate_sampled, or a server's chat with the OpenAI temperature and seed); generation is greedy "
              "everywhere else",
    "verify": "tokens appended to the cache and the greedy choice after every one, in one forward pass (the "
              "speculative phase's verification; truncate rewinds it)",
    "native_draft": "the engine's own speculative decoding (mlx-lm's stream_generate with a draft model, "
                    "llama-cpp-python's prompt lookup), measured beside macprof's loop (--speculative-impl); "
                    "native_refusal says which drafts it takes",
}
CAPABILITIES["prefill"] = ("token ids computed into the cache with no token generated, returning once computed, "
                           "and generation from ids given as such (the bench phase: llama-bench's pp and tg tests)")
CAPABILITIES["chat"] = ("a chat completion sent as messages, with the OpenAI tools field, the server applying its "
                        "model's template (the tasks phase through a server)")
# what an in-process engine says of "chat": the tasks phase renders the model's template itself
RENDERS_ITSELF = "in-process: the tasks phase renders the model's own chat template and generates token by token"


# a chat template read from a file (--chat-template, an MLX directory's chat_template.jinja): real
# ones are a few KB to a few tens of KB (tool-calling templates); anything this large is not one
MAX_TEMPLATE_BYTES = 1 << 20


@dataclass(frozen=True)
class ChatTemplate:
    """A model's own chat template (the tasks phase renders prompts through it, run/chat.py):
    the Jinja source, the BOS and EOS token texts it may name, and where it came from."""

    source: str  # "GGUF tokenizer.chat_template", "tokenizer_config.json chat_template", ...
    text: str
    bos_token: str = ""
    eos_token: str = ""

# what an in-process engine says of "stream"
IN_PROCESS = "concurrent requests are measured against a server (engine openai)"


def lacks(engine, capability: str) -> str | None:
    """Why ``engine`` cannot do ``capability`` (a key of CAPABILITIES), or None when it can."""
    if capability not in CAPABILITIES:
        raise KeyError(f"no capability {capability!r} (known: {', '.join(CAPABILITIES)})")
    return engine.capabilities[capability]


@dataclass(frozen=True)
class NativeReport:
    """What an engine's own speculative decoding told of its last request (``native_generate``),
    as far as it tells it; None where it does not, with the reason in ``unknown``. Never timed:
    the request's token stamps are the caller's, as for every generate."""

    impl: str  # the call, as the engine's library names it: "mlx_lm.stream_generate(draft_model=..., ...)"
    from_draft: tuple[bool, ...] | None = None  # per emitted token: an accepted draft token
    drafted: tuple[int, ...] | None = None  # per round: tokens drafted
    accepted: tuple[int, ...] | None = None  # per round: drafted tokens accepted
    unknown: str | None = None  # why a figure above is None


class Engine(Protocol):
    name: str
    weights_held: str | None  # one of WEIGHTS_HELD, or None (another process holds the weights); set by load_model
    separate_tokenizer: bool  # whether the tokenizer loads apart from the model (cold start's split)
    capabilities: dict[str, str | None]  # every key of CAPABILITIES: None, or why not (see ``lacks``)

    def load_model(self, path: Path, settings: EngineSettings) -> None:
        """Read, allocate and materialise the weights (no tokenizer)."""

    def load_tokenizer(self) -> None:
        """Make ``tokenize``/``detokenize`` ready (a no-op where the model carries it)."""

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def tokenize_chat(self, text: str) -> list[int]:
        """The ids of a rendered chat prompt: its special tokens (<|im_start|>) read as such, and
        BOS added only where the model adds one and the text does not already start with it."""

    @property
    def eos_ids(self) -> set[int]:
        """The ids that end a reply (EOS, EOT and the like): the tasks phase stops at one."""

    def chat_template(self) -> ChatTemplate | None:
        """The model's own chat template, or None where it has none."""

    @property
    def vocab_size(self) -> int: ...

    def reset(self) -> None:
        """Empty the KV / prompt cache (and an open batch's): the next request shares nothing
        with earlier ones."""

    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        """Greedy-decode ``n`` tokens after ``ids``, reusing the longest prefix of ``ids``
        already in the cache; ``reused_tokens`` says how many, once the first token is out."""

    def propose(self, ids: Sequence[int], n: int) -> Sequence[int]:
        """The speculative loop's draft step: the ``n`` tokens ``generate(ids, n)`` yields, the
        cache left as it leaves it, read back together. An engine that computes asynchronously
        queues every step without reading each token back and returns them as a ``Later`` whose
        handle a target of its kind can verify on before they are read (MLX: one synchronisation
        per round, as mlx-lm's own draft, where streaming waits on each token); one that cannot
        returns ``list(generate(ids, n))``. The proposal is read before the engine is used again."""

    def generate_sampled(self, ids: Sequence[int], n: int, temperature: float, seed: int) -> Iterator[int]:
        """Capability "sample": as ``generate`` (the cached prefix reused, ``n`` tokens, EOS
        not special), each token drawn from softmax(logits / ``temperature``) by the engine's
        own sampler, whose generator is seeded with ``seed`` when the call starts: the same
        ids, temperature and seed give the same tokens on the same engine build."""

    @property
    def reused_tokens(self) -> int: ...

    def cached_tokens(self) -> int:
        """How many tokens the KV cache holds now."""

    def truncate(self, n_tokens: int) -> None:
        """Keep the cache's first ``n_tokens`` and drop the rest (a depth case's fill is
        restored this way before each request); raises CacheCutRefused, the cache untouched,
        where ``cut_refusal(n_tokens)`` gives a reason."""

    def cut_refusal(self, n_tokens: int) -> str | None:
        """Why the cache, as it is now, cannot be cut back to its first ``n_tokens``: a
        sliding-window layer has dropped tokens the cut would need again, a recurrent state
        cannot be rewound. None: it can (or it holds no more than that)."""

    @property
    def reuse_refused(self) -> str | None:
        """Why the last ``generate`` started from an empty cache though it shared a prefix with
        what the cache held (``cut_refusal`` of that prefix); None when it kept what it could.
        ``reused_tokens`` is then 0: a recomputed prefix is never reported as reused."""

    # Batched decoding (capability "batch"): B sequences decoded together, one weight read per step for all.
    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        """Make room for ``size`` sequences of ``tokens_per_seq`` tokens (untimed)."""

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        """Greedy-decode ``n`` tokens for every prompt together, from an empty batch cache
        (``reset`` empties it); yields one list per step: that step's token of each
        sequence, in prompt order."""

    def close_batch(self) -> None: ...

    def top2(self, ids: Sequence[int]) -> TopTwo:
        """Untimed diagnosis (capability "top2"): the two best next tokens after ``ids`` (the
        cache is emptied)."""

    def score(self, ids: Sequence[int]) -> Any:
        """Capability "score": the model's logits at every position of ``ids``, one forward
        pass from an empty cache, as float32 [len(ids), vocab_size] (a numpy array). The cache
        is emptied after it."""

    def verify(self, ids: Sequence[int], drafts: Sequence[int] = ()) -> Later:
        """Capability "verify": append ``ids`` then ``drafts`` to what the cache holds (the
        history is then exactly the cache's tokens) and give the greedy choice after each
        appended position, ``len(ids) + len(drafts)`` of them, from one forward pass;
        ``truncate`` cuts the rejected ones off. The pass runs when the returned ``Later`` is
        read, not before: the speculative loop stamps the drafts' end between the two. Only
        where ``drafts`` is a ``Later`` of the engine's own kind is the pass queued at once, on
        the still unread drafts (so its graph is built while the draft computes, as mlx-lm's
        speculative step does); it is still waited for only when read."""

    # The engine's own speculative decoding (capability "native_draft").
    def native_refusal(self, draft: Any) -> str | None:
        """Why the engine's own speculative decoding cannot draft with ``draft`` (a loaded engine, or
        None: n-gram prompt lookup); None when it can."""

    def open_native(self, draft: Any, ngram: int) -> None:
        """Untimed preparation of ``native_generate`` with ``draft`` (None: prompt lookup of n-grams up
        to ``ngram`` tokens), refused as ``native_refusal`` says."""

    def native_generate(self, ids: Sequence[int], n: int, k: int) -> Iterator[int]:
        """Exactly ``n`` greedy tokens after ``ids`` from the engine's own speculative decoding, ``k``
        drafted per round, EOS ignored, from empty caches (its own and the draft's); what it told of
        its rounds is ``native_report()`` after the last token."""

    def native_report(self) -> NativeReport: ...

    def kv_cache_bytes(self) -> int | None:
        """Bytes the KV cache holds now, where the engine exposes it; else None."""

    def memory(self) -> dict:
        """Engine-reported memory figures (bytes), e.g. MLX active/peak/cache."""

    def reset_peak_memory(self) -> None: ...

    def versions(self) -> dict: ...

    def resolved_settings(self) -> dict[str, Any]:
        """Once loaded: every setting the engine runs with, name -> a model.resolved.Resolved
        (what was asked, what the engine resolved it to and where that was read, or why it is
        unknown); llama.cpp's context parameters after creation, mlx-lm's cache and stream."""

    def prefill(self, ids: Sequence[int]) -> None:
        """Capability "prefill": append ``ids`` to what the cache holds and compute them, no token
        sampled, returning once the computation is done (the device synchronised): the pp test."""

    def close(self) -> None: ...


class CacheCutRefused(MacprofError):
    """``truncate`` could not cut the cache back; ``reason`` is the engine's ``cut_refusal``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How much of ``prompt`` the cache can serve: at least one prompt token is always
    recomputed, since its logits give the first generated token."""
    return min(common_prefix(cached, prompt), len(prompt) - 1)


class PrefixReuse:
    """What a request kept of a single-sequence cache (the in-process engines share it): the
    prefix its cache serves, or none and why, as ``reused_tokens`` / ``reuse_refused`` say."""

    _reused: int = 0
    _refused: str | None = None

    def cached_tokens(self) -> int:  # each engine's own
        raise NotImplementedError

    def cut_refusal(self, n_tokens: int) -> str | None:  # each engine's own
        raise NotImplementedError

    def _keep_for(self, history: Sequence[int], ids: Sequence[int]) -> int:
        """The prefix of ``ids`` to keep from the cache that holds ``history``: the reusable
        prefix, or 0 where the cache cannot be cut back to it (the reason in ``reuse_refused``:
        the prompt is then computed from an empty cache and never reported as reused)."""
        keep = max(0, reusable_prefix(history[: self.cached_tokens()], ids))
        self._refused = self.cut_refusal(keep) if keep else None
        return 0 if self._refused else keep

    @property
    def reused_tokens(self) -> int:
        return self._reused

    @property
    def reuse_refused(self) -> str | None:
        return self._refused


def top_two(logits) -> TopTwo:
    """The two highest entries of a logits vector."""
    import numpy as np

    values = np.asarray(logits, dtype=np.float64)
    i, j = np.argpartition(values, -2)[-2:]
    if values[j] > values[i]:
        i, j = j, i
    return TopTwo(int(i), float(values[i]), int(j), float(values[j]))
