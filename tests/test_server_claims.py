"""Issue 37 (rows 3 and 6; classes 3 and 4): a server's reply is untrusted input. A reply of
another shape fails its request with one error naming what was wrong (never an
AttributeError/TypeError that ends the phase), and every count it reports is checked where it
enters (engines/wire.py ``_count`` and ``bound``): a non-negative integer within what the
request allows, else the server's claim, kept with a flag and never summarised as a measurement."""

from __future__ import annotations

import json

import pytest

from macprof.engines import wire
from macprof.store import runlog
from tests.conftest import chat_completions_server
from tests.test_run import macprof

OK = {"choices": [{"message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 20, "completion_tokens": 1}}
SENT = len(json.dumps({"messages": [{"role": "user", "content": "2 + 2?"}]}).encode())  # the request's body, its bytes


@pytest.mark.parametrize("reply, named", [
    ([1, 2], "the reply is a list, not an object"),
    ({"choices": [1]}, "choices[0] is an integer, not an object"),
    ({"choices": "abc"}, "choices is a string, not a list"),
    ({"choices": []}, "choices is an empty list"),
    ({}, "choices is null, not a list"),
    ({"choices": [{"finish_reason": "stop"}]}, "choices[0].message is null, not an object"),
    ({"choices": [{"message": {"content": [{"type": "text", "text": "4"}]}}]},
     "choices[0].message.content is a list, not a string"),
    ({"choices": [{"message": {"content": 4}}]}, "choices[0].message.content is an integer, not a string"),
    ({"choices": [{"message": {"content": "4"}, "finish_reason": {"why": 1}}]},
     "choices[0].finish_reason is an object, not a string"),
    ({"choices": [{"message": {"tool_calls": {"name": "f"}}}]}, "choices[0].message.tool_calls is an object"),
    ({"choices": [{"message": {"tool_calls": ["f"]}}]}, "choices[0].message.tool_calls[0] is a string"),
    ({"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]},
     "choices[0].message.tool_calls[0].function is a string"),
    ({"choices": [{"message": {"tool_calls": [{"function": {"name": 3}}]}}]},
     "choices[0].message.tool_calls[0].function.name is an integer"),
    ({"error": {"message": "model exploded"}}, "the server reported an error: model exploded"),
])
def test_a_malformed_chat_reply_is_one_named_error(reply, named):
    with pytest.raises(wire.ServerError) as err:
        wire.chat_reply(reply, 8, SENT)
    assert named in str(err.value)


@pytest.mark.parametrize("usage, claimed", [
    ({"prompt_tokens": -5, "completion_tokens": 1}, {"usage.prompt_tokens": "-5"}),
    ({"prompt_tokens": 1e30, "completion_tokens": 1}, {"usage.prompt_tokens": "1e+30"}),
    ({"prompt_tokens": 10 ** 30, "completion_tokens": 1}, {"usage.prompt_tokens": str(10 ** 30)}),
    ({"prompt_tokens": 20, "completion_tokens": "lots"}, {"usage.completion_tokens": "'lots'"}),
    ({"prompt_tokens": True, "completion_tokens": 1.0}, {"usage.prompt_tokens": "True",
                                                         "usage.completion_tokens": "1.0"}),
    ({"prompt_tokens": 10 ** 6, "completion_tokens": 1}, {"prompt_tokens": "1000000 (more than the "}),
    ({"prompt_tokens": 20, "completion_tokens": 500}, {"completion_tokens": "500 (more than max_tokens 8 asked)"}),
    ([1], {"usage": "a list of 1 item(s)"}),
])
def test_chat_usage_counts_are_checked_where_they_enter(usage, claimed):
    got = wire.chat_reply({**OK, "usage": usage}, 8, SENT)
    assert got.text == "4" and got.finish_reason == "stop"
    for key, value in claimed.items():
        assert got.claims[key].startswith(value)
    bad = {k.rpartition(".")[2] for k in claimed}
    assert got.prompt_tokens == (None if bad & {"prompt_tokens", "usage"} else 20)
    assert got.completion_tokens == (None if bad & {"completion_tokens", "usage"} else 1)


def test_stream_counts_are_bounded_by_the_prompt_and_the_chunks(loopback):
    """The streamed path's counts enter through the same reader and bounds: a prompt count past
    what was sent, a cached count past the prompt, a count that is no integer are claims."""
    last = {"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": "lots",
                      "prompt_tokens_details": {"cached_tokens": 10 ** 6}},
            "timings": {"prompt_n": 2 ** 70, "predicted_n": 1e30, "deep": {"a": {"b": {"c": {"d": [10 ** 30]}}}}}}
    H = _sse_server([{"choices": [{"text": "ab", "index": 0}]}, last])

    items = list(wire.stream(loopback(H) + "/x", {"prompt": "a b c"}, 10.0, False))
    final = items[-1]
    assert (final.prompt_tokens, final.completion_tokens, final.cached_tokens) == (30, None, None)
    assert final.claims["usage.completion_tokens"] == "'lots'" and final.claims["timings.predicted_n"] == "1e+30"
    assert final.claims["cached_tokens"].startswith("1000000 (more than the prompt's tokens")
    assert final.claims["timings.prompt_n"] == str(2 ** 70)
    json.dumps(final.timings["raw"], allow_nan=False)  # no integer past 64 bits, no nesting past RAW_DEPTH kept
    assert final.timings["raw"]["prompt_n"] == repr(2 ** 70)
    assert final.timings["raw"]["deep"]["a"]["b"]["c"] == "an object of 1 item(s)"

    from macprof.run.phases import server_request

    out = server_request.record(0, [1], [c for c in items if isinstance(c, wire.Chunk)], final, 2, None, "ok", None)
    assert out["reused_tokens"] is None and out["server"].claims["cached_tokens"].startswith("1000000")
    assert any("claim: the server sent cached_tokens = 1000000" in f for f in out["server"].flags)


@pytest.mark.parametrize("line, named", [
    ({"choices": [1]}, "choices[0] is an integer, not an object"),
    ({"choices": {"0": {}}}, "choices is an object, not a list"),
    ({"choices": [{"delta": {"content": ["a"]}}]}, "choices[0].delta.content is a list, not a string"),
    ({"choices": [{"delta": "a"}]}, "choices[0].delta is a string, not an object"),
    ({"choices": [{"text": 5}]}, "choices[0].text is an integer, not a string"),
])
def test_a_malformed_stream_chunk_fails_its_request_named(loopback, line, named):
    H = _sse_server([line])
    with pytest.raises(wire.ServerError, match=r"a malformed reply: " + named.replace("[", r"\[").replace("]", r"\]")):
        list(wire.stream(loopback(H) + "/x", {"prompt": "p"}, 10.0, False))


def _sse_server(lines: list):
    """A server that streams ``lines`` (each a data: event), then [DONE]."""
    from http.server import BaseHTTPRequestHandler

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.end_headers()
            for o in lines:
                self.wfile.write(f"data: {json.dumps(o)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    return H


def lying_server(replies):
    """A chat server whose reply to a task is ``replies[its prompt's text]`` (a dict), or
    ``replies(body)`` (a function of the request's body)."""
    return chat_completions_server(replies if callable(replies) else lambda body: replies[body["messages"][0]["content"]])


def test_a_lying_server_loses_no_attempt_and_no_log(loopback, tmp_path):
    """Rows 3 and 6 end to end: usage of -5, 1e30 and "lots", and a reply of ``choices: [1]``,
    each through the tasks phase: the run log is written and loads, every attempt is there, the
    claims are kept, the malformed reply is its attempt's error, and no token figure is made of them."""
    replies = {"neg": {**OK, "usage": {"prompt_tokens": -5, "completion_tokens": 1}},
               "huge": {**OK, "usage": {"prompt_tokens": 1e30, "completion_tokens": 10 ** 30}},
               "lots": {**OK, "usage": {"prompt_tokens": 20, "completion_tokens": "lots"}},
               "shape": {"choices": [1]},
               "uncounted": {**OK, "usage": {"completion_tokens": 1}},
               "fine": OK}
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("".join(json.dumps({"id": k, "prompt": k, "checker": {"type": "number", "answer": 4},
                                         "max_tokens": 8}) + "\n" for k in replies))
    log = tmp_path / "s.json"
    proc = macprof("run", "--endpoint", loopback(lying_server(replies)) + "/v1", "--api", "chat", "--phases", "tasks",
                   "--tasks", str(tasks), "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    got = {r.task: r.attempts[0] for r in ph.results}
    assert list(got) == list(replies) and not ph.failures
    # a prompt count the server did not give, or gave as no count, is unknown: never 0
    assert got["neg"].claims == {"usage.prompt_tokens": "-5"} and got["neg"].prompt_tokens is None and got["neg"].correct
    assert got["uncounted"].prompt_tokens is None and not got["uncounted"].has("claims") and got["uncounted"].correct
    assert got["shape"].prompt_tokens is None and got["fine"].prompt_tokens == 20
    assert got["huge"].claims == {"usage.prompt_tokens": "1e+30", "usage.completion_tokens": str(10 ** 30)}
    assert got["lots"].claims == {"usage.completion_tokens": "'lots'"} and got["lots"].completion_tokens is None
    assert got["shape"].status == "error" and "choices[0] is an integer, not an object" in got["shape"].error
    assert got["fine"].completion_tokens == 1 and not got["fine"].has("claims")
    s = ph.summary
    assert s.within.k == 5 and s.tokens_per_correct is None
    assert "2 attempt(s) through the server without a token count" in s.tokens_reason
    assert "usage.completion_tokens" in s.tokens_reason
    show = macprof("show", str(log))
    assert "tokens per correct" not in show.stdout or "-" not in show.stdout.split("tokens per correct")[1][:20]
