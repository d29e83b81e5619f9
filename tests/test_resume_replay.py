"""Issue 37 (rows 5 and 9; class 5): a resume replays exactly what it interrupted, and refuses
to continue a run whose inputs changed. The speculative phase's output checks of the prompt a
kill interrupted are made on `--resume` from the recorded tokens (the journal keeps what a replay
needs); a task file, a chat template, a quality text or a draft replaced between the kill and the
resume is refused in one line naming it, as a changed model is (run/resume.py ``changed_inputs``)."""

from __future__ import annotations

import json

import pytest

from macprof.store import runlog
from tests.test_journal import one_line
from tests.test_run import macprof

SPEC = ["--phases", "speculative", "--prompt-tokens", "24", "--gen-tokens", "12", "--reps", "2",
        "--draft-tokens", "1,3"]


@pytest.fixture(scope="module")
def spec_whole(tmp_path_factory):
    """(folder, the args, the whole journal's lines) of one speculative run on the fake engine."""
    from macprof.engines.fake import write_model

    folder = tmp_path_factory.mktemp("spec")
    write_model(folder / "t.gguf", hidden=64)
    write_model(folder / "d.gguf", hidden=32)
    (folder / "models.toml").write_text('[[models]]\nname = "t"\nengine = "fake"\npath = "t.gguf"\n')
    args = ["run", "--config", str(folder / "models.toml"), *SPEC, "--draft", str(folder / "d.gguf")]
    macprof(*args, "--log", str(folder / "whole.json"))
    return folder, args, (folder / "whole.journal.jsonl").read_bytes().split(b"\n")[:-1]


def _checks(log) -> list[tuple]:
    spec = log.models[0].phases.speculative
    return sorted((c.k, r.request.index, r.check.passed, r.check.identical_fraction)
                  for c in spec.cases for r in c.requests if r.check is not None)


def _events(lines: list[bytes], kind: str) -> list[int]:
    return [i for i, line in enumerate(lines) if f'"event":"{kind}"'.encode() in line]


def test_a_resume_makes_the_speculative_checks_the_kill_left_undone(spec_whole, tmp_path):
    """Row 5: killed after a prompt's requests and before (or among) its output checks, or in the
    middle of its requests, the resumed run has every check the uninterrupted one has (n = 4
    against n, not n - 1), each once, made from the recorded tokens."""
    folder, args, lines = spec_whole
    whole = runlog.load(folder / "whole.json")
    assert len(_checks(whole)) == 6  # the warm-up and 2 measured prompts, x 2 k
    checks = _events(lines, "speculative_check")
    requests = [i for i in _events(lines, "request") if b'"phase":"speculative"' in lines[i]]
    # before each check; and after a measured prompt's second request (its other two still to come)
    cuts = sorted({*checks, requests[-2]})
    for n, at in enumerate(cuts):
        journal = tmp_path / f"r{n}.journal.jsonl"
        journal.write_bytes(b"\n".join(lines[:at]) + b"\n")
        macprof(*args, "--resume", str(journal))
        final = runlog.load(tmp_path / f"r{n}.json")
        assert final.complete and _checks(final) == _checks(whole), (n, at)
        resumed = journal.read_bytes().split(b"\n")
        assert len(_events(resumed, "speculative_check")) == len(checks), (n, at)  # none made twice


def _tasks_file(path, answer: int) -> None:
    path.write_text(json.dumps({"id": "add", "prompt": "What is 2 + 2?", "checker": {"type": "number", "answer": answer},
                               "max_tokens": 4}) + "\n")


def _killed(journal) -> None:
    """The journal as a kill leaves it before the run ended: its last line (run_end) gone."""
    journal.write_bytes(b"".join(journal.read_bytes().splitlines(keepends=True)[:-1]))


def test_a_resume_refuses_a_replaced_task_file(fake_dir, tmp_path):
    """Row 9: the task file replaced between the kill and the resume: refused in one line naming
    it (the resumed log held results of both files, task_set the new sha only)."""
    tasks = tmp_path / "t.jsonl"
    _tasks_file(tasks, 4)
    args = ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks", "--tasks",
            str(tasks)]
    macprof(*args, "--log", str(tmp_path / "r.json"))
    journal = tmp_path / "r.journal.jsonl"
    _killed(journal)
    _tasks_file(tasks, 5)
    proc = macprof(*args, "--resume", str(journal), check=False)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and "the task file" in line and "t.jsonl" in line and "changed" in line, line
    _tasks_file(tasks, 4)  # the same bytes again: it goes on
    assert macprof(*args, "--resume", str(journal)).returncode == 0


def test_a_resume_refuses_a_changed_chat_template_or_quality_text(fake_dir, tmp_path):
    template, text = tmp_path / "chat.jinja", tmp_path / "q.txt"
    template.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>")
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    args = ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "quality,conversation",
            "--chat-template", str(template), "--text", str(text), "--turns", "2", "--turn-tokens", "8",
            "--system-tokens", "8", "--gen-tokens", "4", "--quality-tokens", "64", "--quality-ctx", "32"]
    macprof(*args, "--log", str(tmp_path / "r.json"))
    journal = tmp_path / "r.journal.jsonl"
    _killed(journal)
    for path, what in ((template, "the chat template"), (text, "the quality text")):
        original = path.read_bytes()
        path.write_bytes(original + b" ")
        proc = macprof(*args, "--resume", str(journal), check=False)
        line = one_line(proc.stderr)
        assert proc.returncode == 2 and what in line and path.name in line, line
        path.write_bytes(original)
    assert macprof(*args, "--resume", str(journal)).returncode == 0


def test_a_resume_refuses_a_changed_draft(spec_whole, tmp_path):
    folder, args, lines = spec_whole
    from macprof.engines.fake import write_model

    draft = tmp_path / "d.gguf"
    draft.write_bytes((folder / "d.gguf").read_bytes())
    moved = [a if a != str(folder / "d.gguf") else str(draft) for a in args]
    macprof(*moved, "--log", str(tmp_path / "r.json"))
    journal = tmp_path / "r.journal.jsonl"
    _killed(journal)
    write_model(draft, hidden=48)  # another draft, same path
    proc = macprof(*moved, "--resume", str(journal), check=False)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and "the draft" in line and "d.gguf" in line, line
