"""One template path (issue #39 item 2): every phase that renders messages (the tasks phase's
attempts, the conversation phase's turns) takes the same one, ``run/chat.py`` ``template_for``:
the --chat-template file, else the model's own, else ONE fallback form; where the server renders
the messages (the tasks phase through a server, a conversation with --api chat) a --chat-template
is refused in one line, never ignored."""

from __future__ import annotations

import json
import re
from pathlib import Path

from macprof import config
from macprof.engines.base import EngineSettings
from macprof.engines.fake import FakeEngine, write_model
from macprof.model.conversation import ConversationStart
from macprof.model.tasks import TaskAttemptDone, TasksStart
from macprof.run import chat, taskfile
from macprof.run.phases import PhaseContext
from macprof.run.phases.conversation import run_conversation
from macprof.run.phases.tasks import TasksJob, run_tasks
from macprof.run.prompts import PromptBuilder
from macprof.store import runlog
from tests.test_run import macprof

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TASK = {"id": "add", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "checker": {"type": "number", "answer": 4}, "max_tokens": 4}
# the fallback form: each message "<role>:", a line break, its content and a blank line; then "assistant:\n"
FALLBACK_SHAPE = re.compile(r"(?:(?:system|user|assistant|tool):\n[^\n]*\n\n)+assistant:\n")


class Spy(FakeEngine):
    """The fake engine, keeping every rendered prompt it is asked to tokenize."""

    def __init__(self) -> None:
        super().__init__()
        self.rendered: list[str] = []

    def tokenize_chat(self, text: str) -> list[int]:
        self.rendered.append(text)
        return super().tokenize_chat(text)


def _task_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(TASK) + "\n")
    return path


def test_a_model_without_a_template_renders_tasks_and_conversations_in_one_form(tmp_path):
    """The fake model has no template: a task's prompt is the conversation's fallback form (the
    tasks phase once wrote 'System: ...' / 'User: ...' / 'Assistant:', a second form)."""
    engine = Spy()
    engine.load_model(write_model(tmp_path / "m.gguf"), EngineSettings(n_ctx=4096))
    s = config.Settings(phases=("tasks", "conversation"), tasks=str(_task_file(tmp_path)), turns=2, gen_tokens=4,
                        turn_tokens=8, system_tokens=8)
    events: list = []
    run_tasks(PhaseContext(engine, None, s, events.append, prepared=TasksJob(taskfile.load(s.tasks))))  # type: ignore[arg-type]
    (task_prompt,) = engine.rendered
    assert task_prompt == "system:\nBe brief.\n\nuser:\n2+2?\n\nassistant:\n" == \
        chat.Template("fallback", chat.FALLBACK).render(TASK["messages"])
    engine.rendered.clear()
    run_conversation(PhaseContext(engine, PromptBuilder(engine), s, events.append, n_ctx=4096))
    assert len(engine.rendered) >= 3 and all(FALLBACK_SHAPE.fullmatch(text) for text in engine.rendered), engine.rendered
    (start,) = [e for e in events if isinstance(e, TasksStart)]
    (conversation,) = [e for e in events if isinstance(e, ConversationStart)]
    assert start.prompt_format == f"no chat template: {chat.FALLBACK_FORM}" and conversation.template_source == "fallback"
    assert conversation.template_sha256 == __import__("hashlib").sha256(chat.FALLBACK.encode()).hexdigest()


def test_the_tasks_phase_honours_chat_template(fake_dir, tmp_path):
    """--chat-template reaches the tasks' prompts (it once reached the conversation's only): the
    prompt is the file's rendering, the log names the file, and the file is one of the model's
    inputs (once, though the conversation renders through it too)."""
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    log = tmp_path / "t.json"
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks,conversation",
            "--turns", "1", "--tasks", str(_task_file(tmp_path)), "--chat-template", str(template), "--log", str(log))
    m = runlog.load(log).models[0]
    ph = m.phases.tasks
    assert ph.prompt_format == f"the chat template file {template.resolve()} (--chat-template)"
    assert [(f.role, f.path) for f in m.identity.inputs if f.role == "the chat template"] == [
        ("the chat template", str(template.resolve()))]
    assert m.phases.conversation.template_source == "file"
    engine = FakeEngine()
    engine.load_model(fake_dir / "fake-a.gguf", EngineSettings(n_ctx=4096))
    want = engine.tokenize_chat(chat.Template("file", CHATML).render(TASK["messages"]))
    (attempt,) = ph.results[0].attempts
    assert attempt.prompt_tokens == len(want) != len(engine.tokenize_chat(
        chat.Template("fallback", chat.FALLBACK).render(TASK["messages"])))


def test_a_chat_template_where_the_server_renders_is_refused_in_one_line(loopback, tmp_path):
    """The tasks phase through a server sends chat completions: the server applies its own template,
    so --chat-template is refused (the phase's failure, its reason one line) and nothing is sent."""
    from tests.test_tasks import _chat_server

    handler = _chat_server(False)
    url = loopback(handler)
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    log = tmp_path / "s.json"
    proc = macprof("run", "--endpoint", url + "/v1", "--phases", "tasks", "--tasks", str(_task_file(tmp_path)),
                   "--chat-template", str(template), "--log", str(log), check=False)
    assert proc.returncode == 3, proc.stderr  # the only phase asked for measured nothing: the run says so
    (failure,) = [f for f in runlog.load(log).models[0].failures if f.phase == "tasks"]
    assert f"FAILED in tasks: {failure.reason}\n" in proc.stderr
    assert failure.reason == (f"--chat-template {template.resolve()}: through a server the tasks phase sends chat "
                              f"completions: the server applies its model's own template to the messages, so no "
                              f"template is rendered here")
    assert handler.seen == [] and "\n" not in failure.reason


def test_a_task_s_attempt_records_what_its_template_rendered(tmp_path):
    """The fallback's tokens are what a task's attempt counts as its prompt (the in-process path)."""
    engine = FakeEngine()
    engine.load_model(write_model(tmp_path / "m.gguf"), EngineSettings(n_ctx=4096))
    events: list = []
    s = config.Settings(phases=("tasks",), tasks=str(_task_file(tmp_path)))
    run_tasks(PhaseContext(engine, None, s, events.append, prepared=TasksJob(taskfile.load(s.tasks))))  # type: ignore[arg-type]
    (attempt,) = [e for e in events if isinstance(e, TaskAttemptDone)]
    assert attempt.prompt_tokens == len(engine.tokenize_chat(chat.template_for(engine, None).render(TASK["messages"])))
