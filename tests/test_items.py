"""Every step of an item is inside its own deadline and attributed to it (issue #37, class 2):
a task attempt, a conversation turn and a warm-up announce themselves (request_start) before
their prompt is rendered, so rendering, tokenizing and generating are under --timeout; the
parent forgets an item once it is recorded (its request, task_attempt, task_refused or
request_end), so what it cuts is the item that was running, never one already recorded.

The end-to-end cases are reproductions: a template that hangs while the next attempt's or
turn's prompt renders, a worker killed between two attempts, a warm-up followed by a cool-down
longer than the timeout. Each failed before the fix (a right answer became a made-up timeout;
a render hung 600 s; the conversation phase was lost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from macprof.analyse import tasks as at
from macprof.engines.fake import write_model
from macprof.model import events as ev
from macprof.model.tasks import TaskAttemptDone, TaskRefused, TasksStart
from macprof.run import watch
from macprof.store import runlog

# a loop of 10^10 empty steps: it renders nothing for ever, within every size cap (run/sandbox.py)
HANG = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
PLAIN = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
NEVER = [{"id": t, "prompt": f"Say {t}.", "checker": {"type": "exact", "answer": "never-said"}, "max_tokens": 6}
         for t in ("add", "word", "json")]


def _macprof(*args, env=None, timeout=240):
    """A `macprof` process with a deadline of its own: a hang the fix removes fails the test
    instead of holding the suite."""
    import os

    return subprocess.run([sys.executable, "-m", "macprof", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False)


def _model(tmp_path, template=None):
    write_model(tmp_path / "m.gguf", chat_template=template)
    (tmp_path / "models.toml").write_text('[[models]]\nname = "m"\nengine = "fake"\npath = "m.gguf"\n')
    return tmp_path / "models.toml"


def _tasks(tmp_path, tasks=NEVER):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def _journal(log):
    return [json.loads(x) for x in log.with_name(log.stem + ".journal.jsonl").read_text().splitlines()]


# -- the parent's state, event by event ------------------------------------------------------
def _start(case="a", index=0):
    return ev.RequestStart(phase="tasks", index=index, kind="task", case=case, t0=1)


@pytest.mark.parametrize("end", [
    TaskAttemptDone(phase="tasks", task="a", attempt=1),
    TaskRefused(phase="tasks", task="a", reason="too long"),
    ev.RequestEnd(phase="conversation", index=-1, kind="warmup", case="app0", mode="emptied"),
    ev.Request(phase="warm", index=0, kind="measured", status="ok", t0=1)])
def test_the_parent_forgets_an_item_once_it_is_recorded(end):
    state = watch._State(timeout=5.0, loaded=True, phase="tasks")
    state.on_event(_start())
    assert state.request is not None and state.deadline - watch.time.monotonic() <= 5.0
    state.on_event(end)
    assert state.request is None and state.items_ended == 1
    assert state.deadline - watch.time.monotonic() > 5.0  # the time between items is no item's
    state.failure = ("crashed", "worker killed by SIGKILL")
    failure = watch.failure_record(_spec(), "w", state, -9, _empty())
    assert failure.phase == "tasks" and failure.case is None and failure.index is None  # blamed on nothing recorded


def test_a_hang_after_a_check_start_names_the_checker_s_bound_not_the_timeout():
    """After check_start the deadline is the checker's bound and its grace, not --timeout: a
    worker that overruns it is said to have exceeded that bound (the request's own time ended
    when its reply was complete)."""
    from macprof.model.tasks import TaskCheckStart

    state = watch._State(timeout=5.0, loaded=True, phase="tasks")
    state.on_event(_start())
    state.on_event(TaskCheckStart(phase="tasks", task="a", attempt=1, bound_s=2.0))
    assert state.deadline - watch.time.monotonic() <= 2.0 + watch.CHECK_GRACE_S
    state.deadline = watch.time.monotonic() - 1  # past it
    status, why = state.overdue()
    assert status == "timeout" and "5 s" not in why and "--timeout" not in why
    assert why == (f"the checker of task 'a' attempt 1 exceeded its bound (2 s) and the worker's grace "
                   f"({watch.CHECK_GRACE_S:g} s) to record it; worker killed")
    state.on_event(_start(index=1))  # the next attempt: its own deadline is the request's again
    state.deadline = watch.time.monotonic() - 1
    assert state.overdue() == ("timeout", "request exceeded the 5 s timeout; worker killed")


def _spec():
    from macprof import config

    return config.ModelSpec(name="m", engine="fake", path=Path("m.gguf"), quant=None, settings=config.Settings())


def _empty():
    import tempfile

    return tempfile.TemporaryFile()


def test_a_made_up_record_never_replaces_the_attempt_its_worker_recorded():
    """An older journal: the parent blamed a hang after an attempt on it and wrote a timeout
    record for it; the worker's own record stands."""
    start = TasksStart(phase="tasks", attempts_allowed=1).replace(worker="w1")
    right = TaskAttemptDone(phase="tasks", task="a", attempt=1, correct=True, t0=0, token_times=(5,),
                            tokens=(7,)).replace(worker="w1")
    made_up = TaskAttemptDone(phase="tasks", task="a", attempt=1, status="timeout", t0=0, t_end=9).replace(worker="w1")
    ph = at.build_tasks([start, right, made_up], [], None)
    ((result,),) = [ph.results]
    assert [a.status for a in result.attempts] == ["ok"] and result.solved_at == 1
    rerun = made_up.replace(worker="w2")  # a next worker's attempt cut: it is the task's last run
    assert [a.status for a in at.build_tasks([start, right, start, rerun], [], None).results[0].attempts] == ["timeout"]


# -- reproductions, end to end ---------------------------------------------------------------
def test_a_hang_while_the_next_attempt_renders_cuts_that_attempt(tmp_path):
    """Row 2: attempt 1 is recorded; the template hangs rendering attempt 2 (its three turns).
    That attempt is cut at --timeout (it announced itself before rendering) and recorded as the
    timeout; attempt 1 keeps its record; the next worker goes on with the next task."""
    cfg = _model(tmp_path, "{% if messages|length > 1 %}" + HANG + "{% endif %}" + PLAIN)
    log = tmp_path / "t.json"
    proc = _macprof("run", "--config", str(cfg), "--phases", "tasks", "--tasks", str(_tasks(tmp_path, NEVER[:2])),
                    "--attempts", "2", "--timeout", "2", "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert [(r.task, [(a.attempt, a.status) for a in r.attempts]) for r in ph.results] == [
        ("add", [(1, "ok"), (2, "timeout")]), ("word", [(1, "ok"), (2, "timeout")])]
    assert all(r.attempts[0].text and r.attempts[0].tokens for r in ph.results)  # the replies kept
    assert [(f.case, f.index, f.status) for f in ph.failures] == [("add", 1, "timeout"), ("word", 1, "timeout")]
    cut = ph.results[0].attempts[1]
    assert cut.t_end - cut.t0 >= 2e9  # from its announcement, before the render, to the kill
    assert ph.summary.attempts_cut == 2 and ph.summary.attempts_run == 4


def test_a_worker_killed_between_two_attempts_blames_neither(tmp_path, fake_dir):
    """Row 2: the worker dies (SIGKILL, as the OOM killer sends) just after recording task add's
    attempt. No item was running: add's record stands (no made-up `crashed` one), the failure
    names no task, and a next worker goes on with the tasks after it."""
    fault = {"model": "fake-a", "kind": "oom", "at": "task_attempt", "case": "add"}
    log = tmp_path / "t.json"
    proc = _macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks",
                    "--tasks", str(_tasks(tmp_path)), "--attempts", "1", "--log", str(log),
                    env={"MACPROF_TEST_FAULT": json.dumps(fault)})
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert [(r.task, [a.status for a in r.attempts]) for r in ph.results] == [
        ("add", ["ok"]), ("word", ["ok"]), ("json", ["ok"])]
    ((failure),) = ph.failures
    assert failure.status == "crashed" and failure.case is None and failure.index is None
    journal = _journal(log)
    assert sum(e["event"] == "task_attempt" and e["task"] == "add" for e in journal) == 1  # nothing made up
    assert sum(e["event"] == "worker_spawn" for e in journal) == 2


def test_a_hang_while_a_turn_renders_cuts_that_turn(tmp_path, fake_dir):
    """Row 2, the conversation: turn 1's prompt (four messages) hangs in the template. The turn
    announced itself before rendering: it is cut at --timeout and named (app0, turn 1); turn 0
    is kept. Before, the render ran under the 600 s between-items deadline."""
    template = tmp_path / "hang.jinja"
    template.write_text("{% if messages|length > 2 %}" + HANG + "{% endif %}" + PLAIN)
    log = tmp_path / "c.json"
    proc = _macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases",
                    "conversation", "--turns", "3", "--gen-tokens", "4", "--turn-tokens", "8", "--chat-template",
                    str(template), "--timeout", "2", "--log", str(log), timeout=120)
    ph = runlog.load(log).models[0].phases.conversation
    ((failure,),) = [ph.failures]
    assert (failure.status, failure.case, failure.index) == ("timeout", "app0", 1), proc.stderr
    assert [t.turn for t in ph.turns] == [0]


def test_a_cool_down_after_the_warm_up_is_no_one_s_timeout(tmp_path, fake_dir):
    """Row 2, the conversation's warm-up (never recorded): it tells the parent it ended
    (request_end), so the cool-down (--delay) before the first turn, longer than --timeout, is
    not blamed on it. Before, the warm-up's deadline ran on and the whole phase was lost."""
    log = tmp_path / "c.json"
    proc = _macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases",
                    "conversation", "--turns", "1", "--gen-tokens", "4", "--turn-tokens", "8", "--delay", "2.5",
                    "--timeout", "2", "--log", str(log), timeout=120)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.conversation
    assert not ph.failures and [t.turn for t in ph.turns] == [0]
    assert [e["kind"] for e in _journal(log) if e["event"] == "request_end"][:1] == ["warmup"]
