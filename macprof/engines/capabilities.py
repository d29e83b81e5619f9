"""The capabilities: what an engine of a kind may lack, each one's reason where it does, and the
protocol of each capability with members of its own (asked through ``able``). The two kinds an
engine is (``Engine`` in process, ``ServerEngine``) are engines/base.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Iterator, Protocol, Sequence, TypeVar, cast

from macprof.engines.base import Engine, EngineCore, ServerEngine

# What an engine of a kind may lack. Every engine declares each one in its ``capabilities``:
# None where it can, else the reason it cannot, which the phase that needs it records as its
# refusal (never imitating the capability). Phases ask ``able`` (the engine as the capability's
# protocol, or the reason) or ``lacks`` (the reason alone), never an engine's name or ``hasattr``.
# Which kind an engine is (in process or a server) is no capability: it is its protocol
# (``Engine`` or ``ServerEngine``, told apart by ``kind``).
CAPABILITIES = {
    "score": "the logits of every position of a sequence, in one forward pass (the quality phase)",
    "batch": "B sequences decoded together, one weight read per step (the batch phase)",
    "cache_cut": "the KV cache cut back to a prefix (prefix reuse, depth cases); cut_refusal says when one cut "
                 "cannot be made",
    "top2": "the two best next tokens after a sequence (the output checks' near-tie diagnosis)",
    "sample": "sampled decoding at a temperature from a seed, token by token (the tasks phase's --temperature "
              "retries: generate_sampled; a server samples in its chat completions instead, sent the OpenAI "
              "temperature and seed); generation is greedy everywhere else",
    "verify": "tokens appended to the cache and the greedy choice after every one, in one forward pass (the "
              "speculative phase's verification; truncate rewinds it)",
    "native_draft": "the engine's own speculative decoding (mlx-lm's stream_generate with a draft model, "
                    "llama-cpp-python's prompt lookup), measured beside macprof's loop (--speculative-impl); "
                    "native_refusal says which drafts it takes",
    "prefill": "token ids computed into the cache with no token generated, returning once computed, and generation "
               "from ids given as such (the bench phase: llama-bench's pp and tg tests)",
    "chat": "a chat completion sent as messages, with the OpenAI tools field, the server applying its model's "
            "template (the tasks phase through a server)",
}
# what an in-process engine says of "chat": the tasks phase renders the model's template itself
RENDERS_ITSELF = "in-process: the tasks phase renders the model's own chat template and generates token by token"
# what an in-process engine (fake, llama.cpp, mlx) can do, as declared; an instance that finds it
# lacks one once loaded replaces its dict (mlx's batch), never changes this one
IN_PROCESS: dict[str, str | None] = {"score": None, "batch": None, "cache_cut": None, "top2": None, "sample": None,
                                     "chat": RENDERS_ITSELF, "verify": None, "native_draft": None, "prefill": None}
# what a server says of "sample": its sampling is a chat completion's (Chatting.chat's temperature and seed)
SAMPLES_IN_CHAT = ("a server samples in its chat completions (the OpenAI temperature and seed fields, which the "
                   "tasks phase sends): it streams no sampled tokens of its own")


def lacks(engine: EngineCore, capability: str) -> str | None:
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


# -- what a member of a kind may lack: each capability's own protocol ---------------------------
class Batching(Engine, Protocol):
    """Capability "batch": B sequences decoded together, one weight read per step for all."""

    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        """Make room for ``size`` sequences of ``tokens_per_seq`` tokens (untimed)."""

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        """Greedy-decode ``n`` tokens for every prompt together, from an empty batch cache
        (``reset`` empties it); yields one list per step: that step's token of each
        sequence, in prompt order."""

    def close_batch(self) -> None: ...


class Sampling(Engine, Protocol):
    def generate_sampled(self, ids: Sequence[int], n: int, temperature: float, seed: int) -> Iterator[int]:
        """Capability "sample": as ``generate`` (the cached prefix reused, ``n`` tokens, EOS
        not special), each token drawn from softmax(logits / ``temperature``) by the engine's
        own sampler, whose generator is seeded with ``seed`` when the call starts: the same
        ids, temperature and seed give the same tokens on the same engine build."""


class NativeDrafting(Engine, Protocol):
    """Capability "native_draft": the engine's own speculative decoding."""

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


class Prefilling(Engine, Protocol):
    def prefill(self, ids: Sequence[int]) -> None:
        """Capability "prefill": append ``ids`` to what the cache holds and compute them, no token
        sampled, returning once the computation is done (the device synchronised): the pp test."""


class Chatting(ServerEngine, Protocol):
    def chat(self, messages: Sequence[dict], tools: Sequence[dict], max_tokens: int,
             without_tools: Sequence[dict] = (), temperature: float = 0.0, seed: int | None = None) -> dict:
        """Capability "chat": one chat completion as an app sends it (not streamed, the server's
        own template and EOS), greedy unless ``temperature`` and ``seed`` are given (engines/openai.py)."""


T = TypeVar("T", bound=EngineCore)


@dataclass(frozen=True)
class Capability(Generic[T]):
    """A key of CAPABILITIES and the protocol an engine that has it follows (``T``, and the class
    itself for the conformance test: mypy takes no protocol where a ``type[T]`` is asked)."""

    key: str
    protocol: type


# score, top2, verify and cache_cut are members of every in-process engine, which may still refuse
# them (a recurrent cache cannot be cut, a sharded model's logits ...): asking gives an ``Engine``
SCORE: Capability[Engine] = Capability("score", Engine)
TOP2: Capability[Engine] = Capability("top2", Engine)
VERIFY: Capability[Engine] = Capability("verify", Engine)
CACHE_CUT: Capability[Engine] = Capability("cache_cut", Engine)
BATCH: Capability[Batching] = Capability("batch", Batching)
SAMPLE: Capability[Sampling] = Capability("sample", Sampling)
NATIVE_DRAFT: Capability[NativeDrafting] = Capability("native_draft", NativeDrafting)
PREFILL: Capability[Prefilling] = Capability("prefill", Prefilling)
CHAT: Capability[Chatting] = Capability("chat", Chatting)
CAPABILITY: dict[str, Capability[Any]] = {c.key: c for c in (SCORE, TOP2, VERIFY, CACHE_CUT, BATCH, SAMPLE,
                                                              NATIVE_DRAFT, PREFILL, CHAT)}


def able(engine: EngineCore, capability: Capability[T]) -> T | str:
    """``engine`` as the capability's protocol where it declares it can (None in its
    ``capabilities``), else its reason why not (engines/conformance.py holds every adapter that
    declares a capability to its protocol's members)."""
    why = lacks(engine, capability.key)
    return why if why else cast(T, engine)
