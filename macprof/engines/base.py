"""The one narrow protocol every engine adapter follows.

Engines never time themselves: ``generate`` yields token ids as soon as each is available
(materialised), and the caller takes the timestamps. Generation is greedy (``generate_sampled``
draws at a temperature instead: the tasks phase's sampled retries) and ignores EOS: an EOS id
is just another token and generation goes on, so every request yields exactly ``n`` tokens.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Protocol, Sequence, Union, overload

from macprof.errors import MacprofError

if TYPE_CHECKING:  # the HTTP client is imported by a server's engine alone
    from macprof.engines import counting, wire


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

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:  # a list's indexing and slicing
        return self.tokens()[i]


# How an engine holds the weights once loaded: "mapped" (the model file mapped, its pages the
# OS page cache's: llama.cpp's default use_mmap; macOS's physical footprint does not count such
# clean file-backed pages, so the headline adds their resident bytes, analyse/headline.py),
# "copied" (read into the engine's own buffers: MLX, counted by the footprint), or None where
# another process holds them (a server).
WEIGHTS_HELD = ("mapped", "copied")


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

# why a phase of servers (the concurrency phase) is not run by an in-process engine
IN_PROCESS = "concurrent requests are measured against a server (engine openai)"


class EngineCore(Protocol):
    """What every engine implements, of either kind: load, tokenize, the model's template and end
    ids, empty the cache, memory, versions."""

    name: str
    weights_held: str | None  # one of WEIGHTS_HELD, or None (another process holds the weights); set by load_model
    separate_tokenizer: bool  # whether the tokenizer loads apart from the model (cold start's split)
    capabilities: dict[str, str | None]  # every key of CAPABILITIES: None, or why not (engines/capabilities.py)

    @property
    def kind(self) -> str:
        """"in_process" (an ``Engine``) or "server" (a ``ServerEngine``)."""

    def load_model(self, path: Path, settings: EngineSettings) -> None:
        """Read, allocate and materialise the weights (no tokenizer); a server's: find it and its tokenizer."""

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
        """The model's own chat template, or None where it has none (or the server applies it)."""

    @property
    def vocab_size(self) -> int: ...

    def reset(self) -> None:
        """Empty the KV / prompt cache (and an open batch's): the next request shares nothing
        with earlier ones (a server's: displaced by an untimed request, engines/openai.py)."""

    def memory(self) -> dict:
        """Engine-reported memory figures (bytes), e.g. MLX active/peak/cache ({} where none: a server's)."""

    def reset_peak_memory(self) -> None:
        """Restart the engine's own peak-memory counter (nothing to restart where it has none)."""

    def versions(self) -> dict: ...

    def resolved_settings(self) -> dict[str, Any]:
        """Once loaded: every setting the engine runs with, name -> a model.resolved.Resolved
        (what was asked, what the engine resolved it to and where that was read, or why it is
        unknown); llama.cpp's context parameters after creation, mlx-lm's cache and stream; {}
        for a server (configured where it started, not told over its API)."""

    def close(self) -> None: ...


class Engine(EngineCore, Protocol):
    """An engine in this process: load, tokenize, generate token ids, cache control, logits."""

    @property
    def kind(self) -> Literal["in_process"]: ...

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

    @property
    def reused_tokens(self) -> int: ...

    @property
    def reuse_refused(self) -> str | None:
        """Why the last ``generate`` started from an empty cache though it shared a prefix with
        what the cache held (``cut_refusal`` of that prefix); None when it kept what it could.
        ``reused_tokens`` is then 0: a recomputed prefix is never reported as reused."""

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

    def kv_cache_bytes(self) -> int | None:
        """Bytes the KV cache holds now, where the engine exposes it; else None."""


class ServerEngine(EngineCore, Protocol):
    """A server, over HTTP: a streamed request, the server's own usage counts (an untimed counting
    request where they leave the tokens per chunk unknown), its report of what it reused, and what
    is known of its cache (engines/openai.py)."""

    server: str  # which server it is, as recognised (llama-server, llama-cpp-python, mlx_lm.server, ollama...)
    timeout: float  # a request's time limit, seconds (--timeout)
    exact_prompts: bool  # a tokenizer here (the model's own or the server's) builds prompts of an exact length
    tokenizer_mode: str  # which tokenizer prompts are built with, in words
    eos_how: str  # how requests hold the server's EOS off (or that they do not), in words
    displacements: int  # the requests sent so far to displace the server's cache (``reset``, a counting request)
    last_chunks: list[wire.Chunk]  # the last ``request``'s chunks, as received
    last_final: wire.Final | None  # the server's report of the last ``request``, once its stream ended

    @property
    def kind(self) -> Literal["server"]: ...

    @property
    def renders_messages(self) -> bool:
        """Whether the server applies its model's template to a conversation's messages (--api
        chat): a prompt's text and ids are then the server's, not known here."""

    @property
    def holds_eos(self) -> bool:
        """Whether requests hold the server's EOS off (exact lengths: the speed phases)."""

    @property
    def prompt_words(self) -> int | None:
        """How many single-token words the prompt builder needs of ``prompt_candidates`` (None: all)."""

    def request(self, text: str, n: int, messages: Sequence[dict] | None = None) -> Iterator[int]:
        """One streamed request of ``text`` (or of ``messages``, where the server renders them):
        yields, per chunk with text, the tokens the server says it carries (0: not said); the
        chunks are then ``last_chunks``, the server's report ``last_final``."""

    def stream(self, text: str, n: int, messages: Sequence[dict] | None = None) -> Iterator[wire.Chunk | wire.Final]:
        """One streamed request, its chunks then the server's report; thread-safe (it shares
        nothing with other calls: the concurrency phase's clients)."""

    def settle(self, text: str, n: int, chunks: Sequence[wire.Chunk], final: wire.Final,
               budget_s: float | None = None, messages: Sequence[dict] | None = None) -> counting.Settled:
        """The tokens of a timed request and of each of its chunks: the server's usage where it
        settles them, else an untimed counting request, within ``budget_s`` seconds."""

    def prompt_tokens(self, text: str) -> int | None:
        """``text``'s length in the model's tokens by the server's own tokenize endpoint (asked
        before the timed span); None where it has none."""

    @property
    def reuse_unreported(self) -> str | None:
        """Why the last request's reused tokens are unknown (the server's reply said none, or an
        impossible count); None where it said. Never guessed from TTFT."""

    def cache_holds(self) -> tuple[int | None, str]:
        """How many conversations the server's cache holds at once, and how that is known."""

    def displacing_ids(self) -> list[int]:
        """The ids of ``reset``'s request, which the server's cache holds after it."""

    def replies_end_at_eos(self) -> AbstractContextManager[None]:
        """Within it, every request ends where the server ends it (its EOS or max_tokens): an app's reply."""

    def eos_keys(self, n: int) -> dict:
        """The request keys that hold EOS off on this server for ``n`` tokens ({} within ``replies_end_at_eos``)."""

    def prompt_candidates(self) -> list[int] | None:
        """Ids for the prompt builder to pick its words from, where a vocabulary scan would cost a
        request per id (the server's tokenizer); None: scan the vocabulary."""


# An engine, of either kind: the worker's, given to every phase. ``engine.kind`` tells them apart
# (mypy narrows the union on it: a phase of both kinds calls each kind's members only where it is that kind).
AnyEngine = Union[Engine, ServerEngine]


def in_process(engine: AnyEngine, why: str) -> Engine:
    """``engine`` as an in-process one, for what only such an engine does; a server is refused
    with ``why`` (a draft model, the speculative overhead: both load a model file here)."""
    if engine.kind == "server":
        raise MacprofError(why)
    return engine


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


def top_two(logits: Any) -> TopTwo:
    """The two highest entries of a logits vector."""
    import numpy as np

    values = np.asarray(logits, dtype=np.float64)
    i, j = np.argpartition(values, -2)[-2:]
    if values[j] > values[i]:
        i, j = j, i
    return TopTwo(int(i), float(values[i]), int(j), float(values[j]))
