"""llama.cpp adapter over llama-cpp-python's low-level API (the llama.h mirror).

The per-token loop is one ``llama_decode`` of the last token, then greedy selection as an argmax
over a zero-copy numpy view of llama.cpp's own logits buffer (SIMD, in C; nothing is copied
into Python). llama.cpp's greedy sampler chain does the same job but first fills a candidate
array for the whole vocabulary: measured here at 53 µs per token against 6.5 µs for the view's
argmax, with a 32 000-token vocabulary (1.5 % of a 3.4 ms decode step). Sampled decoding (the
tasks phase's retries, no speed figure) is that chain's way: temperature, then a seeded draw. The prompt cache is the context's KV memory: a new prompt
keeps the longest common prefix with what the memory holds (``llama_memory_seq_rm`` drops
the rest), as ``Llama.generate`` does. Not every memory can be cut back: a recurrent (or
hybrid) model's state cannot be rewound (``llama_memory_seq_rm`` refuses a partial removal),
and a sliding-window cache that is not full size (``swa_full`` off) has dropped the positions
before its window; ``cut_refusal`` says so from the model's and the memory's own figures, and
such a prefix is recomputed from an empty cache and reported as not reused.

Batched decoding is llama.cpp's own (as in its ``batched`` example and llama-batched-bench):
a second context with one KV stream per sequence, and one ``llama_batch`` per step holding
the last token of every sequence, each with its own sequence id and position; one
``llama_decode`` then reads the weights once for all of them.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import llama_cpp as lc
import numpy as np
from llama_cpp import _logger as _lc_logger
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from macprof.engines.llama_cpp_facts import (CapturedLog, cut_refusal, default_threads, ggml_backends, ggml_build,
                                             load_facts, model_facts, resolved_settings, weights_held)
from macprof.engines.base import CacheCutRefused, ChatTemplate, EngineSettings, Later, PrefixReuse, TopTwo, top_two
from macprof.engines.capabilities import IN_PROCESS, NativeReport
from macprof.errors import MacprofError

_SEQ = 0
_GGML_KV_TYPES = {"q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}  # the kv_type option -> ggml_type
# asked of every context: llama-bench's defaults (-b 2048 -ub 512); llama.cpp clamps n_batch to the
# context (causal attention) and n_ubatch to n_batch, and the decode loop reads back what it got
N_BATCH, N_UBATCH = 2048, 512
# llama.cpp logs every tensor it loads; keep its errors only, unless asked for more.
_lc_logger.set_verbose(os.environ.get("MACPROF_ENGINE_VERBOSE") == "1")


class LlamaCppEngine(PrefixReuse):
    name = "llama.cpp"
    kind: Literal["in_process"] = "in_process"
    separate_tokenizer = False  # the GGUF vocabulary loads with the model
    capabilities: dict[str, str | None] = IN_PROCESS

    def __init__(self) -> None:
        self.model = None
        self._path: Path | None = None
        self._n_ctx = 0
        self._native: Any = None  # llama_cpp.Llama over the same file, for its own speculative decoding
        self._lookup: Any = None  # its draft_model: LlamaPromptLookupDecoding, its proposals recorded
        self._report: Any = None
        self.ctx = None
        self.vocab = None
        self._logits_t: Any = None  # ctypes pointer type to the logits row, set by load_model
        self.threads = 0
        self.threads_source = ""
        self._load: dict = {}  # what load_model passed to llama.cpp, for the run log
        self._resolved: dict = {}  # every setting of the context as asked and as llama.cpp resolved it
        self.kv_type = "f16"
        self.n_batch = 0
        self._history: list[int] = []
        self._reused = 0
        self._refused: str | None = None
        self.memory_facts: dict = {}  # recurrent / hybrid / n_swa / swa_full: what decides a cut (cut_refusal)
        self._mem = None
        self._bctx = None  # the batch context (open_batch .. close_batch)
        self._bsize = 0
        self._swa_full = True
        self.weights_held: str | None = None  # "mapped" (llama.cpp's default) or "copied", once loaded
        self._eos: set[int] | None = None

    # -- loading -------------------------------------------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        self.threads, self.threads_source = ((settings.threads, "settings") if settings.threads else default_threads())
        self.kv_type = settings.kv_type
        self.n_batch = N_BATCH
        with CapturedLog() as log:  # what llama.cpp resolves and reports only in its log
            model = lc.llama_model_load_from_file(str(path).encode(), mparams)
            if not model:
                # llama.cpp says why on the worker's stderr, which the parent keeps with the failure
                raise MacprofError(f"{path}: llama.cpp could not load this model (its own message, if it printed one, "
                                   f"is the failure's stderr_tail in the run log; MACPROF_ENGINE_VERBOSE=1 logs more)")
            self.model = model
            self._path, self._n_ctx = Path(path), settings.n_ctx
            self.vocab = lc.llama_model_get_vocab(model)
            cparams = self._context_params(settings.n_ctx, 1)
            self.ctx = lc.llama_init_from_model(model, cparams)
        if not self.ctx:
            raise MacprofError(f"{path}: llama.cpp could not create a context of {settings.n_ctx} tokens")
        self.n_batch = int(lc.llama_n_batch(self.ctx))  # what llama.cpp made of N_BATCH: prompts go in chunks of it
        self._mem = lc.llama_get_memory(self.ctx)
        is_hybrid = getattr(lc, "llama_model_is_hybrid", None)  # bound from llama-cpp-python 0.3.10 on
        self.memory_facts = {"recurrent": bool(lc.llama_model_is_recurrent(model)),
                             "hybrid": bool(is_hybrid(model)) if is_hybrid else False,
                             "n_swa": int(lc.llama_model_n_swa(model)), "swa_full": self._swa_full}
        self._logits_t = ctypes.POINTER(ctypes.c_float * self.vocab_size)
        self._load = load_facts(model, mparams, cparams)  # as passed
        self.weights_held = weights_held(self._load["load_mode"], bool(lc.llama_supports_mmap()))
        self._resolved = resolved_settings(self.ctx, mparams, cparams, log.lines, self.threads_source, self.weights_held)

    def _context(self, n_ctx: int, n_seq: int):
        return lc.llama_init_from_model(self.model, self._context_params(n_ctx, n_seq))

    def _context_params(self, n_ctx: int, n_seq: int):
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = min(N_UBATCH, self.n_batch)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = False  # one KV stream per sequence, n_ctx / n_seq cells each
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        if self.kv_type != "f16":  # llama.cpp quantizes a V cache only with flash attention: enabled, and recorded
            cparams.type_k = cparams.type_v = _GGML_KV_TYPES[self.kv_type]
            cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
        self._swa_full = bool(cparams.swa_full)  # llama.cpp's default: a sliding-window cache keeps every position
        return cparams

    def load_tokenizer(self) -> None:
        """The GGUF file carries the vocabulary: it is loaded with the model."""

    # -- tokens --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self._tokenize(text, add_bos=True, special=False)

    def _tokenize(self, text: str, add_bos: bool, special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def detokenize(self, ids: Sequence[int]) -> str:
        arr = (lc.llama_token * max(1, len(ids)))(*ids)
        cap = 16 * len(ids) + 16
        out = ctypes.create_string_buffer(cap)
        n = lc.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, False)
        if n < 0:
            cap = -n
            out = ctypes.create_string_buffer(cap)
            n = lc.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, False)
        return out.raw[:n].decode("utf-8", errors="replace")

    @property
    def vocab_size(self) -> int:
        return int(lc.llama_vocab_n_tokens(self.vocab))

    def _piece(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:max(0, n)].decode("utf-8", errors="replace")

    def tokenize_chat(self, text: str) -> list[int]:
        bos = int(lc.llama_vocab_bos(self.vocab))
        add = not (bos >= 0 and text.startswith(self._piece(bos) or "\0"))  # the template wrote BOS itself
        return self._tokenize(text, add_bos=add, special=True)  # special tokens parsed

    @property
    def eos_ids(self) -> set[int]:
        """llama.cpp's end-of-generation ids (llama_vocab_is_eog: EOS, EOT, EOM...), found once."""
        if self._eos is None:
            self._eos = {t for t in range(self.vocab_size) if lc.llama_vocab_is_eog(self.vocab, t)}
        return self._eos

    def chat_template(self) -> ChatTemplate | None:
        raw = lc.llama_model_chat_template(self.model, None)  # the GGUF's tokenizer.chat_template
        if not raw:
            return None
        bos, eos = int(lc.llama_vocab_bos(self.vocab)), int(lc.llama_vocab_eos(self.vocab))
        return ChatTemplate("GGUF tokenizer.chat_template", raw.decode("utf-8", errors="replace"),
                            self._piece(bos) if bos >= 0 else "", self._piece(eos) if eos >= 0 else "")

    # -- cache ---------------------------------------------------------------------------
    def reset(self) -> None:
        lc.llama_memory_clear(self._mem, True)
        self._history = []
        if self._bctx:
            lc.llama_memory_clear(lc.llama_get_memory(self._bctx), True)

    def truncate(self, n_tokens: int) -> None:
        refusal = self.cut_refusal(n_tokens)
        if refusal:
            raise CacheCutRefused(refusal)
        if not lc.llama_memory_seq_rm(self._mem, _SEQ, n_tokens, -1):
            raise CacheCutRefused(f"llama_memory_seq_rm refused to cut the cache back to {n_tokens} tokens")
        self._history = self._history[:n_tokens]

    def cut_refusal(self, n_tokens: int) -> str | None:
        return cut_refusal(self.cached_tokens(), n_tokens, pos_min=int(lc.llama_memory_seq_pos_min(self._mem, _SEQ)),
                           **self.memory_facts)

    def cached_tokens(self) -> int:
        return int(lc.llama_memory_seq_pos_max(self._mem, _SEQ)) + 1

    def _decode(self, ids: Sequence[int]) -> None:
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start:start + self.n_batch]
            arr = (lc.llama_token * len(chunk))(*chunk)
            rc = lc.llama_decode(self.ctx, lc.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise MacprofError(f"llama_decode failed with code {rc} (context {self.cached_tokens()} tokens)")

    def prefill(self, ids: Sequence[int]) -> None:
        """llama-bench's test_prompt: the ids in chunks of n_batch, each one llama_decode (logits of
        its last token only), then llama_synchronize, after which the computation is done (a GPU
        backend may return from llama_decode before)."""
        self._history = self._history[:self.cached_tokens()] + list(ids)
        self._decode(ids)
        lc.llama_synchronize(self.ctx)

    # -- generation ----------------------------------------------------------------------
    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        ctx, logits_t = self.ctx, self._logits_t
        get_logits, cast, frombuffer, f32 = lc.llama_get_logits_ith, ctypes.cast, np.frombuffer, np.float32
        return self._loop(ids, n, lambda: int(frombuffer(cast(get_logits(ctx, -1), logits_t).contents, dtype=f32).argmax()))

    def propose(self, ids: Sequence[int], n: int) -> list[int]:
        """llama_decode returns once its step is computed: each token is read as it comes anyway."""
        return list(self.generate(ids, n))

    def generate_sampled(self, ids: Sequence[int], n: int, temperature: float, seed: int) -> Iterator[int]:
        """llama.cpp's own sampler chain, as its examples build one: ``llama_sampler_init_temp``
        then ``llama_sampler_init_dist(seed)`` (a softmax and one draw of its mt19937 per
        token); ``llama_sampler_sample`` reads the last logits row and draws. No top-k, top-p or
        min-p: the distribution is the model's at that temperature."""
        chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_temp(float(temperature)))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_dist(int(seed)))  # the chain owns and frees both
        ctx = self.ctx
        try:
            yield from self._loop(ids, n, lambda: int(lc.llama_sampler_sample(chain, ctx, -1)))
        finally:
            lc.llama_sampler_free(chain)

    def _loop(self, ids: Sequence[int], n: int, pick) -> Iterator[int]:
        """The decode loop: the prompt after the kept prefix, then ``pick()`` of each step's
        logits and one llama_decode of it."""
        keep = self._keep_for(self._history, ids)
        if not self._refused and not lc.llama_memory_seq_rm(self._mem, _SEQ, keep, -1):
            self._refused = f"llama_memory_seq_rm refused to cut the cache back to {keep} tokens"
        if self._refused:
            self.reset()  # recomputed from an empty cache, and reported as such
            keep = 0
        self._reused = keep
        self._history = history = list(ids)
        if n <= 0:
            return
        self._decode(ids[keep:])
        ctx, decode, get_one = self.ctx, lc.llama_decode, lc.llama_batch_get_one
        one = (lc.llama_token * 1)()
        for i in range(n):
            token = pick()
            history.append(token)
            yield token
            if i + 1 < n:
                one[0] = token
                rc = decode(ctx, get_one(one, 1))
                if rc != 0:
                    raise MacprofError(f"llama_decode failed with code {rc} at generated token {i + 1}")

    # -- batched generation ----------------------------------------------------------------
    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        self.close_batch()
        per_seq = -(-tokens_per_seq // 256) * 256  # llama.cpp pads a context to 256 cells; keep n_ctx / n_seq whole
        self._bctx = self._context(size * per_seq, size)
        if not self._bctx:
            raise MacprofError(f"llama.cpp could not create a context for {size} sequences of {tokens_per_seq} tokens")
        self._bsize = size

    def close_batch(self) -> None:
        if self._bctx:
            lc.llama_free(self._bctx)
        self._bctx, self._bsize = None, 0

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        """The prompts are prefilled together (chunks of n_batch tokens, logits kept only for
        each prompt's last token), then every step decodes one token of every sequence."""
        if len(prompts) > self._bsize:
            raise MacprofError(f"{len(prompts)} sequences for a batch context opened for {self._bsize}")
        ctx = self._bctx
        batch = lc.llama_batch_init(max(self.n_batch, len(prompts)), 0, len(prompts))
        try:
            cast, frombuffer, f32, logits_t = ctypes.cast, np.frombuffer, np.float32, self._logits_t

            def argmax(i: int) -> int:
                return int(frombuffer(cast(lc.llama_get_logits_ith(ctx, i), logits_t).contents, dtype=f32).argmax())

            # prefill: (sequence, position, token) in order; a chunk is decoded when full
            pending = [(s, pos, t) for s, ids in enumerate(prompts) for pos, t in enumerate(ids)]
            last = {s: len(ids) - 1 for s, ids in enumerate(prompts)}
            tokens = [0] * len(prompts)
            for start in range(0, len(pending), self.n_batch):
                chunk = pending[start:start + self.n_batch]
                outputs = _fill(batch, chunk, last)
                _decode_batch(ctx, batch, f"prefill of {len(prompts)} sequences")
                for s, i in outputs:
                    tokens[s] = argmax(i)
            for step in range(n):
                yield list(tokens)
                if step + 1 == n:
                    break
                _fill(batch, [(s, len(prompts[s]) + step, t) for s, t in enumerate(tokens)], None)
                _decode_batch(ctx, batch, f"generated token {step + 1}")
                tokens = [argmax(s) for s in range(len(prompts))]
        finally:
            lc.llama_batch_free(batch)

    def score(self, ids: Sequence[int]) -> np.ndarray:
        """Logits for every position: a llama_batch with logits requested at each entry (as
        llama-perplexity asks for them), decoded n_batch tokens at a time from an empty cache."""
        self.reset()
        out = np.empty((len(ids), self.vocab_size), dtype=np.float32)
        batch = lc.llama_batch_init(self.n_batch, 0, 1)
        try:
            for start in range(0, len(ids), self.n_batch):
                chunk = [(_SEQ, start + k, t) for k, t in enumerate(ids[start:start + self.n_batch])]
                _fill(batch, chunk, None)
                _decode_batch(self.ctx, batch, f"scoring tokens {start}..{start + len(chunk) - 1}")
                ptr = lc.llama_get_logits(self.ctx)
                out[start:start + len(chunk)] = np.ctypeslib.as_array(ptr, shape=(len(chunk), self.vocab_size))
        finally:
            lc.llama_batch_free(batch)
            self.reset()
        return out

    def verify(self, ids: Sequence[int], drafts: Sequence[int] = ()) -> Later:
        """One llama_batch of ``ids`` and ``drafts`` at the positions after the cache's, logits
        requested at every entry (as score() asks for them), one llama_decode when the verdict is
        read (llama_decode returns once computed: nothing to queue); the argmax of each row."""
        return Later(lambda: self._verify([*ids, *drafts]))

    def _verify(self, ids: Sequence[int]) -> list[int]:
        held = self.cached_tokens()
        if len(ids) > self.n_batch:
            raise MacprofError(f"verify of {len(ids)} tokens: more than one batch of {self.n_batch}")
        self._history = self._history[:held] + list(ids)
        batch = lc.llama_batch_init(max(1, len(ids)), 0, 1)
        try:
            _fill(batch, [(_SEQ, held + k, t) for k, t in enumerate(ids)], None)
            _decode_batch(self.ctx, batch, f"verifying {len(ids)} tokens after {held}")
            rows = np.ctypeslib.as_array(lc.llama_get_logits(self.ctx), shape=(len(ids), self.vocab_size))
            return [int(t) for t in rows.argmax(axis=1)]
        finally:
            lc.llama_batch_free(batch)

    def top2(self, ids: Sequence[int]) -> TopTwo:
        self.reset()
        self._decode(ids)
        ptr = lc.llama_get_logits_ith(self.ctx, -1)
        values = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)).copy()
        self.reset()
        return top_two(values)

    # -- llama-cpp-python's own speculative decoding ---------------------------------------
    def native_refusal(self, draft: Any) -> str | None:
        if draft is not None:
            return ("llama-cpp-python's own speculative decoding is prompt lookup only (Llama(draft_model="
                    "LlamaPromptLookupDecoding)); a draft model needs the low-level API, which is macprof's own loop")
        return None

    def open_native(self, draft: Any, ngram: int) -> None:
        """A ``llama_cpp.Llama`` over the same file (its pages mapped once more: the OS shares
        them), with this context's size, threads and K/V type. Flash attention as this engine's
        own context resolves it: llama.cpp's default (auto) enables it on a device that has it,
        where Llama() would disable it unless asked. Its draft_model is prompt lookup
        (``logits_all`` forced on, as Llama does with any draft)."""
        why = self.native_refusal(draft)
        if why:
            raise MacprofError(why)
        from llama_cpp import Llama

        if self._native is None:
            kv_type = _GGML_KV_TYPES.get(self.kv_type)  # None: f16, llama.cpp's default
            fa = self.kv_type != "f16" or lc.llama_context_default_params().flash_attn_type != \
                lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
            self._native = Llama(str(self._path), n_ctx=self._n_ctx, n_batch=min(self.n_batch, self._n_ctx),
                                 n_ubatch=min(512, self.n_batch, self._n_ctx), n_threads=self.threads,
                                 n_threads_batch=self.threads, flash_attn=fa, verbose=False, logits_all=True,
                                 type_k=kv_type, type_v=kv_type)
        self._lookup = _RecordedLookup(ngram)
        self._native.draft_model = self._lookup

    def native_generate(self, ids: Sequence[int], n: int, k: int) -> Iterator[int]:
        """``Llama.generate`` greedy (temp 0: llama.cpp's greedy sampler; its penalty stage is a
        no-op at repeat_penalty 1), from an empty cache (``reset`` first, or generate would keep
        the prefix the last request shared). generate never stops at EOS (create_completion
        does), so exactly ``n`` tokens are taken from it; its last round may have verified drafts
        past the n-th, which are not the request's."""
        if self._native is None or self._lookup is None:
            raise MacprofError("native_generate before open_native")
        llm, lookup = self._native, self._lookup
        lookup.num_pred_tokens = k
        lookup.calls = []
        llm.reset()
        prompt = len(ids)
        emitted: list[int] = []
        self._report = None
        if n > 0:
            for token in llm.generate(list(ids), temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
                emitted.append(int(token))
                yield int(token)
                if len(emitted) == n:
                    break
        from macprof.measure.speculative import proposal_rounds

        # a proposal continues a context of length L: it drafts for emitted[L - prompt]
        drafted, accepted = proposal_rounds([(length - prompt, tokens) for length, tokens in lookup.calls], emitted)
        flags = [False] * len(emitted)
        for (length, _), a in zip(lookup.calls, accepted):
            for j in range(length - prompt, length - prompt + a):
                flags[j] = True
        self._report = NativeReport(
            impl=f"llama_cpp.Llama.generate(temp=0), draft_model=LlamaPromptLookupDecoding(max_ngram_size="
                 f"{lookup.max_ngram_size}, num_pred_tokens={k})",
            from_draft=tuple(flags), drafted=tuple(drafted), accepted=tuple(accepted),
            unknown="llama-cpp-python tells no acceptance: each round's proposals are recorded from its draft_model "
                    "call, and its accepted count is the prefix of them the target emitted (greedy verification)")

    def native_report(self) -> NativeReport:
        return self._report or NativeReport(impl="llama_cpp.Llama.generate", unknown="no native request yet")

    # -- memory and facts ----------------------------------------------------------------
    def kv_cache_bytes(self) -> int | None:
        # Size of the sequence's serialised state: the K and V cells in use (plus a small header).
        return int(lc.llama_state_seq_get_size(self.ctx, _SEQ))

    def memory(self) -> dict:
        return {}

    def reset_peak_memory(self) -> None:
        """llama.cpp keeps no peak counter of its own: process RSS covers it."""

    def versions(self) -> dict:
        return {
            "llama_cpp_python": lc.__version__,
            "llama_cpp_system_info": lc.llama_print_system_info().decode(errors="replace").strip(),
            "threads": self.threads,
            "threads_source": self.threads_source,
            "load": self._load,
            "kv_type": self.kv_type,
            **(model_facts(self.model) if self.model else {}),
            "backends": ggml_backends(),
            **ggml_build(),
        }

    def resolved_settings(self) -> dict:
        return dict(self._resolved)

    def close(self) -> None:
        self.close_batch()
        if self._native is not None:
            self._native.close()
            self._native = None
        if self.ctx:
            lc.llama_free(self.ctx)
        if self.model:
            lc.llama_model_free(self.model)
        self.ctx = self.model = None


class _RecordedLookup(LlamaPromptLookupDecoding):
    """llama-cpp-python's LlamaPromptLookupDecoding, each call's proposals recorded (the length of
    the context it was given and what it drafted): llama-cpp-python reports no acceptance, and
    the accepted counts follow from what it drafted (measure/speculative.py proposal_rounds). The
    lookup is its own code, called unchanged."""

    def __init__(self, max_ngram_size: int) -> None:
        super().__init__(max_ngram_size=max_ngram_size, num_pred_tokens=1)
        self.calls: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        out = super().__call__(input_ids, **kwargs)
        self.calls.append((int(input_ids.shape[0]), [int(t) for t in out]))
        return out


def _fill(batch, entries, last: dict | None) -> list[tuple[int, int]]:
    """Write (sequence, position, token) entries into ``batch``; logits are requested for
    every entry (last is None) or only at each sequence's last prompt position. Returns
    (sequence, batch index) of the entries whose logits will be read."""
    outputs = []
    for i, (s, pos, t) in enumerate(entries):
        batch.token[i] = t
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = s
        want = last is None or last[s] == pos
        batch.logits[i] = want
        if want:
            outputs.append((s, i))
    batch.n_tokens = len(entries)
    return outputs


def _decode_batch(ctx, batch, what: str) -> None:
    rc = lc.llama_decode(ctx, batch)
    if rc != 0:
        raise MacprofError(f"llama_decode failed with code {rc} ({what})")


ENGINE = LlamaCppEngine
