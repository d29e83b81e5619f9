"""What a phase's parent prepares is prepared once (issue #39, item 1): the draft is resolved
once per model and the task file read once per run, however many workers a model takes and
however many items the parent records cut, and a resumed run reads the draft back from the
journal's plan (resolving nothing) and the task file once more (its run's one read).

Two fake models share one task file and a fake-GGUF draft, phases speculative and tasks; the
test hook crashes fake-a's worker at one task and hangs fake-b's past --timeout at another (each
a cut attempt the parent records, then a new worker). The parent is spied on in this process
(the resolver and the task file's reader wrapped; every open of the task file audited); each
worker through a wrapper interpreter (Runner's ``python``) that installs the same spies before
it runs the worker, and appends what it saw to a file."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from macprof import config, session
from macprof.collect import resolve
from macprof.run import taskfile
from macprof.run.orchestrator import Runner
from macprof.store.runlog import read_journal

TASKS = [{"id": "add", "prompt": "What is 2 + 2?", "checker": {"type": "number", "answer": 4}, "max_tokens": 6},
         {"id": "crash", "prompt": "Say yes.", "checker": {"type": "exact", "answer": "yes"}, "max_tokens": 6},
         {"id": "hang", "prompt": "Say no.", "checker": {"type": "exact", "answer": "no"}, "max_tokens": 6},
         {"id": "json", "prompt": "Reply with {}", "checker": {"type": "json-schema", "schema": {"type": "object"}},
          "max_tokens": 6}]
FAULTS = {"fake-a": {"kind": "segfault", "phase": "tasks", "case": "crash"},
          "fake-b": {"kind": "hang", "phase": "tasks", "case": "hang"}}

# the worker's interpreter: the spies, then the worker as `python -m macprof.run.worker` runs it,
# its fault chosen by the model its job names (the job is the first line of its stdin)
WRAPPER = '''#!{python}
import io, json, os, runpy, sys

SEEN, TASKS, FAULTS = os.environ["SPY_SEEN"], os.path.realpath(os.environ["SPY_TASKS"]), json.loads(os.environ["SPY_FAULTS"])


def seen(what):
    with open(SEEN, "a") as fh:
        fh.write(what + "\\n")


def audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and os.path.realpath(os.fsdecode(args[0])) == TASKS:
        seen("open the task file")
    elif event == "import" and args[0] == "macprof.collect.resolve":
        seen("import the resolver")


sys.addaudithook(audit)
line = sys.stdin.buffer.readline()
name = json.loads(line)["name"]
seen("worker " + name)
if name in FAULTS:
    os.environ["MACPROF_TEST_FAULT"] = json.dumps({{**FAULTS[name], "model": name}})
sys.stdin = io.TextIOWrapper(io.BytesIO(line))
from macprof.run import taskfile

read = taskfile.read_bytes
taskfile.read_bytes = lambda *a, **k: (seen("read the task file"), read(*a, **k))[1]
runpy.run_module("macprof.run.worker", run_name="__main__", alter_sys=True)
'''

_WATCHED: dict | None = None  # the path the parent's audit hook counts opens of, and the count


def _audit(event: str, args: tuple) -> None:
    if _WATCHED is not None and event == "open" and isinstance(args[0], (str, bytes)):
        if os.path.realpath(os.fsdecode(args[0])) == _WATCHED["path"]:
            _WATCHED["opens"] += 1


@pytest.fixture
def parent_spy(monkeypatch):
    """Counts, in this process (the parent): the draft's resolutions, the task file's reads and opens."""
    global _WATCHED
    if not getattr(sys, "_macprof_prepare_once_hook", False):  # an audit hook cannot be removed: added once
        sys.addaudithook(_audit)
        sys._macprof_prepare_once_hook = True  # type: ignore[attr-defined]
    counts = {"resolve": 0, "read": 0}
    real_resolve, real_read = resolve.resolve, taskfile.read_bytes

    def resolving(ref, *args, **kwargs):
        counts["resolve"] += 1
        return real_resolve(ref, *args, **kwargs)

    def reading(*args, **kwargs):
        counts["read"] += 1
        return real_read(*args, **kwargs)

    monkeypatch.setattr(resolve, "resolve", resolving)
    monkeypatch.setattr(taskfile, "read_bytes", reading)

    def watch(path: Path) -> dict:
        global _WATCHED
        _WATCHED = {"path": os.path.realpath(path), "opens": 0}
        counts["opens"] = _WATCHED
        return counts

    yield watch
    _WATCHED = None


def _models(fake_dir: Path, tasks: Path, draft: Path):
    overrides = {"phases": ["speculative", "tasks"], "tasks": str(tasks), "draft": str(draft), "draft_tokens": [2],
                 "reps": 1, "prompt_tokens": 16, "gen_tokens": 6, "timeout": 2.0, "attempts": 1}
    return config.load(fake_dir / "models.toml", overrides).select(["fake-a", "fake-b"])


def _measure(monkeypatch, models, log: Path, wrapper: Path, resume: bool = False):
    monkeypatch.setattr(session, "Runner", lambda *a, **k: Runner(*a, **k, python=str(wrapper)))
    return session.measure(models, log, None, resume=resume)


def _seen(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_the_draft_is_resolved_once_per_model_and_the_task_file_read_once_per_run(fake_dir, tmp_path, monkeypatch,
                                                                                  parent_spy):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    draft = tmp_path / "draft.gguf"
    draft.write_bytes((fake_dir / "fake-b.gguf").read_bytes())
    seen = tmp_path / "seen.txt"
    wrapper = tmp_path / "python"
    wrapper.write_text(WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    monkeypatch.setenv("SPY_SEEN", str(seen))
    monkeypatch.setenv("SPY_TASKS", str(tasks))
    monkeypatch.setenv("SPY_FAULTS", json.dumps(FAULTS))
    counts = parent_spy(tasks)
    models = _models(fake_dir, tasks, draft)
    log = tmp_path / "run.json"

    result = _measure(monkeypatch, models, log, wrapper)
    journal = read_journal(session.journal_path(log))
    spawns = [e for e in journal if e.KIND == "worker_spawn"]
    cuts = [e for e in journal if e.KIND == "task_attempt" and e.status in ("crashed", "timeout")]
    assert {(e.model, e.task, e.status) for e in cuts} == {("fake-a", "crash", "crashed"), ("fake-b", "hang", "timeout")}
    assert len(spawns) >= 4 and all(len([s for s in spawns if s.model == m.name]) >= 2 for m in models)
    for m in result.models:  # both phases measured, past the cut attempts
        assert m.phases.speculative.draft_status == "ok" and m.phases.speculative.cases
        assert [r.task for r in m.phases.tasks.results] == [t["id"] for t in TASKS]
    assert counts["resolve"] == len(models) == 2  # once per model, at its plan
    assert counts["read"] == 1 and counts["opens"]["opens"] == 1  # once per run
    workers = _seen(seen)
    assert sum(w.startswith("worker ") for w in workers) == len(spawns)
    assert [w for w in workers if not w.startswith("worker ")] == []  # no worker resolved or read anything
    plans = [e for e in journal if e.KIND == "plan"]
    assert [(p.model, sorted(p.prepared)) for p in plans] == [("fake-a", ["speculative", "tasks"]),
                                                              ("fake-b", ["speculative", "tasks"])]
    assert plans[0].prepared["tasks"]["sha256"] == taskfile.load(str(tasks)).sha256  # (a read of the test's own)

    # the journal cut mid-model (fake-b's second worker had not started), then resumed: the draft
    # comes back from fake-b's plan, the task file is read once, for this run
    path = session.journal_path(log)
    lines = path.read_text().splitlines(keepends=True)
    b_spawns = [i for i, line in enumerate(lines) if '"worker_spawn"' in line and '"fake-b"' in line]
    path.write_text("".join(lines[:b_spawns[1]]))
    seen.unlink()
    counts.update(resolve=0, read=0)
    counts["opens"]["opens"] = 0
    resumed = _measure(monkeypatch, models, log, wrapper, resume=True)
    assert resumed.complete and counts["resolve"] == 0
    assert counts["read"] == 1 and counts["opens"]["opens"] == 1
    workers = _seen(seen)
    assert workers and all(w == "worker fake-b" for w in workers)  # fake-a was measured already
    b = resumed.models[1]
    assert [r.task for r in b.phases.tasks.results] == [t["id"] for t in TASKS]
    assert b.phases.speculative.draft_status == "ok"
    again = read_journal(path)
    assert len([e for e in again if e.KIND == "plan"]) == 2  # nothing planned or prepared again


# the worker's interpreter for the chat template's test: the template file edited before the worker
# starts (as a user might between the parent's read and a worker's), then every open of it audited
TEMPLATE_WRAPPER = '''#!{python}
import io, json, os, runpy, sys

SEEN, TEMPLATE = os.environ["SPY_SEEN"], os.path.realpath(os.environ["SPY_TEMPLATE"])
with open(TEMPLATE, "w") as fh:
    fh.write(os.environ["SPY_EDITED"])


def seen(what):
    with open(SEEN, "a") as fh:
        fh.write(what + "\\n")


def audit(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and os.path.realpath(os.fsdecode(args[0])) == TEMPLATE:
        seen("open the chat template")


sys.addaudithook(audit)
line = sys.stdin.buffer.readline()
seen("worker " + json.loads(line)["name"])
sys.stdin = io.TextIOWrapper(io.BytesIO(line))
runpy.run_module("macprof.run.worker", run_name="__main__", alter_sys=True)
'''
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
EDITED = "{% for m in messages %}{{ m['role'] }} said: {{ m['content'] }}\n{% endfor %}assistant said:"


def test_the_chat_template_is_read_once_per_run_and_its_workers_render_that_read(fake_dir, tmp_path, monkeypatch,
                                                                                  parent_spy):
    """Both phases that render (the conversation, the tasks) of two models through one
    --chat-template: the parent reads the file once for the whole run, the model's inputs record
    that text's sha256, and every worker renders that same text, never the file: edited after
    the parent read it (each worker's interpreter rewrites it before the worker starts), what the
    conversation says it rendered is still the text the inputs (and a --resume) hold."""
    import hashlib

    template = tmp_path / "t.jinja"
    template.write_text(CHATML)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS[:1]))
    seen = tmp_path / "seen.txt"
    wrapper = tmp_path / "python"
    wrapper.write_text(TEMPLATE_WRAPPER.format(python=sys.executable))
    wrapper.chmod(0o755)
    monkeypatch.setenv("SPY_SEEN", str(seen))
    monkeypatch.setenv("SPY_TEMPLATE", str(template))
    monkeypatch.setenv("SPY_EDITED", EDITED)
    counts = parent_spy(template)
    overrides = {"phases": ["conversation", "tasks"], "tasks": str(tasks), "chat_template": str(template),
                 "apps": 1, "turns": 2, "system_tokens": 8, "turn_tokens": 8, "gen_tokens": 4, "attempts": 1}
    models = config.load(fake_dir / "models.toml", overrides).select(["fake-a", "fake-b"])
    log = tmp_path / "run.json"

    result = _measure(monkeypatch, models, log, wrapper)
    read = hashlib.sha256(CHATML.encode()).hexdigest()
    assert counts["opens"]["opens"] == 1  # once, for both phases of both models
    workers = _seen(seen)
    assert sum(w.startswith("worker ") for w in workers) >= 2 and "open the chat template" not in workers
    assert template.read_text() == EDITED  # the workers' interpreters did edit it
    starts = [e for e in read_journal(session.journal_path(log)) if e.KIND == "model_start"]
    for start, m in zip(starts, result.models):
        (held,) = [f for f in start.identity.inputs if f.role == "the chat template"]
        assert (held.path, held.bytes, held.sha256) == (str(template), len(CHATML.encode()), read)
        assert m.phases.conversation.template_sha256 == read and m.phases.conversation.turns
        assert [r.task for r in m.phases.tasks.results] == ["add"]
        assert m.phases.tasks.prompt_format == f"the chat template file {template} (--chat-template)"
