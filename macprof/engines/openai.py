"""A local OpenAI-compatible (or Ollama) server as an engine: the client streams HTTP.

``generate`` sends one streamed request and yields one ``wire.Chunk`` per chunk that carries
text, so the caller stamps each chunk as it is received (t_i: the chunk carrying token i);
the server's own report of the request (token count, prompt and cached tokens, its timings)
is ``last_final`` once the stream has ended. Tokens are never counted here by chunks
(macprof/engines/wire.py says where each count comes from).

Prompts are built from plain English words: ``tokenize`` returns word indices, not the model's
tokens, so a prompt's length in words is what macprof asks for and its length in tokens is what
the server reports (``usage.prompt_tokens``), else what the server's own tokenize endpoint counts
(llama-cpp-python's ``/extras/tokenize``, llama.cpp's ``/tokenize``), else unknown.
``tokenizer_mode`` records which.

A server's cache is not addressable over its API: ``reset`` cannot empty it, so it sends a
short unrelated request (untimed) that displaces a single-slot prompt cache (llama-cpp-python,
mlx_lm.server started with --prompt-cache-size 1); what each request reused is what the server
reports (``cached_tokens``), never assumed. Depth cuts and in-process batches are refused with
the reason; concurrent requests are the ``concurrency`` phase's (``open_stream`` is thread-safe).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

from macprof.engines import wire
from macprof.engines.base import CacheCutRefused, EngineSettings, TopTwo
from macprof.errors import MacprofError

NO_CACHE_API = "a server's cache is not addressable over its API (it cannot be cut back or inspected)"
WORDS = tuple(" " + w for w in (
    "apple river stone cloud garden window silver market letter forest bridge candle summer winter "
    "orange yellow purple animal island planet engine rocket pocket basket kitten rabbit turtle "
    "monkey dragon castle palace temple valley desert ocean harbor meadow thunder shadow mirror "
    "button ribbon pencil marble copper violet crystal feather blanket lantern compass harvest "
    "journey mountain whisper morning evening paper carpet guitar").split())


class OpenAIEngine:
    name = "openai"
    separate_tokenizer = False  # the server holds it
    batch_unsupported: str | None = "a server batches concurrent requests itself: the concurrency phase measures that"

    def __init__(self) -> None:
        self.url = ""
        self.model = ""
        self.api = "completions"
        self.timeout = 300.0
        self.tokenizer_mode = "words; prompt tokens from usage"
        self._tokenize_url: tuple[str, str] | None = None  # (url, body key)
        self._texts: dict[tuple[int, ...], str] = {}
        self._dirty = False
        self.last_final: wire.Final | None = None
        self.last_chunks: list[wire.Chunk] = []
        self._served_info: dict = {}
        self._local = None  # the model's own tokenizer, where its file is known (engines/local_tokenizer.py)

    # -- loading: find the server and its tokenizer ----------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        endpoint = settings.endpoint or {}
        self.url, self.model = str(endpoint.get("url", "")), str(endpoint.get("model", ""))
        self.api = str(endpoint.get("api", "completions"))
        self.timeout = float(endpoint.get("timeout", 300.0))
        self._served_info = dict(endpoint.get("served") or {})
        if self.api not in wire.APIS:
            raise MacprofError(f"{self.url}: api {self.api!r} is not one of {', '.join(wire.APIS)}")
        probe = self._root() + "/api/tags" if self.api == "ollama" else self.url.rstrip("/") + "/models"
        try:
            listed = wire.get_json(probe, timeout=10.0)
        except wire.ServerError as exc:
            listed = None
            if not _answers(self._root(), str(exc)):
                raise MacprofError(f"{self.url}: the server does not answer: {exc}") from None
        self._served_info.setdefault("models_listed", _model_ids(listed))
        self._find_tokenizer()
        if endpoint.get("file") and self.api != "chat":  # a chat template adds tokens of its own
            from macprof.engines import local_tokenizer

            self._local = local_tokenizer.load(Path(endpoint["file"]))
            if self._local is not None:
                self.tokenizer_mode = "the model's own tokenizer, loaded from its file: exact prompt lengths"

    def _root(self) -> str:
        base = self.url.rstrip("/")
        for tail in ("/v1", "/api/v0", "/api"):
            if base.endswith(tail):
                return base[: -len(tail)]
        return base

    def _find_tokenizer(self) -> None:
        for path, key in (("/extras/tokenize", "input"), ("/tokenize", "content")):
            try:
                got = wire.get_json(self._root() + path, timeout=10.0, body={key: " apple", "model": self.model})
            except wire.ServerError:
                continue
            if isinstance(got, dict) and isinstance(got.get("tokens"), list):
                self._tokenize_url, self.tokenizer_mode = (self._root() + path, key), f"words; prompt tokens from usage, else {path}"
                return

    def load_tokenizer(self) -> None:
        pass

    # -- prompts -----------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """The model's tokens where its tokenizer is loaded here; else word indices, not the
        model's tokens (prompts are built from plain words; see the module's note), and a text
        that is not made of those words has none."""
        if self._local is not None:
            ids = self._local.tokenize(text)
            self._texts[tuple(ids)] = text
            return ids
        words = text.split()
        ids = [WORDS.index(" " + w) for w in words] if all(" " + w in WORDS for w in words) else []
        self._texts[tuple(ids)] = text
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        known = self._texts.get(tuple(ids))
        if known is not None:
            return known
        if self._local is not None:
            return self._local.detokenize(ids)
        return "".join(WORDS[i] for i in ids if 0 <= i < len(WORDS))

    @property
    def vocab_size(self) -> int:
        return self._local.vocab_size if self._local is not None else len(WORDS)

    def server_prompt_tokens(self, text: str) -> int | None:
        """The prompt's length in the model's tokens by the server's own tokenize endpoint
        (asked before the timed span); None where it has none."""
        if self._tokenize_url is None:
            return None
        url, key = self._tokenize_url
        try:
            got = wire.get_json(url, timeout=30.0, body={key: text, "model": self.model})
        except wire.ServerError:
            return None
        tokens = got.get("tokens") if isinstance(got, dict) else None
        return len(tokens) if isinstance(tokens, list) else None

    # -- requests ----------------------------------------------------------------------------
    def open_stream(self, text: str, n: int) -> Iterator[wire.Chunk | wire.Final]:
        """One streamed request (thread-safe: it shares nothing with other calls)."""
        logprobs = self._tokenize_url is not None and self._tokenize_url[0].endswith("/extras/tokenize")
        url, body = wire.request_for(self.api, self.url, self.model, text, n, logprobs)
        return wire.stream(url, body, self.timeout, ndjson=self.api == "ollama")

    def generate(self, ids: Sequence[int], n: int) -> Iterator[int]:
        """Yields, per chunk with text, the tokens the server says it carries (0: not said);
        the chunks themselves are ``last_chunks``, the server's report ``last_final``."""
        text = self._texts.get(tuple(ids))
        if text is None:
            text = self.detokenize(ids)
        self.last_final, self.last_chunks = None, []
        self._dirty = True
        for item in self.open_stream(text, n):
            if isinstance(item, wire.Final):
                self.last_final = item
            else:
                self.last_chunks.append(item)
                yield item.tokens or 0

    @property
    def reused_tokens(self) -> int:
        f = self.last_final
        return f.cached_tokens if f is not None and f.cached_tokens is not None else 0

    def reset(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        try:  # displace what the server cached, untimed (see the module's note)
            for _ in self.open_stream(" harbor lantern compass", 1):
                pass
        except wire.ServerError:
            pass  # the next request meets the same server and records its own failure

    def cached_tokens(self) -> int:
        return 0

    def cut_refusal(self, n_tokens: int) -> str | None:
        return NO_CACHE_API

    def truncate(self, n_tokens: int) -> None:
        raise CacheCutRefused(NO_CACHE_API)

    @property
    def reuse_refused(self) -> str | None:
        return None

    def open_batch(self, size: int, tokens_per_seq: int) -> None:
        raise MacprofError(self.batch_unsupported)

    def generate_batch(self, prompts: Sequence[Sequence[int]], n: int) -> Iterator[list[int]]:
        raise MacprofError(self.batch_unsupported)

    def close_batch(self) -> None:
        pass

    def top2(self, ids: Sequence[int]) -> TopTwo:
        raise MacprofError("a server's logits are not available: the near-tie diagnosis cannot be made")

    def kv_cache_bytes(self) -> int | None:
        return None

    def memory(self) -> dict:
        return {}

    def reset_peak_memory(self) -> None:
        pass

    def versions(self) -> dict:
        return {"openai-endpoint": self.url, "api": self.api, "model": self.model,
                "tokenizer": self.tokenizer_mode, **{k: v for k, v in self._served_info.items() if v is not None}}

    def close(self) -> None:
        if self._local is not None:
            self._local.close()


def _answers(root: str, probe_error: str) -> bool:
    """Whether a server whose model list failed still answers: an answer that is not a model
    list, or its /health (mlx_lm.server's /v1/models fails without a Hugging Face cache)."""
    if "JSONDecodeError" in probe_error:
        return True
    try:
        wire.get_json(root + "/health", timeout=10.0)
    except wire.ServerError:
        return False
    return True


def _model_ids(listed) -> list[str]:
    """Model names a server lists (OpenAI ``data[].id``, Ollama ``models[].name``)."""
    if not isinstance(listed, dict):
        return []
    items = listed.get("data") or listed.get("models") or []
    return [str(m.get("id") or m.get("name")) for m in items if isinstance(m, dict)][:20]


ENGINE = OpenAIEngine
