"""mlx-lm adapter: the decode loop of ``mlx_lm.generate.generate_step``, greedy and lean.

As generate_step does, step k+1 is queued with ``mx.async_eval`` before token k is read with
``.item()``, so the Python side overlaps the device; unlike it, greedy sampling is a plain
argmax (no log-softmax), and no step is computed past the last token requested. Sampled
decoding (the tasks phase's retries) is generate_step's: mlx-lm's sampler on the logprobs.

Batched decoding is mlx-lm's own ``BatchGenerator`` (what ``mlx_lm.batch_generate`` runs),
greedy, with no stop tokens so every sequence yields exactly ``n`` tokens. It keeps its own
pipelining: step k+1 is queued before step k's tokens are read, one step past the last.

The prompt cache is the model's own (``make_prompt_cache``: a sliding-window layer gets a
RotatingKVCache, a recurrent one an ArraysCache). It can always be extended, but cut back only
where every layer's cache is trimmable (mlx-lm's ``can_trim_prompt_cache``): a RotatingKVCache
only while it has held fewer tokens than its window, an ArraysCache never. ``cut_refusal`` says
which layers refuse; such a prefix is recomputed from an empty cache and reported as not reused.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache
from mlx_lm.utils import load_model, load_tokenizer

from macprof.engines.base import (MAX_TEMPLATE_BYTES, CacheCutRefused, ChatTemplate, EngineSettings, Later,
                                  PrefixReuse, TopTwo, top_two)
from macprof.engines.capabilities import IN_PROCESS, NativeReport
from macprof.errors import MacprofError
from macprof.measure.kvmodel import MLX_KV_BITS, MLX_KV_GROUP

_CLEAR_EVERY = 256  # as generate_step: return freed buffers to the allocator cache now and then
_ONE_CALL = 4  # uncached prompt tokens fed with the first step itself, without a prefill pass of their own
BATCH_API = "0.31.3"  # the first mlx-lm whose BatchGenerator takes stream= and has next_generated()
# what generate_batch passes to BatchGenerator and calls on it: batch_api_missing checks each
# (tests/test_macos.py holds these to the call itself, benchmarks/mlx_floor_check.py to the floor's wheel)
BATCH_KEYWORDS = ("max_tokens", "stop_tokens", "sampler", "completion_batch_size", "prefill_batch_size",
                  "prefill_step_size", "stream")
BATCH_METHODS = ("insert", "next_generated", "close")


def greedy(logprobs: mx.array) -> mx.array:
    """The batch sweep's sampler: mlx-lm's greedy_sampler is exactly this argmax, but it exists
    only from mlx-lm 0.32.0 on, and the floor (0.31.3) has everything else the batch needs."""
    return mx.argmax(logprobs, axis=-1)


def wire(core: Any = mx) -> tuple[int | None, dict]:
    """Wire the GPU's recommended working set, as mlx-lm's own paths do (``wired_limit`` around
    generate / stream_generate, BatchGenerator's constructor): unwired, a large model's pages can
    be evicted and decode runs slower than under mlx-lm itself. Held for the engine's life, so
    every phase (warm, prefix, grid, depth, batch) runs wired alike. Returns (the previous limit
    to restore, or None when nothing was set; the facts for the run log)."""
    info = (getattr(core, "device_info", None) or core.metal.device_info)() if core.metal.is_available() else {}
    size = info.get("max_recommended_working_set_size")
    if not size:
        return None, {"wired_limit_bytes": None, "wired_reason": "no Metal device: nothing to wire"}
    old = core.set_wired_limit(int(size))
    facts: dict[str, Any] = {"wired_limit_bytes": int(size), "wired_reason": None}
    major = _macos_major()
    if major is not None and major < 15:  # mlx's set_wired_limit: "only useful on macOS 15.0 or higher"
        facts["wired_reason"] = f"set, but without effect before macOS 15 (this is macOS {major})"
    return int(old), facts


def _macos_major() -> int | None:
    # platform.mac_ver() can read 16.0 on macOS 26 (older SDK); for "before 15" both are >= 15
    import platform

    version = platform.mac_ver()[0]
    return int(version.split(".")[0]) if version else None


def batch_api_missing(generator: Any) -> str | None:
    """Why this mlx-lm's BatchGenerator cannot serve the batch sweep, or None: every keyword
    generate_batch passes and every method it calls, all there from mlx-lm 0.31.3 (pyproject's
    floor; stream= and next_generated() are what older ones lack, and an older install is told)."""
    import inspect

    import mlx_lm

    try:
        params = dict(inspect.signature(generator.__init__).parameters)
    except (TypeError, ValueError):
        params = {}  # no signature to read: every keyword counts as missing
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [f"{k}=" for k in BATCH_KEYWORDS if k not in params and not takes_any]
    missing += [f"{m}()" for m in BATCH_METHODS if not hasattr(generator, m)]
    if not missing:
        return None
    return (f"batch unsupported: mlx-lm {getattr(mlx_lm, '__version__', '?')}'s BatchGenerator has no "
            f"{', '.join(missing)} (the batch sweep needs mlx-lm {BATCH_API} or later)")


class MlxEngine(PrefixReuse):
    name = "mlx"
    kind: Literal["in_process"] = "in_process"
    # mx.load reads safetensors into arrays of MLX's own (Metal buffers on a Mac), which the
    # physical footprint counts: nothing stays mapped from the files
    weights_held: str | None = "copied"
    separate_tokenizer = True  # the tokenizer's own files, loaded after the weights
    # "batch" as this mlx-lm's BatchGenerator allows, once loaded (batch_api_missing)
    capabilities: dict[str, str | None] = IN_PROCESS

    def __init__(self) -> None:
        self.model: Any = None
        self.config: dict = {}
        self.tokenizer: Any = None
        self._path: Path | None = None
        self._cache: Any = None
        self._history: list[int] = []  # tokens fed so far; the cache holds its first `offset`
        self._unread: Later | None = None  # a queued proposal or verdict its caller has not read yet
        self._reused = 0
        self._refused: str | None = None
        self._stream: Any = None
        self._prefill_step = 2048
        self._old_wired: int | None = None
        self._wired: dict = {}
        self._kv_bits: int | None = None
        self._proposed = 0  # tokens propose() computed since it last cleared the allocator's cache
        self._native_draft: Any = None  # the draft MlxEngine of open_native
        self._report = NativeReport(impl="mlx_lm.stream_generate", unknown="no native request yet")

    # -- loading -------------------------------------------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._path = Path(path)
        self.model, self.config = load_model(self._path, lazy=False)  # evaluates every weight
        from mlx_lm.generate import generation_stream

        # mlx-lm's own stream, as its generate_step and speculative_generate_step use: a draft and
        # its target then queue on one stream, as in mlx-lm's speculative step (on two, each
        # verify waits on a cross-stream event, and each stream has its own worker on the CPU)
        self._stream = generation_stream
        self._kv_bits = MLX_KV_BITS.get(settings.kv_type)  # None: f16
        self._old_wired, self._wired = wire()
        from mlx_lm.generate import BatchGenerator

        self.capabilities = {**self.capabilities, "batch": batch_api_missing(BatchGenerator)}

    def load_tokenizer(self) -> None:
        self.tokenizer = load_tokenizer(self._path, eos_token_ids=self.config.get("eos_token_id"))

    # -- tokens --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def chat_template(self) -> ChatTemplate | None:
        return _chat_template_of(Path(self._path or "."))

    def tokenize_chat(self, text: str) -> list[int]:
        bos = self.chat_template()
        starts = bool(bos and bos.bos_token and text.startswith(bos.bos_token))
        return list(self.tokenizer.encode(text, add_special_tokens=not starts))  # added tokens are matched

    @property
    def eos_ids(self) -> set[int]:
        return {int(i) for i in self.tokenizer.eos_token_ids}

    @property
    def vocab_size(self) -> int:
        return int(self.config.get("vocab_size") or self.config.get("text_config", {})["vocab_size"])

    # -- cache ---------------------------------------------------------------------------
    def reset(self) -> None:
        self._cache = make_prompt_cache(self.model)
        if self._kv_bits:  # as generate_step's kv_bits with quantized_kv_start 0; mlx-lm quantizes no RotatingKVCache
            self._cache = [c.to_quantized(group_size=MLX_KV_GROUP, bits=self._kv_bits) if type(c) is KVCache else c
                           for c in self._cache]
        self._history = []
        self._unread = None  # what it would have fed is gone with the cache

    def cached_tokens(self) -> int:
        if self._cache is None:
            return 0
        # an attention layer's cache counts every token it was fed (a RotatingKVCache too, past
        # its window); a recurrent one counts none: with no attention layer, the history does
        offsets = [c.offset for c in self._cache if hasattr(c, "offset")]
        return int(offsets[0]) if offsets else max(0, len(self._history) - 1)

    def truncate(self, n_tokens: int) -> None:
        if n_tokens == 0:
            self.reset()  # emptying needs no trim: any cache can be made afresh
            return
        self._settle()
        refusal = self.cut_refusal(n_tokens)
        if refusal:
            raise CacheCutRefused(refusal)
        excess = self.cached_tokens() - n_tokens
        if excess > 0:
            trim_prompt_cache(self._cache, excess)
        self._history = self._history[:n_tokens]

    def cut_refusal(self, n_tokens: int) -> str | None:
        held = self.cached_tokens()
        if n_tokens >= held or self._cache is None:
            return None
        return cut_refusal(self._cache, held, n_tokens)

    def _prepare(self, ids: Sequence[int]) -> int:
        self._settle()
        if self._cache is None:
            self.reset()
        keep = self._keep_for(self._history, ids)
        if keep == 0:
            self.reset()  # a fresh cache: what cannot be trimmed is recomputed, and reported so
            keep = 0
        excess = self.cached_tokens() - keep
        if excess > 0:
            trim_prompt_cache(self._cache, excess)
        self._history = list(ids)
        return keep

    # -- generation ----------------------------------------------------------------------
    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        return self._loop(ids, n, lambda logits: mx.argmax(logits, axis=-1))

    def generate_sampled(self, ids: Sequence[int], n: int, temperature: float, seed: int) -> Iterator[int]:
        """mlx-lm's own sampler (``make_sampler(temp=...)``: a categorical draw of
        logprobs / temp, no top-p, min-p or top-k) over the logprobs generate_step computes, the
        random state seeded with ``mx.random.seed`` as ``mlx_lm.generate --seed`` does. Each
        step's key is taken from that state when the step is queued, in order, so the async
        pipelining draws the same sequence."""
        from mlx_lm.sample_utils import make_sampler

        sampler = make_sampler(temp=float(temperature))

        def pick(logits: mx.array) -> mx.array:
            return sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))

        mx.random.seed(int(seed))
        yield from self._loop(ids, n, pick)

    def _prefill(self, ids: Sequence[int], keep: int) -> mx.array:
        """Chunked prefill of ``ids`` after the kept ``keep``, all but the last few tokens, which
        are returned for the first step: a remainder of up to _ONE_CALL tokens (a draft's catch-up
        in the speculative loop: the accepted last draft and the target's token) goes in the first
        step's one call, as mlx-lm's speculative_generate_step feeds its draft. On the stream."""
        model, cache = self.model, self._cache
        prompt = mx.array(list(ids[keep:]), dtype=mx.uint32)
        while prompt.size > _ONE_CALL:
            k = min(self._prefill_step, prompt.size - 1)
            model(prompt[:k][None], cache=cache)
            mx.eval([c.state for c in cache])
            prompt = prompt[k:]
        return prompt

    def prefill(self, ids: Sequence[int]) -> None:
        """The ids into the cache in chunks of the prefill step (as generate_step's prefill), each
        chunk's cache state evaluated, on the stream; no logits are evaluated (llama-bench's pp
        computes its last token's: one row of the output layer)."""
        self._settle()
        if self._cache is None:
            self.reset()
        held, model, cache = self.cached_tokens(), self.model, self._cache
        with mx.stream(self._stream):
            prompt = mx.array(list(ids), dtype=mx.uint32)
            for start in range(0, prompt.size, self._prefill_step):
                model(prompt[start:start + self._prefill_step][None], cache=cache)
                mx.eval([c.state for c in cache])
        self._history = self._history[:held] + list(ids)

    def _loop(self, ids: Sequence[int], n: int, pick) -> Iterator[int]:
        keep = self._reused = self._prepare(ids)
        if n <= 0:
            return
        model, cache, history = self.model, self._cache, self._history

        def step(tokens: mx.array) -> mx.array:
            return pick(model(tokens[None], cache=cache)[:, -1, :])

        with mx.stream(self._stream):
            y = step(self._prefill(ids, keep))
            mx.async_eval(y)
            for i in range(n):
                if i + 1 < n:
                    next_y = step(y)
                    mx.async_eval(next_y)
                token: int = y.item()  # type: ignore[assignment]  # the argmax or the draw: an int
                history.append(token)
                yield token
                if i % _CLEAR_EVERY == 0:
                    mx.clear_cache()
                if i + 1 < n:
                    y = next_y

    def propose(self, ids: Sequence[int], n: int) -> Later:
        """generate's greedy tokens, queued and read back together: every step is queued with
        ``mx.async_eval`` on the one before it, unread (as mlx-lm's ``_draft_generate`` drafts:
        one synchronisation per round, where generate's ``.item()`` per token waits on each).
        The ``Later``'s handle is the unread 1-d array, on which an MLX target's ``verify``
        queues its pass; reading it waits for the k steps. The freed buffers go back to the
        allocator every _CLEAR_EVERY tokens proposed, not on every call (a round drafts only a few)."""
        keep = self._reused = self._prepare(ids)
        if n <= 0:
            return Later(list)
        model, cache = self.model, self._cache
        with mx.stream(self._stream):
            y = self._prefill(ids, keep)
            steps = []
            for _ in range(n):
                y = mx.argmax(model(y[None], cache=cache)[:, -1, :], axis=-1)
                mx.async_eval(y)
                steps.append(y)
            queued = mx.concatenate(steps)
            mx.async_eval(queued)  # its own event: reading it waits for the k steps, not for a verify queued on it

        def read() -> list[int]:
            tokens: list[int] = queued.tolist()  # type: ignore[assignment]  # a 1-d array: a list of ints
            self._history += tokens
            self._proposed += n
            if self._proposed >= _CLEAR_EVERY:
                mx.clear_cache()
                self._proposed = 0
            return tokens

        self._unread = Later(read, handle=queued)
        return self._unread

    def _settle(self) -> None:
        """Read what was queued and not yet read (a proposal, a verdict): the history it
        extends must be whole before the cache is used again."""
        if self._unread is not None:
            unread, self._unread = self._unread, None
            unread.tokens()

    # -- batched generation ----------------------------------------------------------------
    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        """Nothing to prepare: BatchGenerator allocates each sequence's cache as it goes."""

    def close_batch(self) -> None:
        """Nothing to free: each call's BatchGenerator goes with it."""

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        from mlx_lm.generate import BatchGenerator

        if self._kv_bits:
            raise MacprofError("mlx-lm's BatchGenerator keeps an f16 K/V cache: run the batch sweep with --kv-type f16")
        size = len(prompts)
        gen = BatchGenerator(self.model, max_tokens=n, stop_tokens=None, sampler=greedy,
                             completion_batch_size=size, prefill_batch_size=size,
                             prefill_step_size=self._prefill_step, stream=self._stream)
        try:
            uids = gen.insert([list(p) for p in prompts], [n] * size)
            slot = {uid: i for i, uid in enumerate(uids)}
            for _ in range(n):
                responses = gen.next_generated()
                if len(responses) != size:
                    raise RuntimeError(f"BatchGenerator returned {len(responses)} tokens for {size} sequences")
                tokens = [0] * size
                for r in responses:
                    tokens[slot[r.uid]] = int(r.token)
                yield tokens
        finally:
            gen.close()

    def score(self, ids: Sequence[int]) -> np.ndarray:
        """Logits for every position: one forward pass of the model over ``ids`` from an
        empty cache (what mlx-lm's perplexity evaluation runs), as float32."""
        self.reset()
        with mx.stream(self._stream):
            logits = self.model(mx.array(list(ids), dtype=mx.uint32)[None], cache=self._cache)[0]
            values = np.array(logits.astype(mx.float32))
        self.reset()
        return values

    def verify(self, ids: Sequence[int], drafts: Sequence[int] = ()) -> Later:
        """One forward pass of ``ids`` and ``drafts`` over the cache (as mlx-lm's speculative step
        verifies): model(inputs[None], cache=cache), then the argmax at every position. Drafts an
        MLX engine proposed (a ``Later`` holding its array) are verified unread: the pass is
        built on them and queued with ``mx.async_eval`` now, as mlx-lm's step builds its verify
        on the drafts before its one ``mx.eval``; other drafts are read and the pass is built
        when the verdict is read."""
        self._settle()
        if isinstance(drafts, Later) and isinstance(drafts.handle, mx.array):
            with mx.stream(self._stream):
                inputs = mx.concatenate([mx.array(list(ids), dtype=mx.uint32), drafts.handle.astype(mx.uint32)])
            self._unread = self._queue_pass(inputs, ids, drafts)
            return self._unread
        return Later(lambda: self._queue_pass(mx.array([*ids, *drafts], dtype=mx.uint32), ids, drafts).tokens())

    def _queue_pass(self, inputs: mx.array, ids: Sequence[int], drafts: Sequence[int]) -> Later:
        """verify's forward pass over ``inputs`` (``ids`` then ``drafts``), queued with
        ``mx.async_eval``; reading it waits for the argmax at every position."""
        if self._cache is None:
            self.reset()
        held = self.cached_tokens()
        with mx.stream(self._stream):
            choices = mx.argmax(self.model(inputs[None], cache=self._cache)[0], axis=-1)
            mx.async_eval(choices)

        def read() -> list[int]:
            self._history = self._history[:held] + list(ids) + list(drafts)
            return choices.tolist()  # type: ignore[return-value]  # a 1-d array: a list of ints

        return Later(read)

    def top2(self, ids: Sequence[int]) -> TopTwo:
        self.reset()
        cache = self._cache
        with mx.stream(self._stream):
            logits = self.model(mx.array(list(ids), dtype=mx.uint32)[None], cache=cache)[0, -1]
            values = np.array(logits.astype(mx.float32))
        self.reset()
        return top_two(values)

    # -- mlx-lm's own speculative decoding ----------------------------------------------------
    def native_refusal(self, draft: Any) -> str | None:
        if draft is None:
            return "mlx-lm's speculative decoding takes a draft model (stream_generate(draft_model=...)): no prompt lookup"
        if not isinstance(draft, MlxEngine):
            return f"mlx-lm's stream_generate drafts with an MLX model; the draft is a {draft.name} model"
        caches = [c for c in make_prompt_cache(self.model) if not c.is_trimmable()]
        if caches:  # speculative_generate_step raises on it, and its draft's cache is trimmed the same way
            return (f"mlx-lm's speculative decoding needs a trimmable prompt cache; this model's has "
                    f"{', '.join(sorted({type(c).__name__ for c in caches}))} layers")
        return None

    def open_native(self, draft: Any, ngram: int) -> None:
        why = self.native_refusal(draft)
        if why:
            raise MacprofError(why)
        self._native_draft = draft

    def native_generate(self, ids: Sequence[int], n: int, k: int) -> Iterator[int]:
        """``mlx_lm.stream_generate(model, tokenizer, ids, max_tokens=n, draft_model=...,
        num_draft_tokens=k)``, greedy (its default sampler: the argmax of the log-probabilities),
        fresh prompt caches for both models (none passed), the K/V quantized from the first token
        as this engine's own (``kv_bits``, quantized_kv_start 0), its prefill chunks this engine's.
        stream_generate stops at an id of its tokenizer's eos_token_ids: it is given a copy of
        the tokenizer with none, as mlx_lm.benchmark empties them, so it yields exactly n."""
        import copy

        from mlx_lm import stream_generate

        if self._native_draft is None:
            raise MacprofError("native_generate before open_native")
        tokenizer = copy.copy(self.tokenizer)  # the wrapper's own set replaced; this engine's eos_ids are kept
        tokenizer.eos_token_ids = ()
        kv: dict[str, Any] = {"kv_bits": self._kv_bits, "kv_group_size": MLX_KV_GROUP, "quantized_kv_start": 0} \
            if self._kv_bits else {}
        flags: list[bool] = []
        self._report = NativeReport(impl="mlx_lm.stream_generate", unknown="the request did not end")
        for response in stream_generate(self.model, tokenizer, mx.array(list(ids), dtype=mx.uint32), max_tokens=n,
                                        draft_model=self._native_draft.model, num_draft_tokens=k,
                                        prefill_step_size=self._prefill_step, **kv):
            flags.append(bool(response.from_draft))
            yield int(response.token)
        self._report = NativeReport(
            impl=f"mlx_lm.stream_generate(draft_model=..., num_draft_tokens={k}) (speculative_generate_step)",
            from_draft=tuple(flags),
            unknown="mlx-lm tells per token whether it was an accepted draft (from_draft), not how many it drafted")

    def native_report(self) -> NativeReport:
        return self._report

    # -- memory and facts ----------------------------------------------------------------
    def kv_cache_bytes(self) -> int | None:
        if self._cache is None:
            return 0
        return int(sum(c.nbytes for c in self._cache if getattr(c, "keys", None) is not None))

    def memory(self) -> dict:
        return {
            "mlx_active_bytes": int(mx.get_active_memory()),
            "mlx_peak_bytes": int(mx.get_peak_memory()),
            "mlx_cache_bytes": int(mx.get_cache_memory()),
        }

    def reset_peak_memory(self) -> None:
        mx.reset_peak_memory()

    def versions(self) -> dict:
        import mlx_lm

        return {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,  # type: ignore[attr-defined]  # set at import, not in the stubs
                "device": str(mx.default_device()), "kv_bits": self._kv_bits, "kv_group_size": MLX_KV_GROUP,
                **self._wired}

    def resolved_settings(self) -> dict:
        """What mlx-lm runs with: the device and stream, the K/V cache's type (the activations'
        dtype, or mlx-lm's quantized cache), the attention kernel that follows from it, the
        prefill step and the wired limit. mlx-lm takes no thread count."""
        from macprof.model.resolved import Resolved, as_passed

        device = mx.default_device()
        kv = f"q{self._kv_bits}" if self._kv_bits else _float_dtype(self.model)
        kv_source = (f"mlx-lm's QuantizedKVCache, as generate_step's kv_bits from the first token "
                     f"(to_quantized(group_size={MLX_KV_GROUP}, bits={self._kv_bits}))"
                     if self._kv_bits else "mlx-lm's KVCache keeps K and V in the activations' dtype: the model's "
                                           "floating-point parameters'")
        wired = self._wired.get("wired_limit_bytes")
        return {
            "device": Resolved(asked=None, value="gpu" if device.type == mx.gpu else "cpu",
                               source="mx.default_device() (MLX's default: the GPU where Metal is available)"),
            "stream": Resolved(asked=None, value=str(self._stream),
                               source="mlx_lm.generate.generation_stream, the stream mlx-lm's own generation uses"),
            "type_k": Resolved(asked=None if not self._kv_bits else kv, value=kv, source=kv_source),
            "type_v": Resolved(asked=None if not self._kv_bits else kv, value=kv, source=kv_source),
            "flash_attn": Resolved(asked=None, value="disabled" if self._kv_bits else "enabled",
                                   source="mlx_lm.models.base.scaled_dot_product_attention: MLX's fused "
                                          "mx.fast.scaled_dot_product_attention, or for a quantized cache "
                                          "quantized_scaled_dot_product_attention (unfused matmuls)"),
            "prefill_step_size": as_passed(self._prefill_step, "the prefill's chunk, mlx-lm's default prefill_step_size"),
            "wired_limit": Resolved(asked=None, value=wired, source="mx.set_wired_limit (as mlx-lm's wired_limit)"
                                    if wired is not None else None, unknown=self._wired.get("wired_reason")),
            "n_threads": Resolved(unknown="mlx-lm takes no thread count (MLX's CPU backend sets its own)"),
        }

    def close(self) -> None:
        self.close_batch()
        self.model = self._cache = None
        if self._old_wired is not None:  # never while an async eval runs: synchronise first
            mx.synchronize(self._stream)
            mx.set_wired_limit(self._old_wired)
            self._old_wired = None
        mx.clear_cache()


def _float_dtype(model: Any) -> str | None:
    """The dtype most of a model's floating-point parameters have (a quantized model's scales and
    norms; the weights themselves otherwise), as MLX names it: float16, bfloat16, float32."""
    from collections import Counter

    from mlx.utils import tree_flatten

    arrays: list[Any] = [pair[1] for pair in tree_flatten(model.parameters())]
    counts = Counter(str(v.dtype).rpartition(".")[2] for v in arrays if mx.issubdtype(v.dtype, mx.floating))
    return counts.most_common(1)[0][0] if counts else None


def cut_refusal(cache: Sequence[Any], held: int, n_tokens: int) -> str | None:
    """Why a prompt cache holding ``held`` tokens cannot be trimmed back to ``n_tokens`` (mlx-lm
    trims all layers or none), naming the layers that refuse; None when every one can."""
    stuck = [c for c in cache if not c.is_trimmable()]
    if not stuck or n_tokens >= held:
        return None
    first = stuck[0]
    kind = type(first).__name__
    if hasattr(first, "max_size"):
        what = (f"sliding-window layers (mlx-lm {kind}, window {first.max_size}) have held {held} tokens: "
                f"those before the window are gone, and mlx-lm trims one only while it has held fewer than its window")
    elif hasattr(first, "offset"):
        what = f"layers with an mlx-lm {kind} cannot be trimmed"
    else:
        what = f"recurrent layers (mlx-lm {kind}) keep a state, not one entry per token: it cannot be rewound"
    return f"{len(stuck)} of {len(cache)} layers cannot be cut back from {held} to {n_tokens} tokens: {what}"


ENGINE = MlxEngine


@functools.lru_cache(maxsize=8)
def _chat_template_of(model_dir: Path) -> ChatTemplate | None:
    """A model directory's own chat template, read once: tokenize_chat asks it for the BOS text
    inside the timed span of every chat request, where a file read would count as TTFT."""
    from macprof.files import filekind
    from macprof.files.modelconfig import MAX_CONFIG, json_value

    # both through the one reader (files/filekind.py): a FIFO or /dev/zero standing in for either
    # is refused in one line, not read for ever; a missing file is no template, one not JSON one line
    path = model_dir / "tokenizer_config.json"
    try:
        cfg = json_value(path, filekind.read_text(path, MAX_CONFIG, "a tokenizer_config.json"))
    except FileNotFoundError:
        cfg = {}
    except OSError as exc:
        raise MacprofError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if not isinstance(cfg, dict):
        cfg = {}
    text, source = cfg.get("chat_template"), "tokenizer_config.json chat_template"
    jinja = model_dir / "chat_template.jinja"  # where newer transformers write it
    if not text and os.path.lexists(jinja):
        try:
            text, source = filekind.read_text(jinja, MAX_TEMPLATE_BYTES, "a chat template"), "chat_template.jinja"
        except OSError as exc:
            raise MacprofError(f"{jinja}: cannot be read: {exc.strerror or exc}") from None
    if isinstance(text, list):  # named templates: the default one
        text = next((t.get("template") for t in text if t.get("name") == "default"), None)
    if not isinstance(text, str) or not text:
        return None

    def token(key: str) -> str:
        value = cfg.get(key)
        return str(value.get("content", "")) if isinstance(value, dict) else str(value or "")

    return ChatTemplate(source, text, token("bos_token"), token("eos_token"))
