"""One bad input fails one item (issue #37, class 3): whatever a checker, a renderer, a reply
reader or a server reply raises fails that attempt, turn or request, with its reason recorded,
and the next one runs. Per phase: the tasks phase (in-process and through a server), the
conversation (a template that raises for a turn), and every phase whose requests go through
``announced`` (warm, prefix, the sweeps, cold, speculative) or a concurrency level's clients."""

from __future__ import annotations

import json

from macprof.run import taskfile
from macprof.model import events as ev
from macprof.run.phases.common import announced
from macprof.store import runlog
from tests.conftest import chat_completions_server
from tests.test_run import macprof

NESTED = "[" * 1000 + "]" * 1000  # a RecursionError in jsonschema (a recursive schema walks it)


def chat_server(reply_of):
    """A chat-completions server answering each request with the body ``reply_of(its first
    message's content)`` gives, raw: a well-formed completion or not."""
    return chat_completions_server(lambda body: reply_of(body["messages"][0]["content"]))


def ok(text: str) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 3}}


def test_a_bad_reply_fails_its_attempt_and_the_next_task_runs(loopback, tmp_path):
    """Through a server: a reply nested 1,000 deep (the checker's RecursionError), a server
    answering choices: [1], list content, or a message that is no object: each fails its own
    attempt with the reason; the last task is asked and judged. Before, the first of them ended
    the phase."""
    recursive = {"type": "array", "items": {"$ref": "#"}}
    tasks = [("deep", {"type": "json-schema", "schema": recursive}, ok(NESTED)),
             ("choices", {"type": "exact", "answer": "x"}, {"choices": [1]}),
             ("list", {"type": "exact", "answer": "x"},
              {"choices": [{"message": {"role": "assistant", "content": [{"type": "text"}]}, "finish_reason": "stop"}]}),
             ("message", {"type": "exact", "answer": "x"}, {"choices": [{"message": "x", "finish_reason": "stop"}]}),
             ("right", {"type": "exact", "answer": "yes"}, ok("yes"))]
    url = loopback(chat_server({f"task {name}": reply for name, _, reply in tasks}.__getitem__))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": name, "prompt": f"task {name}", "checker": checker, "max_tokens": 8})
                            + "\n" for name, checker, _ in tasks))
    log = tmp_path / "s.json"
    proc = macprof("run", "--endpoint", url + "/v1", "--phases", "tasks", "--tasks", str(path), "--attempts", "2",
                   "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert not ph.failures and [r.task for r in ph.results] == [name for name, _, _ in tasks]
    by = {r.task: r.attempts for r in ph.results}
    deep = by["deep"]  # judged not right, twice: the checker's failure is the reply's
    assert [a.status for a in deep] == ["ok", "ok"] and all(a.correct is False for a in deep)
    assert all(a.check_error and "RecursionError" in a.check_error for a in deep)
    for name in ("choices", "list", "message"):  # the reply could not be read: the attempt's error, no retry
        (a,) = by[name]
        assert a.status == "error" and a.error and a.correct is None, (name, a)
    assert by["right"][0].correct and ph.summary.within.k == 1
    contained = sum(1 for r in ph.results for a in r.attempts if a.status == "error" or a.has("check_error"))
    assert contained == 5  # 2 checks that could not judge, 3 replies that could not be read
    show = macprof("show", str(log)).stdout
    assert "3 attempt(s) failed, each alone (the first: " in show
    assert "2 repl(ies) the checker could not judge" in show


def test_an_attempt_whose_reply_counts_no_counts_is_recorded_with_its_claims(tmp_path):
    """A reply whose usage counts are no counts ("lots") once had the attempt's record refused by
    the parent, the attempt lost, or its prompt recorded as 0 tokens; the counts are checked where
    they enter (engines/wire.py ``chat_reply``, as engines/openai.py reads a server's reply): each
    is the server's claim, the count unknown, and every attempt is recorded and judged."""
    from macprof import config
    from macprof.engines import wire
    from macprof.engines.capabilities import CAPABILITIES
    from macprof.model.tasks import TaskAttemptDone
    from macprof.run.phases.common import PhaseContext
    from macprof.run.phases.tasks import TasksJob, run_tasks

    class Chat:
        name = "stand-in"
        kind = "server"
        capabilities = dict.fromkeys(CAPABILITIES)

        def chat(self, messages, tools, max_tokens, fallback, **kw):
            prompt = messages[0]["content"]
            reply = wire.chat_reply({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}],
                                     "usage": {"prompt_tokens": "lots" if prompt == "p" else 5,
                                               "completion_tokens": "lots" if prompt == "c" else 1}}, max_tokens, 64)
            return {"text": reply.text, "finish_reason": reply.finish_reason, "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens, "claims": reply.claims}

        def memory(self):
            return {}

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": i, "checker": {"type": "exact", "answer": "x"},
                                        "max_tokens": 4}) + "\n" for i in ("p", "c", "ok")))
    events: list = []
    run_tasks(PhaseContext(Chat(), None, config.Settings(phases=("tasks",), tasks=str(path)), events.append,
                           prepared=TasksJob(taskfile.load(str(path)))))
    attempts = {e.task: e.record() for e in events if isinstance(e, TaskAttemptDone)}
    assert [(t, a.status, a.correct) for t, a in attempts.items()] == [("p", "ok", True), ("c", "ok", True),
                                                                      ("ok", "ok", True)]
    assert (attempts["p"].prompt_tokens, attempts["p"].claims) == (None, {"usage.prompt_tokens": "'lots'"})
    assert (attempts["c"].completion_tokens, attempts["c"].claims) == (None, {"usage.completion_tokens": "'lots'"})
    assert (attempts["ok"].prompt_tokens, attempts["ok"].completion_tokens) == (5, 1)


def test_a_template_that_raises_for_a_turn_stops_that_conversation_only(tmp_path, fake_dir):
    """The conversation: the template raises at the third turn of each app (six messages). Each
    app's conversation stops there, with the reason recorded; the turns before are kept, the
    other app's turns run. Before, the first raise ended the phase."""
    template = tmp_path / "t.jinja"
    template.write_text("{% if messages|length > 5 %}{{ raise_exception('turn ' ~ (messages|length // 2) ~ ' is too "
                        "long for this template') }}{% endif %}{% for m in messages %}{{ m['role'] }}: "
                        "{{ m['content'] }}\n{% endfor %}assistant:")
    log = tmp_path / "c.json"
    proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "conversation",
                   "--apps", "2", "--turns", "4", "--gen-tokens", "4", "--turn-tokens", "8", "--chat-template",
                   str(template), "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.conversation
    assert not ph.failures and sorted((t.app, t.turn) for t in ph.turns) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [s.reason for s in ph.stops] == [  # each app's reason, the second's too
        f"app {a} turn 2 failed: the chat template (file: {template}) failed to render 6 messages: TemplateError: "
        f"turn 3 is too long for this template: app {a}'s conversation stops here" for a in (0, 1)]
    journal = [json.loads(x) for x in log.with_name("c.journal.jsonl").read_text().splitlines()]
    failed = [(e["app"], e["turn"]) for e in journal if e["event"] == "conversation_turn" and e.get("error")]
    assert failed == [(0, 2), (1, 2)]  # 2 turns failed, each its app's alone


def test_what_a_request_raises_is_that_request_s_failure():
    """Every phase's requests go through ``announced``: what the measurement raises (a server's
    reply its reader could not read, a template, macprof's own reading) is a request with status
    error and the reason; the one after runs. Before, it left the phase (and the worker)."""
    emitted: list = []
    heads = [{"phase": "warm", "index": i, "kind": "measured"} for i in range(3)]

    def measure(i):
        if i == 1:
            raise AttributeError("'int' object has no attribute 'get'")
        return {"status": "ok", "t0": 5, "token_times": (6,), "tokens": (1,)}

    recs = [announced(emitted.append, h, lambda i=i: measure(i)) for i, h in enumerate(heads)]
    assert [r.status for r in recs] == ["ok", "error", "ok"]
    assert recs[1].error == "AttributeError: 'int' object has no attribute 'get'" and recs[1].t0 > 0
    assert [type(e).__name__ for e in emitted] == ["RequestStart", "Request"] * 3
    warm_up = announced(emitted.append, {"phase": "warm", "index": -1, "kind": "warmup"}, lambda: measure(1),
                        record=False)
    assert warm_up.status == "error" and isinstance(emitted[-1], ev.RequestEnd)  # never recorded, still ended


def test_an_attempt_whose_tokenizer_raises_fails_alone(fake_dir, tmp_path):
    """In-process: the engine's tokenizer raises on one task's prompt; that attempt is recorded
    as failed with the reason (its wall time from its announcement), the next task runs."""
    from macprof import config
    from macprof.engines.base import EngineSettings
    from macprof.engines.fake import FakeEngine
    from macprof.model.tasks import TaskAttemptDone
    from macprof.run.phases.common import PhaseContext
    from macprof.run.phases.tasks import TasksJob, run_tasks

    class Brittle(FakeEngine):
        def tokenize_chat(self, text):
            if "boom" in text:
                raise UnicodeError("the tokenizer met something it cannot read")
            return super().tokenize_chat(text)

    engine = Brittle()
    engine.load_model(fake_dir / "fake-a.gguf", EngineSettings(n_ctx=4096))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": p, "checker": {"type": "exact", "answer": "x"},
                                        "max_tokens": 4}) + "\n" for i, p in (("bad", "boom"), ("next", "fine"))))
    events: list = []
    run_tasks(PhaseContext(engine, None, config.Settings(phases=("tasks",), tasks=str(path), attempts=2), events.append,
                           prepared=TasksJob(taskfile.load(str(path)))))
    attempts = [(e.task, e.attempt, e.status) for e in events if isinstance(e, TaskAttemptDone)]
    assert attempts == [("bad", 1, "error"), ("next", 1, "ok"), ("next", 2, "ok")]
    bad = next(e for e in events if isinstance(e, TaskAttemptDone))
    assert bad.error == "UnicodeError: the tokenizer met something it cannot read" and bad.t_end >= bad.t0
    engine.close()


def test_a_concurrent_client_s_error_is_its_request_s():
    """A concurrency level's client thread: what its stream raises is its request's error,
    never lost with the thread (the level once recorded fewer requests than it sent)."""
    from macprof.run.phases.server_request import stream_request

    class Server:
        def stream(self, text, n):
            yield from ()
            raise KeyError("choices")

    raw = stream_request(Server(), "prompt", 4)
    assert raw["status"] == "error" and raw["error"] == "KeyError: 'choices'" and raw["times"] == []
