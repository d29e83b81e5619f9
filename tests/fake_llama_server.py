"""A stand-in for llama-cpp-python's server (``python -m llama_cpp.server --model PATH --port N``),
for the tests that need a server process of their own (tests/test_share_kinds.py): it lists the
model as llama-cpp-python does when no alias is given (its full path), streams OpenAI
completions with usage, and, with ``--fail-every N``, answers every Nth request with an error
whose message quotes ``--message``. Standard library only."""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def handler(model: str, fail_every: int, message: str):
    state = {"n": 0, "lock": threading.Lock()}

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self._json(200, {"object": "list", "data": [{"id": model, "owned_by": message}]})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if not self.path.endswith("/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            with state["lock"]:
                state["n"] += 1
                fail = fail_every and state["n"] % fail_every == 0
            if fail:
                self._json(500, {"error": {"message": message}})
                return
            n = int(req.get("max_tokens") or 1)
            words = str(req.get("prompt", "")).split()
            self.send_response(200)
            self.end_headers()
            for i in range(n):
                self._send({"choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}]})
            self._send({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                        "timings": {"prompt_n": len(words) + 1, "prompt_ms": 1.0, "predicted_n": n, "predicted_ms": 1.0,
                                    "note": message}})
            self._send({"choices": [], "usage": {"prompt_tokens": len(words) + 1, "completion_tokens": n}})
            self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def _send(self, obj: dict) -> None:
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

    return H


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--message", default="")
    args, _ = p.parse_known_args()  # llama_cpp.server's other options are taken and ignored
    ThreadingHTTPServer((args.host, args.port), handler(args.model, args.fail_every, args.message)).serve_forever()


if __name__ == "__main__":
    main()
