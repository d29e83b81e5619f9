"""A local OpenAI-compatible (or Ollama) server as an engine: the client streams HTTP.

A ``ServerEngine`` (engines/base.py): ``request`` sends one streamed request and yields per chunk
that carries text, so the caller stamps each chunk as it is received (t_i: the chunk carrying token i);
the server's own report of the request (token count, prompt and cached tokens, its timings)
is ``last_final`` once the stream has ended. Tokens are never counted here by chunks: ``settle``
(engines/counting.py) settles them from the server's free count or, where that leaves the tokens
per chunk unknown, from an untimed counting request made after the timed one.

Measuring must not change what is measured: a timed request carries what an app's would (the
prompt, greedy, a length) plus what holds EOS off on this server (``eos_keys``: ``ignore_eos``
on llama.cpp's server, ``min_tokens`` on llama-cpp-python's, else ``logit_bias`` on the model's
EOS ids where they are known) and streamed usage; never logprobs, echo or n_probs (wire.COSTLY).

Prompts have an exact token count wherever a tokenizer can be had: the model's own, loaded from
its file (``path`` in models.toml, ``--serve``, or the server's model id resolved through the
model stores; engines/local_tokenizer.py), else the server's tokenize endpoint (llama.cpp's
``/tokenize``, llama-cpp-python's ``/extras/tokenize``: the prompt builder's words are checked
with it, run/prompts.py). Where none can, prompts are plain English words: ``tokenize`` returns
word indices, the length in tokens is what the server reports (``usage.prompt_tokens``) and the
summary warns with the measured range. ``tokenizer_mode`` records which.

A server's cache is not addressable over its API: ``reset`` cannot empty it, so it sends a
short unrelated request (untimed) that displaces a single-slot prompt cache (llama-cpp-python,
mlx_lm.server started with --prompt-cache-size 1); what each request reused is what the server
reports (``cached_tokens``), never assumed. What only an in-process engine does (depth cuts,
batches, logits, drafts) it is not asked: it declares each such capability with the reason it
lacks it; concurrent requests are the ``concurrency`` phase's (``stream`` is thread-safe).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Iterator, Literal, Sequence

from macprof.engines import APIS, counting, wire
from macprof.engines.base import ChatTemplate, EngineSettings
from macprof.engines.capabilities import SAMPLES_IN_CHAT
from macprof.errors import MacprofError

NO_CACHE_API = "a server's cache is not addressable over its API (it cannot be cut back or inspected)"
NO_LOGITS = "a server's logits are not available: the near-tie diagnosis cannot be made"
WORDS = tuple(" " + w for w in (
    "apple river stone cloud garden window silver market letter forest bridge candle summer winter "
    "orange yellow purple animal island planet engine rocket pocket basket kitten rabbit turtle "
    "monkey dragon castle palace temple valley desert ocean harbor meadow thunder shadow mirror "
    "button ribbon pencil marble copper violet crystal feather blanket lantern compass harvest "
    "journey mountain whisper morning evening paper carpet guitar").split())
# the server a --serve kind starts (run/serve.py); a running server is recognised by its
# tokenize endpoint, else it is "openai-compatible"
SERVED_AS = {"mlx": "mlx_lm.server", "llama.cpp": "llama-cpp-python", "llama-server": "llama-server"}
# what makes each name its tokens in an untimed counting request (wire.counting_request_for);
# llama-cpp-python's logprobs cost a vocabulary-wide sort per token, so its counting request
# asks for them only where its plain count does not settle the chunks
NAMES = {"llama-server": "ids-native", "llama-cpp-python": "offsets", "mlx_lm.server": "ids-logprobs",
         "openai-compatible": "ids-logprobs"}
DISPLACE = " harbor lantern compass"  # the untimed request of ``reset``: a short prompt no measured one starts with
EOS_BIAS = -100.0  # OpenAI's "ban" (its range is -100..100): greedy never picks a token 100 logits down
# llama-cpp-python's server says the prefix it kept only in its --verbose log (macprof starts it
# so, run/serve.py): one of these lines per request, printed before it computes the prompt
# (llama_cpp/llama.py generate); a request whose log has its timings but none of them kept nothing
LOG_REUSE = (r"Llama\.generate: (\d+) prefix-match hit", r"Llama\.generate: \d+ prefix-match found but partial kv "
             r"removal not supported")
LOG_DONE = "prompt eval time"  # llama.cpp's timings, printed once a request's generation ends
PROMPT_WORDS = 64  # words enough for varied prompts: each costs a request or two to a server's tokenizer


OLLAMA_CHAT = "the tasks phase through Ollama's API is not built: use its OpenAI API (--api chat)"
APP_REPLIES = "none: the reply ends where the server ends it (its EOS) or at max_tokens, as an app's"


def eos_keys(server: str, n: int, eos_ids: Sequence[int]) -> tuple[dict, str]:
    """The request keys that hold EOS off on this server, and how (recorded with each request;
    whether it worked is checked on each reply's count): ``ignore_eos`` / ``min_tokens`` where
    the server has them, else ``logit_bias`` on the tokenizer's EOS ids where they are known."""
    if server == "llama-server":
        return {"ignore_eos": True}, "ignore_eos (llama.cpp's server)"
    if server == "llama-cpp-python":
        return {"min_tokens": n}, "min_tokens (llama-cpp-python's server)"
    if server == "ollama":
        return {}, "none: Ollama has no way to hold EOS off; the tokens received are measured"
    keys: dict = {} if server == "mlx_lm.server" else {"ignore_eos": True, "min_tokens": n}
    how = "ignore_eos / min_tokens where the server honours them" if keys else ""
    if eos_ids:
        keys["logit_bias"] = {str(i): EOS_BIAS for i in eos_ids}
        how = " and ".join(filter(None, (how, f"logit_bias {EOS_BIAS:g} on the EOS ids {list(eos_ids)}")))
    return keys, (how + " (checked on each reply's count)") if how else \
        "none: the model's EOS ids are unknown (no tokenizer here); the tokens received are measured"


class OpenAIEngine:
    name = "openai"
    kind: Literal["server"] = "server"
    separate_tokenizer = False  # the server holds it
    weights_held: str | None = None  # the server's process holds them, however it does
    capabilities: dict[str, str | None] = {
        "score": "a server gives no logits of every position over its API",
        "batch": "a server batches concurrent requests itself: the concurrency phase measures that",
        "cache_cut": NO_CACHE_API,
        "top2": NO_LOGITS,
        "sample": SAMPLES_IN_CHAT,  # chat(temperature=, seed=): whether the seed is honoured is the server's
        "chat": None,
        "verify": "a server's API gives no greedy choice at every appended position, nor a cache to rewind "
                  "(its own speculative decoding is measured as the server's speed)",
        "native_draft": "a server's own speculative decoding is configured where it starts (--model-draft, "
                        "--draft-model) and measured as its speed: its API neither takes a draft nor tells rounds",
        "prefill": "a server is sent a prompt and always generates: its API computes no prompt alone, and "
                   "takes text, not the random token ids of llama-bench's tests",
    }

    def __init__(self) -> None:
        self.url = ""
        self.model = ""
        self.api = "completions"
        self.timeout = 300.0
        self.timeout_given: float | None = None
        self.server = "openai-compatible"
        self.tokenizer_mode = "words; prompt tokens from usage"
        self.exact_prompts = False  # a tokenizer here (local or the server's) builds prompts of exact length
        self._tokenize_url: tuple[str, str] | None = None  # (url, body key)
        self._detokenize_url: str | None = None
        self._remote = False  # prompts by the server's tokenize endpoint
        self._texts: dict[tuple[int, ...], str] = {}
        self._server_ids: dict[str, list[int]] = {}
        self._dirty = False
        self.displacements = 0  # resets that displaced the server's cache (a counting request's among them)
        self.last_final: wire.Final | None = None
        self.last_chunks: list[wire.Chunk] = []
        self._served_info: dict = {}
        self._local = None  # the model's own tokenizer, where its file is known (engines/local_tokenizer.py)
        self._eos_ids: tuple[int, ...] = ()
        self.eos_how = ""
        self._app_replies = False  # within replies_end_at_eos
        self._counted: dict[tuple[str, int], counting.Counted] = {}

    # -- loading: find the server and its tokenizer ----------------------------------------
    def load_model(self, path: Path, settings: EngineSettings) -> None:
        endpoint = settings.endpoint or {}
        self.url, self.model = str(endpoint.get("url", "")), str(endpoint.get("model", ""))
        self.api = str(endpoint.get("api", "completions"))
        self.timeout = float(endpoint.get("timeout", 300.0))
        given = endpoint.get("timeout_given")
        self.timeout_given = float(given) if isinstance(given, (int, float)) else None  # --timeout, for messages
        self._served_info = dict(endpoint.get("served") or {})
        # the log of a server macprof started: a temporary file, not part of what the run log records
        self._server_log = self._served_info.pop("log_path", None)
        if self.api not in APIS:
            raise MacprofError(f"{self.url}: api {self.api!r} is not one of {', '.join(APIS)}")
        probe = self._root() + "/api/tags" if self.api == "ollama" else self.url.rstrip("/") + "/models"
        try:
            listed = wire.get_json(probe, timeout=10.0)
        except wire.ServerError as exc:
            listed = None
            if not _answers(self._root(), str(exc)):
                raise MacprofError(f"{self.url}: the server does not answer: {exc}") from None
        self._served_info.setdefault("models_listed", model_ids(listed))
        self._find_tokenizer()
        self.server = SERVED_AS.get(str(self._served_info.get("server")), self.server)
        if self.api == "ollama":
            self.server = "ollama"
            self.capabilities = {**self.capabilities, "chat": OLLAMA_CHAT}
        file, how = endpoint.get("file"), "its file"
        if not file and endpoint.get("resolved"):  # the served model id, found in the local stores by the parent
            file, how = endpoint["resolved"]
        if file and self.api != "chat":  # a chat template adds tokens of its own
            from macprof.engines import local_tokenizer

            self._local = local_tokenizer.load(Path(file))
            if self._local is not None:
                self.tokenizer_mode = f"the model's own tokenizer, loaded from {how}: exact prompt lengths"
                self._eos_ids = tuple(local_tokenizer.eos_ids(self._local))
        if self._local is None and self._tokenize_url is not None and self.api != "chat":
            self._remote = True
            self.tokenizer_mode = f"the server's own tokenizer ({self._tokenize_url[0].removeprefix(self._root())}): " \
                                  f"exact prompt lengths"
        self.exact_prompts = self._local is not None or self._remote
        self.eos_how = eos_keys(self.server, 1, self._eos_ids)[1]

    def _root(self) -> str:
        base = self.url.rstrip("/")
        for tail in ("/v1", "/api/v0", "/api"):
            if base.endswith(tail):
                return base[: -len(tail)]
        return base

    def _find_tokenizer(self) -> None:
        """The server's tokenize endpoint, which also says which server it is."""
        for path, key, detok, server in (("/extras/tokenize", "input", "/extras/detokenize", "llama-cpp-python"),
                                         ("/tokenize", "content", "/detokenize", "llama-server")):
            try:
                got = wire.get_json(self._root() + path, timeout=10.0, body={key: " apple", "model": self.model})
            except wire.ServerError:
                continue
            if isinstance(got, dict) and isinstance(got.get("tokens"), list):
                self._tokenize_url, self._detokenize_url = (self._root() + path, key), self._root() + detok
                self.server, self.tokenizer_mode = server, f"words; prompt tokens from usage, else {path}"
                return

    def load_tokenizer(self) -> None:
        pass

    # -- prompts -----------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """The model's tokens where its tokenizer is loaded here, or by the server's tokenize
        endpoint; else word indices, not the model's tokens (prompts are built from plain words;
        see the module's note), and a text that is not made of those words has none."""
        if self._local is not None:
            ids = self._local.tokenize(text)
        elif self._remote:
            ids = self._server_tokens(text)
        else:
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
        if self._remote:
            return self._server_text(ids)
        return "".join(WORDS[i] for i in ids if 0 <= i < len(WORDS))

    def chat(self, messages: Sequence[dict], tools: Sequence[dict], max_tokens: int,
             without_tools: Sequence[dict] = (), temperature: float = 0.0, seed: int | None = None) -> dict:
        """One chat completion as an app sends it (not streamed, the server's own EOS and
        template), greedy (temperature 0) unless ``temperature`` and ``seed`` are given: then
        the OpenAI ``temperature`` and ``seed`` fields (a server that ignores ``seed`` gives
        replies no rerun reproduces; the caller records what was sent). With the OpenAI
        ``tools`` field where the task has tools. A server that refuses
        the field is asked again without it, as ``without_tools`` (the tools described in a system
        turn: the caller's), and ``tools_refused`` says why. -> text, tool_calls, usage counts, finish_reason,
        and ``claims``: what the server's usage said that is no count (wire.chat_reply). A reply
        of another shape is a MacprofError naming what is wrong."""
        if self.capabilities["chat"]:
            raise MacprofError(self.capabilities["chat"])
        url = self.url.rstrip("/") + "/chat/completions"
        body: dict = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens,
                      "temperature": temperature or 0, "stream": False, **({"seed": seed} if seed is not None else {})}
        refused = None
        payload = json.dumps({**body, "tools": list(tools)} if tools else body).encode()  # its size bounds the counts
        try:
            got = wire.get_json(url, timeout=self.timeout, body=payload)
        except wire.ServerError as exc:
            if not tools:
                raise MacprofError(f"chat completion: {exc}") from None
            refused = f"the server refused the tools field ({exc})"
            payload = json.dumps({**body, "messages": list(without_tools)}).encode()
            try:
                got = wire.get_json(url, timeout=self.timeout, body=payload)
            except wire.ServerError as again:
                raise MacprofError(f"chat completion: {again}") from None
        try:  # its shape and its counts checked where they enter (wire.chat_reply)
            reply = wire.chat_reply(got, max_tokens, len(payload))
        except wire.ServerError as exc:
            raise MacprofError(f"chat completion: {exc}") from None
        return {"text": reply.text, "tool_calls": list(reply.tool_calls), "finish_reason": reply.finish_reason,
                "completion_tokens": reply.completion_tokens, "prompt_tokens": reply.prompt_tokens,
                "claims": reply.claims, "tools_refused": refused}

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat prompt's ids as the server reads its text: its special tokens parsed,
        BOS added as the model adds it (llama-cpp-python's and mlx_lm.server's completions do),
        by the model's own tokenizer where it is loaded here; else as ``tokenize``."""
        if self._local is None:
            return self.tokenize(text)
        ids = self._local.tokenize_chat(text)
        self._texts[tuple(ids)] = text
        return ids

    @property
    def eos_ids(self) -> set[int]:
        return set(self._eos_ids)

    def chat_template(self) -> ChatTemplate | None:
        """The model's own template where its file is known here and requests send text
        (completions): macprof renders the prompt as an app that sends text would. None where the
        server applies its model's template (a chat request), or no file is known."""
        if self._local is None or self.api == "chat":
            return None
        return self._local.chat_template()

    @property
    def vocab_size(self) -> int:
        if self._local is not None:
            return self._local.vocab_size
        return 0 if self._remote else len(WORDS)

    def prompt_candidates(self) -> list[int] | None:
        """With the server's tokenizer: the ids of a sample English text for the prompt builder to
        pick its words from (a whole-vocabulary scan would be thousands of requests); None else."""
        if not self._remote:
            return None
        from importlib import resources

        text = resources.files("macprof").joinpath("data/quality.txt").read_text(encoding="utf-8")
        return list(dict.fromkeys(self._server_tokens(text)))

    @property
    def prompt_words(self) -> int | None:
        return PROMPT_WORDS if self._remote else None

    def _server_tokens(self, text: str) -> list[int]:
        if text not in self._server_ids:
            assert self._tokenize_url is not None
            url, key = self._tokenize_url
            try:
                got = wire.get_json(url, timeout=30.0, body={key: text, "add_special": True, "model": self.model})
            except wire.ServerError as exc:
                raise MacprofError(f"{url}: the server's tokenizer failed: {exc}") from None
            tokens = got.get("tokens") if isinstance(got, dict) else None
            if not isinstance(tokens, list) or not all(wire._int(t) is not None for t in tokens):  # ids: within 64 bits
                raise MacprofError(f"{url}: the server's tokenizer answered no token list")
            self._server_ids[text] = tokens
        return list(self._server_ids[text])

    def _server_text(self, ids: Sequence[int]) -> str:
        """The server's detokenization; empty where it fails (a piece of a character)."""
        if self._detokenize_url is None:
            return ""
        try:
            got = wire.get_json(self._detokenize_url, timeout=30.0, body={"tokens": list(ids), "model": self.model})
        except wire.ServerError:
            return ""
        text = got.get("content", got.get("text")) if isinstance(got, dict) else None
        return text if isinstance(text, str) else ""

    def prompt_tokens(self, text: str) -> int | None:
        """The prompt's length in the model's tokens by the server's own tokenize endpoint
        (asked before the timed span); None where it has none."""
        if self._tokenize_url is None:
            return None
        if self._remote:
            return len(self._server_tokens(text))
        url, key = self._tokenize_url
        try:
            got = wire.get_json(url, timeout=30.0, body={key: text, "add_special": True, "model": self.model})
        except wire.ServerError:
            return None
        tokens = got.get("tokens") if isinstance(got, dict) else None
        return len(tokens) if isinstance(tokens, list) else None

    # -- requests ----------------------------------------------------------------------------
    def eos_keys(self, n: int) -> dict:
        return eos_keys(self.server, n, self._eos_ids)[0] if self.holds_eos else {}

    @property
    def holds_eos(self) -> bool:
        """Whether requests hold the server's EOS off (exact lengths: the speed phases); not while
        ``replies_end_at_eos`` (a conversation's replies end where the server ends them, as an app's)."""
        return not self._app_replies

    @contextlib.contextmanager
    def replies_end_at_eos(self) -> Iterator[None]:
        """Within it, every request (timed, counting, a natural state put back) ends where the
        server ends it, its EOS or max_tokens: an app's reply; ``eos_how`` says so."""
        how = self.eos_how
        self._app_replies, self.eos_how = True, APP_REPLIES
        try:
            yield
        finally:
            self._app_replies, self.eos_how = False, how

    @property
    def renders_messages(self) -> bool:
        """Whether the server applies its model's template to a conversation's messages (--api
        chat): the prompt's text and ids are then the server's, not known here."""
        return self.api == "chat"

    def stream(self, text: str, n: int, messages: Sequence[dict] | None = None) -> Iterator[wire.Chunk | wire.Final]:
        """One streamed timed request (thread-safe: it shares nothing with other calls)."""
        url, body = wire.request_for(self.api, self.url, self.model, text, n, self.eos_keys(n),
                                     list(messages) if messages else None)
        return wire.stream(url, body, self.timeout, ndjson=self.api == "ollama", given_s=self.timeout_given)

    def request(self, text: str, n: int, messages: Sequence[dict] | None = None) -> Iterator[int]:
        """Yields, per chunk with text, the tokens the server says it carries (0: not said);
        the chunks themselves are ``last_chunks``, the server's report ``last_final``.
        ``messages``: a conversation's (``text`` their rendering), sent as they are where the
        server renders them (``renders_messages``)."""
        self.last_final, self.last_chunks = None, []
        self._dirty = True
        start = self._log_size()
        for item in self.stream(text, n, messages if self.renders_messages else None):
            if isinstance(item, wire.Final):
                self.last_final = item
            else:
                self.last_chunks.append(item)
                yield item.tokens or 0
        if self.last_final is not None and self.last_final.cached_tokens is None and start is not None:
            self._reuse_from_log(start, self.last_final)

    def _log_size(self) -> int | None:
        """Where the server's log ends now, where it is read (llama-cpp-python's: LOG_REUSE)."""
        if not self._server_log or self.server != "llama-cpp-python":
            return None
        try:
            return os.path.getsize(self._server_log)
        except OSError:
            return None

    def _reuse_from_log(self, start: int, final: wire.Final) -> None:
        """The request's reuse as the server's log says it, from what it wrote since ``start``
        (one request at a time: this engine's ``request``); unknown where the log says neither."""
        import re

        try:
            with open(self._server_log or "", "rb") as f:
                f.seek(start)
                text = f.read(1 << 20).decode("utf-8", errors="replace")
        except OSError:
            return
        hit = re.search(LOG_REUSE[0], text)
        if hit:  # checked as the reply's counts are: within the prompt, else the log's claim
            final.cached_tokens = int(hit.group(1)[:20])  # 20 digits are past any count already
            final.cached_source = f"the server's log: {hit.group(0)[:200]!r}"
            wire.bound(final)
            return
        refused = re.search(LOG_REUSE[1], text)
        if refused or LOG_DONE in text:  # it computed the whole prompt
            final.cached_tokens = 0
            final.cached_source = (f"the server's log: {refused.group(0)!r}" if refused else
                                   f"the server's log: no prefix-match line before its timings ({LOG_DONE!r})")

    # -- counting, after the timed request --------------------------------------------------
    def settle(self, text: str, n: int, chunks: Sequence[wire.Chunk], final: wire.Final,
               budget_s: float | None = None, messages: Sequence[dict] | None = None) -> counting.Settled:
        """The tokens of a timed request and of each of its chunks: the server's free report
        where it settles them, else an untimed counting request (engines/counting.py); within
        ``budget_s`` seconds (what the request's time limit leaves)."""
        texts = [c.text for c in chunks]
        named = [c.tokens for c in chunks]
        if chunks and all(k is not None for k in named):  # the server named each chunk's tokens itself
            per_chunk = [int(k or 0) for k in named]
            return counting.Settled(final.completion_tokens if final.completion_tokens is not None else sum(per_chunk),
                                    final.count_source, per_chunk, "reported per chunk")
        free, source = final.completion_tokens, final.count_source
        if not counting.needs_counting(len(texts), free) or self.api == "ollama":  # Ollama: eval_count is all it gives
            return counting.settle(texts, free, source, None)
        counted, error = self._count(text, n, texts, budget_s if budget_s is not None else self.timeout,
                                     list(messages) if messages and self.renders_messages else None)
        return counting.settle(texts, free, source, counted, error)

    def _count(self, text: str, n: int, texts: list[str], budget_s: float,
               messages: list[dict] | None = None) -> tuple[counting.Counted | None, str | None]:
        """The counting request for (``text``, ``n``), made once per prompt while its text is the
        timed request's; after a displacing request, so that it computes the prompt from scratch."""
        joined = "".join(texts)
        hit = self._counted.get((text, n))
        if hit is not None and counting.same_text(hit.text, joined):
            return hit, None
        end = time.monotonic() + budget_s
        self._dirty = True
        self.reset()
        names = NAMES.get(self.server)
        try:
            if self.server == "llama-cpp-python":  # its plain count first: logprobs cost it a sort per token
                got = self._reply(text, n, None, end, messages)
                if got.completion_tokens != len(texts) and counting.same_text(got.text, joined):
                    got = self._reply(text, n, names, end, messages)
            else:
                try:
                    got = self._reply(text, n, names, end, messages)
                except wire.ServerError:
                    if names is None or self.server != "openai-compatible":
                        raise
                    got = self._reply(text, n, None, end, messages)  # a server that refuses logprobs: its count only
        except wire.ServerError as exc:
            return None, f"the counting request failed: {exc}"
        self._dirty = True
        counted = self._counted_from(got)
        self._counted[(text, n)] = counted
        return counted, None

    def _reply(self, text: str, n: int, names: str | None, end: float, messages: list[dict] | None = None) -> wire.Reply:
        left = end - time.monotonic()
        if left <= 0:
            raise wire.ServerError("no time left within the request's limit (--timeout)")
        url, body = wire.counting_request_for(self.api, self.url, self.model, text, n, self.eos_keys(n), names,
                                              messages)
        return wire.reply(wire.get_json(url, timeout=left, body=body))

    def _counted_from(self, got: wire.Reply) -> counting.Counted:
        if got.ids is not None:
            decode = self._local.detokenize if self._local is not None else (
                self._server_text if self._detokenize_url else None)
            total = got.completion_tokens if got.completion_tokens is not None else len(got.ids)
            if decode is not None:
                return counting.Counted(got.text, total, counting.prefixes_from_ids(got.ids, decode), "ids")
            placed = counting.prefixes_from_pieces(got.pieces) if got.pieces else None
            if placed is not None:  # no tokenizer here: the tokens' raw strings the server named
                return counting.Counted(got.text, total, placed, "raw token strings")
            return counting.Counted(got.text, total)
        if got.offsets is not None:
            return counting.Counted(got.text, got.completion_tokens if got.completion_tokens is not None
                                    else len(got.offsets), counting.prefixes_from_offsets(got.text, got.offsets),
                                    "text offsets")
        return counting.Counted(got.text, got.completion_tokens)

    def reset(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self.displacements += 1
        slots, _ = self.cache_holds()
        try:  # displace what the server cached, untimed (see the module's note): one request per prompt it holds
            for k in range(slots or 1):
                for _ in self.stream(DISPLACE + (WORDS[k % len(WORDS)] if k else ""), 1):
                    pass
        except wire.ServerError:
            pass  # the next request meets the same server and records its own failure

    @property
    def reuse_unreported(self) -> str | None:
        """Why the last request's reused tokens are unknown (the server's reply said none); None
        where it said. Never guessed from TTFT."""
        f = self.last_final
        if f is not None and f.cached_tokens is not None:
            return None
        if f is not None and "cached_tokens" in f.claims:  # wire.bound: impossible, never a figure
            return f"the server's count of reused tokens is impossible: {f.claims['cached_tokens']}"
        if self.server == "llama-cpp-python":
            return ("llama-cpp-python's server reports prompt and completion tokens only: the prefix it kept "
                    "is printed to its --verbose log, not returned" + (
                        "; its log said neither" if self._server_log else
                        " (a server started outside macprof: its log is not read here)"))
        return ("the server's reply carried no reused-token count (usage.prompt_tokens_details.cached_tokens, "
                "timings.cache_n)")

    def displacing_ids(self) -> list[int]:
        """The ids of ``reset``'s request, which the server's cache holds after it (with the one
        token it generates): what an "emptied" cache may still share with a prompt (its BOS)."""
        return self.tokenize(DISPLACE)

    def cache_holds(self) -> tuple[int | None, str]:
        """How many conversations the server's cache holds at once (its slots, or the prompts its
        prompt cache keeps), and how that is known; None where it is not (a server started by hand)."""
        slots = self._served_info.get("prompt_slots")
        how = str(self._served_info.get("prompt_slots_how") or "")
        if isinstance(slots, int) and not isinstance(slots, bool):
            return slots, how
        return None, how or "not known: a server started outside macprof says nothing of its slots or prompt cache"

    def memory(self) -> dict:
        """None of this process's: the server's memory is its process's (the run samples its pid)."""
        return {}

    def reset_peak_memory(self) -> None:
        """No peak counter here to restart (see ``memory``)."""

    def versions(self) -> dict:
        return {"openai-endpoint": self.url, "api": self.api, "model": self.model, "server_kind": self.server,
                "tokenizer": self.tokenizer_mode, "eos": self.eos_how,
                **{k: v for k, v in self._served_info.items() if v is not None}}

    def resolved_settings(self) -> dict:
        """Configured where the server started, and not told over its API."""
        return {}

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


def model_ids(listed) -> list[str]:
    """Model names a server lists (OpenAI ``data[].id``, Ollama ``models[].name``)."""
    if not isinstance(listed, dict):
        return []
    items = listed.get("data") or listed.get("models") or []
    if not isinstance(items, list):  # a server's nonsense is no model list
        return []
    return [str(m.get("id") or m.get("name")) for m in items if isinstance(m, dict)][:20]


ENGINE = OpenAIEngine
