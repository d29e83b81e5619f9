"""The tasks phase: does the model answer right, as an app would ask it? Each task of the task
file (run/taskfile.py; the shipped set by default) is rendered through the chat template
(run/chat.py: --chat-template, else the model's own, else macprof's one fallback form), and
generated as apps generate: the reply ends at an end-of-generation id (unlike the speed
phases, which hold EOS off so that lengths are exact) or at the task's max_tokens. Its checker (run/checkers.py) judges the
reply; with --attempts N a failed task is asked again with the checker's message as the next
user turn, as an agent loop does. The first attempt is greedy; with --temperature T the retries
are sampled at T, each from its own seed (``attempt_seed``: --seed, the task, the attempt).

Every attempt is journaled raw (its stamps, ids, text, verdict, and a sampled one's temperature
and seed), so every figure of the phase recomputes from the log (analyse/tasks.py). A task that
cannot run in this model (longer than the context, a template that does not render) is one
task_refused line; the others run. A task whose attempt outlives the timeout (or crashes the
engine) costs that task only: the parent records the attempt (``TasksParent.cut``) and starts a
worker that goes on after it, skipping the tasks the journal has settled (``settled_tasks``).

The task file is read, hashed and checked once per run, by the parent (``TasksParent``: a file
that cannot run at all stops the run before any worker), and so is a --chat-template; each worker
gets the parsed set and the template's text in its job (``TasksJob``), and a cut attempt's record
takes its task from the parent's copy.

Through a server (``_served``) each attempt is one chat completion of the task's messages:
the server applies its model's template (a --chat-template is refused, run/chat.py
``rendered_by_server``) and samples with the OpenAI temperature and seed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from macprof.engines.base import Engine, EngineCore, ServerEngine
from macprof.engines.capabilities import CHAT, SAMPLE, Chatting, Sampling, able
from macprof.errors import MacprofError, reason
from macprof.model import events as ev
from macprof.model.tasks import (TaskAttempt, TaskAttemptDone, TaskCheckStart, TaskRefusal, TaskRefused, TaskSetInfo,
                                 TasksPhase, TasksStart, ToolCall)
from macprof.phases import TASKS_CONTEXT
from macprof.run import chat, checkers, checking, taskfile
from macprof.run.phases.api import Parent
from macprof.run.phases.common import ByKind, Clock, PhaseContext, ending_at, reply_end

if TYPE_CHECKING:
    from macprof.config import ModelSpec, Settings
    from macprof.run.phases.api import Host, Reads
    from macprof.run.resume import ModelPast

PHASE = "tasks"
TASK_FILE = "the task file"  # its role among a model's inputs (model_start identity.inputs)


SEED_RULE = "sha256 of '<--seed>:<task id>:<attempt>', its first 4 bytes big-endian, the top bit cleared"


def attempt_seed(seed: int, task: str, attempt: int) -> int:
    """The seed of one sampled attempt (SEED_RULE): every retry its own draw, the same on a
    rerun. 31 bits: llama.cpp's dist sampler takes a uint32 and reads 0xFFFFFFFF as "pick one
    at random"; mlx and the OpenAI field take any such integer."""
    digest = hashlib.sha256(f"{seed}:{task}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def sampling_of(temperature: float, seed: int, task: str, attempt: int) -> tuple[float, int] | None:
    """(temperature, seed) of an attempt, or None where it is greedy. The first attempt is
    always greedy, so accuracy at the first attempt is the greedy figure whatever the
    temperature (comparable across runs and models); with a temperature, the retries are
    sampled at it, as an agent loop resamples: told what was wrong, a greedy retry of the same
    conversation tends to say the same thing again."""
    if temperature <= 0 or attempt == 1:
        return None
    return temperature, attempt_seed(seed, task, attempt)


def sampling_note(temperature: float, seed: int, sampler: str = "the engine's own sampler") -> str:
    if not temperature:
        return "greedy (argmax) at every attempt"
    return (f"the first attempt greedy, each retry sampled at temperature {temperature:g} ({sampler}: "
            f"softmax(logits / T), no top-k/top-p) from its own seed, derived from --seed {seed}, the task id and the "
            f"attempt ({SEED_RULE}) and recorded with the attempt: a rerun on the same engine build gives the same "
            f"replies")


def generation_note(eos: int, temperature: float, seed: int = 0) -> str:
    return (f"a reply ends at the model's end-of-generation id ({eos} id(s)) or at the task's max_tokens, unlike the "
            f"speed phases, which hold EOS off; {sampling_note(temperature, seed)}; the cache is emptied before each "
            f"task, a retry reuses its conversation's prefix")


def settled_tasks(done: dict) -> set[str]:
    """The tasks a resumed or restarted worker skips: those whose journal ends them (the
    attempt that was right, the last allowed, one that failed, or the one a timeout or crash
    cut: run/resume.py names each as a done request of kind "task")."""
    return {key[1] for key in done if key[0] == PHASE and key[3] == "task"}


@dataclass(frozen=True)
class TasksJob:
    """A tasks worker's part of its job: the task set and the --chat-template (None: none given)
    as the run's parent read them, once."""

    tasks: taskfile.TaskFile
    template: chat.TemplateFile | None = None


class TasksParent(Parent[TaskSetInfo, TasksJob]):
    """The task files of the run, each read, hashed and checked once (here, before any worker: a
    file that cannot run at all stops the run in one line), and each --chat-template read once;
    a model's prepared record is its set's identity (journaled in its plan), each worker's part
    the parsed set itself and the template's text."""

    plan_type = TaskSetInfo
    cuts = True

    def __init__(self, models: Sequence[ModelSpec], journal_path: Path, reads: Reads) -> None:
        super().__init__(models, journal_path, reads)
        self.sets = {path: taskfile.load(path or None)
                     for path in sorted({m.settings.tasks or "" for m in models if PHASE in m.settings.phases})}
        chat.given_templates(reads, models, PHASE)  # the tasks render through it, as the conversation does

    def _set(self, s: Settings) -> taskfile.TaskFile:
        return self.sets[s.tasks or ""]

    def prepare(self, model: ModelSpec) -> TaskSetInfo:
        tf = self._set(model.settings)
        return _info(tf)

    def inputs(self, model: ModelSpec, prepared: TaskSetInfo | None) -> list[dict]:
        """The task file as it was read (one read: its size and sha256 are the parent's copy's),
        and the --chat-template file the prompts render through, where one is given."""
        s = model.settings
        tf = self._set(s)
        path = Path(s.tasks) if s.tasks else taskfile.default_path()
        return [{"role": TASK_FILE, "path": str(path), "bytes": tf.bytes, "sha256": tf.sha256},
                *chat.template_input(self.reads, model)]

    def job(self, model: ModelSpec, prepared: TaskSetInfo | None, host: Host) -> TasksJob:
        return TasksJob(self._set(model.settings), chat.given_template(self.reads, model))

    def budget(self, model: ModelSpec, prepared: TaskSetInfo | None) -> int:
        return len(self._set(model.settings).tasks)  # every task may be cut once, each by its own worker

    def cut(self, settings: Settings, prepared: TaskSetInfo | None, failure: ev.Failure, request: ev.RequestStart,
            t_end: int | None) -> TaskAttemptDone | None:
        return cut_attempt(settings, self._set(settings), failure, request, t_end)


def cut_attempt(s: Settings, tf: taskfile.TaskFile, failure: ev.Failure, request: ev.RequestStart,
                t_end: int | None) -> TaskAttemptDone | None:
    """The parent's record of a task attempt it cut: past the timeout (the worker killed) or
    crashed with the worker, while it ran (``request`` is the attempt announced and not yet
    recorded: run/watch.py forgets an item once it is recorded, so this never stands for an
    attempt the worker recorded). Its verdict is its status, its wall time runs from the
    attempt's start (its request_start's t0, before its prompt was rendered) to the cut, the
    parent's stamp on the same clock; it has no reply, and the tokens it generated are unknown.
    The task (looked up in the set ``tf`` the parent read) is then settled (``resumed``): the
    next worker goes on with the task after it. None for anything else (an error the worker
    reported ends the phase, as before)."""
    cut = failure.record()
    if request.kind != "task" or not request.case or cut.status not in ("timeout", "crashed"):
        return None
    task = next((t for t in tf.tasks if t.id == request.case), None)
    attempt = request.index + 1
    return TaskAttemptDone.of(TaskAttempt(
        task=request.case, attempt=attempt, status=cut.status, error=cut.reason, t0=request.t0,
        t_tokenized=None, token_times=(), tokens=(), stop=None, text="", correct=None, message=None, t_end=t_end,
        **_sampling_fields(sampling_of(s.temperature, s.seed, request.case, attempt))),
        phase=PHASE, category=task.category if task else None, checker=task.checker["type"] if task else "")


def resumed(past: ModelPast, event: ev.Event, spawn: ev.WorkerSpawn) -> bool:
    """--resume: a task whose recorded attempt ends it (right, the last allowed, failed, or cut)
    is settled, named as a done item of kind "task" (``settled_tasks``; no request event); a task
    interrupted between its attempts is run again from its first."""
    if isinstance(event, TasksStart):
        past.state[PHASE] = event.record().attempts_allowed
        return True
    if isinstance(event, TaskAttemptDone):
        allowed, attempt = past.state.get(PHASE), event.record()
        if attempt.status != "ok" or attempt.correct or (allowed is not None and attempt.attempt >= allowed):
            past.item_done({"phase": event.phase, "case": attempt.task, "mode": None, "kind": "task",
                            "index": attempt.attempt - 1})
        return True
    return False


@dataclass(frozen=True)
class Local:
    """What an in-process engine's attempts are made with: the template prompts are rendered
    through, the ids that end a reply, the engine as its own sampler (where --temperature asks
    for one), and the checker's judge."""

    template: chat.Template
    eos: set[int]
    sampler: Sampling | None
    judge: checking.Judge


def _info(tf: taskfile.TaskFile) -> TaskSetInfo:
    """The task set as the log names it: its file's identity and how many tasks it gave or refused."""
    return TaskSetInfo(source=tf.source, sha256=tf.sha256, bytes=tf.bytes, tasks=len(tf.tasks), refused=len(tf.refused))


def _started(ctx: PhaseContext, tf: taskfile.TaskFile, prompt_format: str, tool_format: str | None, generation: str,
             context: int | None) -> None:
    """The phase's start, in process or through a server: how its prompts and tools are written
    (the tool format only where a task has tools), how it generates, and the refused tasks."""
    s = ctx.settings
    ctx.emit(TasksStart.of(TasksPhase(
        task_set=_info(tf), prompt_format=prompt_format,
        tool_format=tool_format if any(t.tools for t in tf.tasks) else None, generation=generation,
        attempts_allowed=s.attempts, temperature=s.temperature, seed=s.seed, context_tokens=context,
        refusals=tuple(TaskRefusal(line=line, task=task, reason=why) for line, task, why in tf.refused)), phase=PHASE))


def _in_process(ctx: PhaseContext[Engine]) -> None:
    """The tasks on an engine in this process: each prompt rendered here, its reply generated
    token by token up to an end-of-generation id (sampled retries: capability "sample")."""
    engine, s = ctx.engine, ctx.settings
    sampler = able(engine, SAMPLE) if s.temperature > 0 else None
    if isinstance(sampler, str):
        raise MacprofError(f"--temperature {s.temperature:g}: the {engine.name} engine cannot sample: {sampler}")
    job: TasksJob = ctx.prepared  # read once, by the parent
    tf, template = job.tasks, chat.template_for(engine, job.template)
    eos = set(engine.eos_ids)
    _started(ctx, tf, template.described, template.tool_format, generation_note(len(eos), s.temperature, s.seed),
             TASKS_CONTEXT)
    settled = settled_tasks(ctx.done)
    with checking.Judge(checking.bound_of(s.timeout), ctx.clock) as judge:
        local = Local(template, eos, sampler, judge)
        for task in tf.tasks:
            if task.id not in settled:
                _attempts(ctx, task, lambda attempt, t0, messages: _attempt(ctx, local, task, attempt, t0, messages))
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory() or None))


# one attempt: (attempt, its t0, the messages so far) -> its (reply, verdict) where a retry may follow, else None
Attempt = Callable[[int, int, list[dict]], "tuple[str, checkers.Verdict] | None"]


def _attempts(ctx: PhaseContext[EngineCore], task: taskfile.Task, attempt_of: Attempt) -> None:
    """A task's attempts in turn: each announces itself before anything of it runs (rendering its
    prompt, tokenizing and generating are then under the parent's --timeout, and what the
    parent cuts is this attempt, t0 giving its wall time, never the one recorded before); a
    retry gets the checker's message as the next user turn. ``attempt_of(attempt, t0, messages)``
    runs and records one: its (reply, verdict) where another may follow, None where the task
    ends there. Whatever it raises (a tokenizer, an engine, a server's reply, macprof's own
    reading of them) is that attempt's failure, recorded with the reason: the next task runs."""
    messages = [dict(m) for m in task.messages]
    for attempt in range(1, ctx.settings.attempts + 1):
        t0 = ctx.clock()
        ctx.emit(ev.RequestStart(phase=PHASE, index=attempt - 1, kind="task", case=task.id, t0=t0))
        try:
            outcome = attempt_of(attempt, t0, messages)
        except Exception as exc:  # noqa: BLE001 - whatever one attempt raises fails that attempt alone
            _emit_attempt(ctx, task, TaskAttempt(
                task=task.id, attempt=attempt, status="error", error=reason(exc), t0=t0, t_end=ctx.clock(),
                **_sampling_fields(sampling_of(ctx.settings.temperature, ctx.settings.seed, task.id, attempt))))
            return
        if outcome is None:
            return
        reply, verdict = outcome
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": chat.RETRY.format(message=verdict.message)}]


def _attempt(ctx: PhaseContext[Engine], local: Local, task: taskfile.Task, attempt: int, t0: int,
             messages: list[dict]) -> tuple[str, checkers.Verdict] | None:
    engine, s = ctx.engine, ctx.settings
    if attempt == 1:
        engine.reset()  # tasks are independent: nothing of the last one's conversation is cached
    try:
        text = local.template.render(messages, task.tools)
    except MacprofError as exc:  # what the template raised, or the sandbox refused, with why
        ctx.emit(TaskRefused(phase=PHASE, line=task.line, task=task.id, reason=f"task {task.id!r}: {exc}"))
        return None
    ids = engine.tokenize_chat(text)
    t_tok = ctx.clock()
    if len(ids) + task.max_tokens > TASKS_CONTEXT:
        ctx.emit(TaskRefused(phase=PHASE, line=task.line, task=task.id, reason=(
            f"task {task.id!r}{f' attempt {attempt}' if attempt > 1 else ''}: {len(ids)} prompt tokens + "
            f"max_tokens {task.max_tokens} exceed the phase's context of {TASKS_CONTEXT} tokens")))
        return None
    sampled = sampling_of(s.temperature, s.seed, task.id, attempt)
    got = _generate(engine, local.sampler, ids, task.max_tokens, local.eos, ctx.clock, sampled)
    reply = engine.detokenize(got["reply"]) if got["status"] == "ok" else ""
    fmt = local.template.tool_format if task.tools else "json"
    verdict, checked = _checked(ctx, local.judge, task, attempt, reply, fmt) if got["status"] == "ok" else (None, {})
    _emit_attempt(ctx, task, TaskAttempt(
        task=task.id, attempt=attempt, status=got["status"], error=got["error"], t0=t0, t_tokenized=t_tok,
        token_times=tuple(got["times"]), prompt_tokens=len(ids), tokens=tuple(got["tokens"]), stop=got["stop"],
        text=reply, correct=verdict.correct if verdict else None, message=verdict.message if verdict else None,
        **checked, **_sampling_fields(sampled)))
    return None if verdict is None or verdict.correct else (reply, verdict)


def _emit_attempt(ctx: PhaseContext[EngineCore], task: taskfile.Task, attempt: TaskAttempt) -> None:
    """An attempt's record, with the task's category and checker. Its fields are of their types
    where they entered: a server's counts and texts checked by its reply's reader
    (engines/wire.py ``chat_reply``: what is no count is its claim, the count unknown)."""
    ctx.emit(TaskAttemptDone.of(attempt, phase=PHASE, category=task.category, checker=task.checker["type"]))


def _checked(ctx: PhaseContext[EngineCore], judge: checking.Judge, task: taskfile.Task, attempt: int, reply: str,
             fmt: str) -> tuple[checkers.Verdict, dict]:
    """The reply's verdict, after the attempt's timed window: the parent is told the window
    ended (check_start), then the checker runs under its own bound (run/checking.py); and the
    attempt's fields of it: its tool-call steps, the checker's own time, why it could not judge."""
    ctx.emit(TaskCheckStart(phase=PHASE, task=task.id, attempt=attempt, bound_s=judge.bound_s))
    judged = judge.check(task.checker, reply, list(task.tools), fmt)
    verdict = judged.as_verdict
    fields: dict = {"check_ns": judged.ns}
    if judged.error is not None:
        fields["check_error"] = judged.error
    if verdict.tool is not None:
        fields["tool"] = ToolCall(parses=verdict.tool.parses, right_function=verdict.tool.right_function,
                                  arguments_valid=verdict.tool.arguments_valid)
    return verdict, fields


def _sampling_fields(sampled: tuple[float, int] | None) -> dict:
    return {} if sampled is None else {"temperature": sampled[0], "seed": sampled[1]}


SERVER_FORMAT = "the server's own chat template (a chat completion of the task's messages)"
SERVER_SAMPLER = "the server's sampler, sent the OpenAI temperature and seed fields"


def server_generation(temperature: float, seed: int) -> str:
    how = ("greedy (temperature 0)" if not temperature else
           f"{sampling_note(temperature, seed, SERVER_SAMPLER)}"
           f" if the server honours the seed field; one that ignores it gives replies no rerun reproduces (the "
           f"temperature and seed sent are recorded per attempt)")
    return ("one chat completion per attempt, not streamed (its wall time, the server's usage count of tokens; no "
            f"per-token stamps), ended by the server at its model's EOS or max_tokens; {how}")


# a server that takes the field may still render a template without tools: the model then never sees them
SERVER_TOOLS = ("OpenAI tools field, the call read from the reply's tool_calls (whether the model sees the tools is "
                "the server's template's doing), else json")


def _served(ctx: PhaseContext[ServerEngine]) -> None:
    """The tasks through a server's chat completions: the task's messages as they are, its tools
    in the OpenAI ``tools`` field (a tool call read from the reply's ``tool_calls``), or, where the
    server refuses that field, described in a system turn and read in the JSON form; said per
    attempt's message where it happened and in the phase's tool_format."""
    s = ctx.settings
    chat.rendered_by_server(s.chat_template, "through a server the tasks phase sends chat completions:")
    server = able(ctx.engine, CHAT)
    if isinstance(server, str):
        raise MacprofError(f"the tasks phase through {ctx.engine.server}: {server}")
    tf: taskfile.TaskFile = ctx.prepared.tasks  # read once, by the parent
    _started(ctx, tf, SERVER_FORMAT, SERVER_TOOLS, server_generation(s.temperature, s.seed), None)
    settled = settled_tasks(ctx.done)
    with checking.Judge(checking.bound_of(s.timeout), ctx.clock) as judge:
        for task in tf.tasks:
            if task.id not in settled:
                _attempts(ctx, task, lambda attempt, t0, messages: _server_attempt(
                    ctx, server, task, attempt, t0, messages, judge))
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=server.memory() or None))


run_tasks = ByKind(_in_process, _served)


def _server_attempt(ctx: PhaseContext[ServerEngine], server: Chatting, task: taskfile.Task, attempt: int, t0: int,
                    messages: list[dict], judge: checking.Judge) -> tuple[str, checkers.Verdict] | None:
    s = ctx.settings
    sampled = sampling_of(s.temperature, s.seed, task.id, attempt)
    try:
        got = server.chat(messages, list(task.tools), task.max_tokens,
                          chat.with_tool_turn(messages, task.tools) if task.tools else (),
                          temperature=sampled[0] if sampled else 0.0, seed=sampled[1] if sampled else None)
        status, error = "ok", None
    except Exception as exc:  # noqa: BLE001 - the server's error, or a reply its reader could not read: this attempt's
        got, status, error = {}, "error", reason(exc)
    t_end = ctx.clock()
    reply = got.get("text") or ""
    if not isinstance(reply, str):  # a list of parts, a number: no reply text to judge
        raise TypeError(f"the server's reply content is {type(reply).__name__}, not text")
    if got.get("tool_calls"):  # the server parsed the call: checked in the documented JSON form
        call = got["tool_calls"][0]
        reply = json.dumps({"name": call.get("name"), "arguments": call.get("arguments")})
    verdict, checked = _checked(ctx, judge, task, attempt, reply, "json") if status == "ok" else (None, {})
    message = verdict.message if verdict else None
    if verdict is not None and got.get("tools_refused"):
        message = f"{message} ({got['tools_refused']}: the tools were described in a system turn)"
    finish = got.get("finish_reason")
    _emit_attempt(ctx, task, TaskAttempt(
        task=task.id, attempt=attempt, status=status, error=error, t0=t0, t_tokenized=None, token_times=(),
        prompt_tokens=got.get("prompt_tokens"), tokens=(), stop="max_tokens" if finish == "length" else
        "eos" if status == "ok" else None, text=reply, correct=verdict.correct if verdict else None,
        message=message, t_end=t_end, completion_tokens=got.get("completion_tokens"), **checked,
        **({"claims": got["claims"]} if got.get("claims") else {}),  # the usage's counts: wire.chat_reply
        **_sampling_fields(sampled)))
    return None if verdict is None or verdict.correct else (reply, verdict)


def _generate(engine: Engine, sampler: Sampling | None, ids: list[int], max_tokens: int, eos: set[int],
              clock: Clock, sampled: tuple[float, int] | None = None) -> dict:
    """The reply's ids, stamped as each comes: the engine's generate() (the sampler's
    generate_sampled() at a temperature and seed) is consumed up to an end-of-generation id or
    max_tokens, then closed (the engine's loop stops there)."""
    tokens: list[int] = []
    times: list[int] = []
    stop: str | None = None
    status, error = "ok", None
    if sampled is None:
        gen = engine.generate(ids, max_tokens)
    elif sampler is not None:
        gen = sampler.generate_sampled(ids, max_tokens, *sampled)
    else:  # never: an attempt is sampled only at a temperature, for which the phase found a sampler
        raise MacprofError("a sampled attempt without the engine's sampler")
    try:
        with contextlib.closing(ending_at(gen, eos)) as replied:  # closed, the engine's loop stops there
            for token in replied:
                times.append(clock())
                tokens.append(int(token))
        stop = reply_end(tokens, eos)
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded attempt
        status, error = "error", reason(exc)
    reply = tokens[:-1] if stop == "eos" else tokens
    return {"tokens": tokens, "times": times, "reply": reply, "stop": stop, "status": status, "error": error}
