"""A fake OpenAI-compatible server on 127.0.0.1 with a fixed rhythm, for `macprof overhead
--endpoint` (where no real server should set the pace) and for the tests of the server path.

``python -m macprof.bench.fake_server [--token-ms 5] [--prompt-ms 0.05] [--no-usage]
[--tokenizer llama.cpp|llama-cpp-python] [--eos-after N] [--group K]`` prints its base URL, then
serves until it is killed.

Its "model" is a word-level tokenizer (a BOS ``<s>``, id 1, then each space-led word one token,
ids given in order of first sight, 0 the EOS ``</s>``) and a generator that answers " w0 w1 w2
..." one token per ``token_ms`` after ``prompt_ms`` per prompt token. Options make it behave like
the servers macprof meets: ``usage`` off (llama-cpp-python streams no count), a tokenize
endpoint (llama.cpp's ``/tokenize`` or llama-cpp-python's ``/extras/tokenize``, with their
detokenize), EOS after N tokens unless the request holds it off in a way it ``honours``
(``ignore_eos``, ``min_tokens``, a ``logit_bias`` on id 0; mlx_lm.server honours only the last),
its EOS then counted in ``usage`` or not (``count_eos``), every K-th chunk carrying two tokens
(a held-back multi-byte character), and ``cache``: a prompt cache of that many entries (1: as
llama-cpp-python's and mlx_lm.server's as macprof starts them; each the prompt and generated ids of
a request; a prompt sharing a prefix with one computes only the rest), what it reused in
``usage.prompt_tokens_details.cached_tokens`` (as mlx_lm.server reports it) where usage is on.
Non-streamed replies are counting requests: their usage, and with ``logprobs`` the ids
(``logprobs: true``) or the text offsets (``logprobs: 0``). Every request body is kept in
``state["bodies"]``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EOS, BOS = "</s>", "<s>"
HOLDS = ("ignore_eos", "min_tokens", "logit_bias")
TOKENIZE = {"llama.cpp": ("/tokenize", "content", "/detokenize", "content"),
            "llama-cpp-python": ("/extras/tokenize", "input", "/extras/detokenize", "text")}


def new_state(token_ms: float = 5.0, prompt_ms: float = 0.05, usage: bool = True, tokenizer: str | None = None,
              eos_after: int | None = None, group: int = 0, honours: tuple[str, ...] = HOLDS,
              count_eos: bool = True, cache: int = 0) -> dict:
    return {"token_ms": token_ms, "prompt_ms": prompt_ms, "usage": usage, "tokenizer": tokenizer,
            "eos_after": eos_after, "group": group, "honours": honours, "count_eos": count_eos, "cache": cache,
            "held": [], "vocab": {EOS: 0, BOS: 1}, "bodies": [], "lock": threading.Lock()}


def _reuse(state: dict, ids: list[int], generated: list[int]) -> int | None:
    """The cache's reuse for a prompt of ``ids``: the longest common prefix with an entry it holds
    (the last prompt token always computed); then it holds ``ids`` and ``generated`` too, the least
    recently stored entry out beyond ``cache`` entries (True: one). None without a cache."""
    if not state["cache"]:
        return None
    with state["lock"]:
        best = 0
        for held in state["held"]:
            n = 0
            while n < min(len(held), len(ids) - 1) and held[n] == ids[n]:
                n += 1
            best = max(best, n)
        state["held"] = (state["held"] + [ids + generated])[-int(state["cache"]):]
    return best


def _ids(state: dict, text: str) -> list[int]:
    with state["lock"]:
        vocab = state["vocab"]
        return [vocab.setdefault(w, len(vocab)) for w in re.findall(r" ?\S+", text)]


def _piece(state: dict, i: int) -> str:
    with state["lock"]:
        return next((w for w, j in state["vocab"].items() if j == i), "")


def _length(body: dict, state: dict) -> int:
    """Tokens it will generate: as asked, or up to its EOS where nothing holds that off."""
    n = int(body.get("max_tokens") or body.get("n_predict") or 16)
    ways = {"ignore_eos": bool(body.get("ignore_eos")), "min_tokens": (body.get("min_tokens") or 0) >= n,
            "logit_bias": float((body.get("logit_bias") or {}).get("0", 0)) <= -100}
    held = any(ways[k] for k in state["honours"])
    return n if state["eos_after"] is None or held else min(n, state["eos_after"])


def handler(state: dict):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def _json(self, obj, status: int = 200) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._json({"object": "list", "data": [{"id": "fake-model"}]})
            elif self.path == "/health":
                self._json({"status": "ok"})
            else:
                self._json({"error": "not found"}, 404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with state["lock"]:
                state["bodies"].append({"path": self.path, **body})
            shape = TOKENIZE.get(state["tokenizer"] or "")
            if shape and self.path == shape[0]:
                return self._json({"tokens": [1] + _ids(state, str(body.get(shape[1], "")))})
            if shape and self.path == shape[2]:
                return self._json({shape[3]: "".join(_piece(state, i) for i in body.get("tokens", []) if i > 1)})
            if not self.path.endswith(("/completions", "/completion")):
                return self._json({"error": "not found"}, 404)
            prompt = str(body.get("prompt") or " ".join(m.get("content", "") for m in body.get("messages", [])))
            ids = [1] + _ids(state, prompt)  # its BOS, as the tokenize endpoint counts it
            n_prompt = len(ids)
            n = _length(body, state)
            words = [f" w{i}" for i in range(n)]
            stopped = n < int(body.get("max_tokens") or 16)
            cached = _reuse(state, ids, _ids(state, "".join(words)))
            time.sleep((n_prompt - (cached or 0)) * state["prompt_ms"] / 1e3)
            details = {"prompt_tokens_details": {"cached_tokens": cached}} if cached is not None else {}
            if not body.get("stream"):
                return self._reply(body, words, n_prompt, stopped)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            i = 0
            while i < n:
                k = 2 if state["group"] and (i + 1) % state["group"] == 0 and i + 1 < n else 1
                time.sleep(k * state["token_ms"] / 1e3)
                self._send({"choices": [{"index": 0, "text": "".join(words[i:i + k]), "finish_reason": None}]})
                i += k
            self._send({"choices": [{"index": 0, "text": "", "finish_reason": "stop" if stopped else "length"}]})
            if state["usage"] and (body.get("stream_options") or {}).get("include_usage"):
                self._send({"choices": [], "usage": {"prompt_tokens": n_prompt, **details,
                                                     "completion_tokens": n + (stopped and state["count_eos"])}})
            self.wfile.write(b"data: [DONE]\n\n")

        def _reply(self, body: dict, words: list[str], n_prompt: int, stopped: bool) -> None:
            text = "".join(words)
            if self.path == "/completion":  # llama.cpp's own endpoint: ids with return_tokens
                return self._json({"content": text, "tokens_predicted": len(words),
                                   **({"tokens": _ids(state, text)} if body.get("return_tokens") else {})})
            choice: dict = {"index": 0, "text": text, "finish_reason": "stop" if stopped else "length"}
            if body.get("logprobs") is True:  # ids, the EOS among them (mlx_lm.server's shape), and with
                # top_logprobs each token's raw string in a byte-level BPE's alphabet ("Ġ" a space)
                ids = _ids(state, text) + ([0] if stopped and state["count_eos"] else [])
                choice["logprobs"] = {"content": [{"id": i, "logprob": 0.0, **(
                    {"token": _piece(state, i).replace(" ", "Ġ")} if body.get("top_logprobs") else {})} for i in ids]}
            elif body.get("logprobs") == 0:  # where each token starts (llama-cpp-python's shape)
                offsets, at = [], len(str(body.get("prompt", "")))
                for w in words:
                    offsets.append(at)
                    at += len(w)
                choice["logprobs"] = {"tokens": words, "text_offset": offsets}
            self._json({"choices": [choice], "usage": {"prompt_tokens": n_prompt,
                                                       "completion_tokens": len(words) + (stopped and state["count_eos"])}})

        def _send(self, obj: dict) -> None:
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

    return Handler


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token-ms", type=float, default=5.0)
    ap.add_argument("--prompt-ms", type=float, default=0.05, help="per prompt token")
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--tokenizer", choices=sorted(TOKENIZE))
    ap.add_argument("--eos-after", type=int)
    ap.add_argument("--group", type=int, default=0)
    ap.add_argument("--cache", type=int, default=0, help="prompt cache entries, its reuse reported in usage [0: none]")
    args = ap.parse_args(argv)
    state = new_state(args.token_ms, args.prompt_ms, not args.no_usage, args.tokenizer, args.eos_after, args.group,
                      cache=args.cache)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(state))
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
