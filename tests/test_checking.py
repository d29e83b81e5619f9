"""A task's checker runs after the attempt's timed window, under its own bound, its time
recorded apart (run/checking.py, issue #37 row 10): a slow regex on a long reply is the
checker's failure to judge, with the reason, never the model's timeout, and its time is in
neither the attempt's wall time nor the time per correct answer."""

from __future__ import annotations

import json
import time

import pytest

from macprof.run import checking
from macprof.store import runlog
from tests.test_contained import chat_server, ok
from tests.test_run import macprof

SLOW = {"type": "regex", "pattern": "^(a+)+$"}  # exponential backtracking on "aaa...a!"
LONG = "a" * 40 + "!"


def test_a_slow_check_is_bounded_and_the_next_one_runs():
    with checking.Judge(1.0) as judge:
        t0 = time.monotonic()
        slow = judge.check(SLOW, LONG)
        assert time.monotonic() - t0 < 20  # the bound, and the child's kill; nothing waits for 2^40 steps
        assert slow.verdict is None and slow.error == "it ran past its bound of 1 s" and slow.ns >= 1e9
        assert not slow.as_verdict.correct and "could not judge the reply (it ran past" in slow.as_verdict.message
        right = judge.check(SLOW, "aaaa")  # a new child for the next check
        assert right.verdict is not None and right.verdict.correct and right.error is None and 0 < right.ns < 1e9


def test_what_a_checker_raises_or_a_dead_child_is_that_check_s_failure(monkeypatch):
    deep = "[" * 5000 + "]" * 5000  # json.loads or jsonschema past the recursion limit
    schema = {"type": "json-schema", "schema": {"type": "array", "items": {"$ref": "#"}}}
    with checking.Judge(5.0) as judge:
        judged = judge.check(schema, deep)
        assert judged.verdict is None or not judged.verdict.correct
        if judged.verdict is None:
            assert judged.error.startswith("it raised RecursionError")
        remote = judge.check({"type": "json-schema", "schema": {"$ref": "http://127.0.0.1:9/x.json"}}, "{}")
        assert remote.verdict is None and remote.error == ("the schema's reference 'http://127.0.0.1:9/x.json' does "
                                                           "not resolve inside it (macprof fetches and opens nothing "
                                                           "a task names)")
        assert judge.check({"type": "exact", "answer": "x"}, "x").verdict.correct
        judge._proc.kill()  # the child died between two checks: the next check starts another
        judge._proc.wait()
        assert judge.check({"type": "exact", "answer": "x"}, "x").verdict.correct
    monkeypatch.setattr(checking, "CHECK_MEMORY_BYTES", 4 << 20)  # below any Python process: held past it at once
    with checking.Judge(30.0) as judge:
        held = judge.check(SLOW, LONG)
        assert held.verdict is None and held.error == "it held more than 4 MiB"


def test_a_slow_checker_is_not_the_model_s_timeout(loopback, tmp_path):
    """End to end (a server that answers at once): the regex takes for ever on the reply. The
    attempt is the model's, answered well inside --timeout: recorded ok and not right, the
    checker's failure its message and check_error, its time apart (check_ns, past the bound),
    and the wall time (the time per correct answer's) without it. Before, the parent killed the
    worker at --timeout and recorded the model's timeout."""
    url = loopback(chat_server(lambda prompt: ok(LONG)))
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "slow", "prompt": "Say a's.", "checker": SLOW, "max_tokens": 8}) + "\n"
                     + json.dumps({"id": "next", "prompt": "Say it.", "checker": {"type": "exact", "answer": LONG},
                                   "max_tokens": 8}) + "\n")
    log = tmp_path / "s.json"
    proc = macprof("run", "--endpoint", url + "/v1", "--phases", "tasks", "--tasks", str(tasks), "--timeout", "2",
                   "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert not ph.failures
    (slow,), (right,) = (r.attempts for r in ph.results)
    assert slow.status == "ok" and slow.correct is False and slow.check_error == "it ran past its bound of 2 s"
    assert "could not judge the reply" in slow.message and slow.check_ns >= 2e9
    assert slow.t_end - slow.t0 < 2e9  # the model's part: the checker is not in it
    assert right.correct and 0 < right.check_ns < 2e9 and not right.has("check_error")
    assert ph.summary.time_per_correct_s == pytest.approx(ph.summary.wall_s) and ph.summary.wall_s < 4
    journal = [json.loads(x) for x in log.with_name("s.journal.jsonl").read_text().splitlines()]
    assert [e["bound_s"] for e in journal if e["event"] == "check_start"] == [2, 2]
    show = macprof("show", str(log)).stdout
    assert "1 repl(ies) the checker could not judge, counted not right (the first: it ran past its bound of 2 s)" in show
