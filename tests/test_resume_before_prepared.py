"""A journal written before phases prepared their work (issue #39, item 1) still resumes: its
models have no plan recording what was prepared, so each model's phases are prepared again
(once per model), and its events are read as they were written (a cold trial's worker, a
conversation's turns replayed, the tasks a recorded attempt settled).

fixtures/runlogs/before-prepared.journal.jsonl is the journal of a complete run by macprof at
5264db5 (before this change) of two fake-engine models, phases cold (2 trials), speculative (a
fake-GGUF draft), conversation (1 app, 2 turns) and tasks (3 tasks, 2 attempts), less its
run_end; its paths under @DIR@. Recorded with, under that version:

    models = config.load(DIR / "fake" / "models.toml", OVERRIDES).select(["fake-a", "fake-b"])
    session.measure(models, DIR / "run.json", print)

the fake models written by engines/fake.py write_model (fake-a hidden 64, fake-b 32), the draft
a copy of fake-b, the task file TASKS. Each test cuts it inside fake-b, as a kill would, and
resumes it with today's macprof."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macprof import config, session
from macprof.collect import resolve
from macprof.engines.fake import write_model
from macprof.store.runlog import read_journal

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "runlogs" / "before-prepared.journal.jsonl"
TASKS = [{"id": "add", "prompt": "What is 2 + 2?", "checker": {"type": "number", "answer": 4}, "max_tokens": 6},
         {"id": "word", "prompt": "Say yes.", "checker": {"type": "exact", "answer": "yes"}, "max_tokens": 6},
         {"id": "json", "prompt": "Reply with {}", "checker": {"type": "json-schema", "schema": {"type": "object"}},
          "max_tokens": 6}]
OVERRIDES = {"phases": ["cold", "speculative", "conversation", "tasks"], "tasks": "@DIR@/tasks.jsonl",
             "draft": "@DIR@/draft.gguf", "draft_tokens": [2], "reps": 1, "prompt_tokens": 16, "gen_tokens": 6,
             "cold_trials": 2, "apps": 1, "turns": 2, "system_tokens": 16, "turn_tokens": 8, "attempts": 2}


def _setup(root: Path) -> tuple:
    (root / "fake").mkdir()
    toml = []
    for name, hidden in (("fake-a", 64), ("fake-b", 32)):
        write_model(root / "fake" / f"{name}.gguf", hidden=hidden)
        toml.append(f'[[models]]\nname = "{name}"\nengine = "fake"\npath = "{name}.gguf"\n')
    (root / "fake" / "models.toml").write_text("\n".join(toml))
    (root / "draft.gguf").write_bytes((root / "fake" / "fake-b.gguf").read_bytes())
    (root / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    overrides = json.loads(json.dumps(OVERRIDES).replace("@DIR@", str(root)))
    return config.load(root / "fake" / "models.toml", overrides).select(["fake-a", "fake-b"])


def _cut(root: Path, keep) -> list[dict]:
    """The fixture, its paths under ``root``, up to and including fake-b's event ``keep`` picks."""
    lines = FIXTURE.read_text().replace("@DIR@", str(root)).splitlines(keepends=True)
    events = [json.loads(line) for line in lines]
    at = next(i for i, e in enumerate(events) if e.get("model") == "fake-b" and keep(e, events[:i]))
    (root / "run.journal.jsonl").write_text("".join(lines[:at + 1]))
    return events[:at + 1]


CUTS = {
    # the second cold trial's first request: that trial runs again
    "a cold trial": lambda e, before: e["event"] == "request" and e["phase"] == "cold" and e["kind"] == "first"
    and any(b["event"] == "request" and b.get("model") == "fake-b" and b["kind"] == "second" for b in before),
    # the second turn's first request: the first turn replayed (its reply, its cache), the second measured again
    "a conversation": lambda e, before: e["event"] == "request" and e["phase"] == "conversation"
    and sum(b["event"] == "conversation_turn" and b.get("model") == "fake-b" for b in before) == 1,
    # "word"'s first attempt: "add" settled (its last attempt allowed), "word" asked again from its first
    "the tasks": lambda e, before: e["event"] == "task_attempt" and e["task"] == "word" and e["attempt"] == 1,
}


@pytest.mark.parametrize("cut", CUTS)
def test_a_journal_from_before_prepared_work_resumes(fake_dir, tmp_path, monkeypatch, cut):
    models = _setup(tmp_path)
    kept = _cut(tmp_path, CUTS[cut])
    assert not any(e["event"] == "plan" for e in kept)  # written before the plan recorded prepared work
    resolved = []
    real = resolve.resolve
    monkeypatch.setattr(resolve, "resolve", lambda ref, *a, **k: (resolved.append(ref), real(ref, *a, **k))[1])
    log = session.measure(models, tmp_path / "run.json", None, resume=True)
    assert log.complete
    assert resolved == [str(tmp_path / "draft.gguf")] * 2  # prepared again, once per model (the check, then the run)
    a, b = log.models
    for m in (a, b):
        assert not m.failures, m.failures
        # a trial cut before its second request is kept as recorded, and run again (as before this change)
        assert [t.index for t in m.phases.cold.trials] == ([0, 1, 1] if m is b and cut == "a cold trial" else [0, 1])
        assert m.phases.speculative.draft_status == "ok" and [c.k for c in m.phases.speculative.cases] == [2]
        assert m.phases.speculative.cases[0].checks.n == 1 and m.phases.speculative.cases[0].checks.identical == 1
        assert [(t.app, t.turn) for t in m.phases.conversation.turns] == [(0, 0), (0, 1)]
        assert [r.task for r in m.phases.tasks.results] == ["add", "word", "json"]
    # fake-a was finished: nothing of it measured again; fake-b's work done before the cut kept, once
    journal = read_journal(tmp_path / "run.journal.jsonl")
    spawns = [e for e in journal if e.KIND == "worker_spawn"]
    assert len([e for e in spawns if e.model == "fake-a"]) == 3  # its two cold trials and one worker, as recorded
    attempts = [(e.task, e.attempt) for e in journal if e.KIND == "task_attempt" and e.model == "fake-b"]
    if cut == "the tasks":
        assert attempts.count(("add", 1)) == attempts.count(("add", 2)) == 1  # settled: not asked again
        assert attempts.count(("word", 1)) == 2  # interrupted between its attempts: from its first again
    plans = [e for e in journal if e.KIND == "plan"]
    assert plans == []  # a resumed model's plan is not journaled again
