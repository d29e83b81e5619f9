"""The tasks phase: does the model answer right, as an app would ask it? Each task of the task
file (config/taskfile.py; the shipped set by default) is rendered through the model's chat
template, or the plain form where it has none (run/chat.py), and generated as apps generate:
the reply ends at an end-of-generation id (unlike the speed phases, which hold EOS off so that
lengths are exact) or at the task's max_tokens, greedy. Its checker (measure/checkers.py)
judges the reply; with --attempts N a failed task is asked again with the checker's message as
the next user turn, as an agent loop does.

Every attempt is journaled raw (its stamps, ids, text, verdict), so every figure of the phase
recomputes from the log (analyse/tasks.py). A task that cannot run in this model (longer than
the context, a template that does not render) is one task_refused line; the others run.
"""

from __future__ import annotations

from macprof.config import taskfile
from macprof.engines.base import lacks
from macprof.errors import MacprofError
from macprof.measure import checkers
from macprof.model import events as ev
from macprof.model.tasks import TaskAttemptDone, TaskRefusal, TaskRefused, TaskSetInfo, TasksStart, ToolCall
from macprof.phases import TASKS_CONTEXT
from macprof.run import chat
from macprof.run.phases.common import PhaseContext

PHASE = "tasks"


def generation_note(eos: int, temperature: float) -> str:
    how = "greedy (argmax)" if not temperature else f"the first attempt greedy, retries sampled at temperature {temperature:g}"
    return (f"a reply ends at the model's end-of-generation id ({eos} id(s)) or at the task's max_tokens, unlike the "
            f"speed phases, which hold EOS off; {how}; the cache is emptied before each task, a retry reuses its "
            f"conversation's prefix")


def run_tasks(ctx: PhaseContext) -> None:
    engine, s = ctx.engine, ctx.settings
    if s.temperature > 0:
        why = lacks(engine, "sample")
        if why:
            raise MacprofError(f"--temperature {s.temperature:g}: the {engine.name} engine cannot sample: {why}")
    tf = taskfile.load(s.tasks)
    if not lacks(engine, "chat"):  # a server: it applies its model's template and ends at its EOS
        _run_on_server(ctx, tf)
        return
    template = engine.chat_template()
    eos = set(engine.eos_ids)
    tool_formats = {chat.tool_format(template)} if any(t.tools for t in tf.tasks) else set()
    ctx.emit(TasksStart(
        phase=PHASE, task_set=TaskSetInfo(source=tf.source, sha256=tf.sha256, bytes=tf.bytes, tasks=len(tf.tasks),
                                          refused=len(tf.refused)),
        prompt_format=chat.prompt_format(template), tool_format=next(iter(tool_formats), None),
        generation=generation_note(len(eos), s.temperature), attempts_allowed=s.attempts, temperature=s.temperature,
        seed=s.seed, context_tokens=TASKS_CONTEXT,
        refusals=tuple(TaskRefusal(line=line, task=task, reason=why) for line, task, why in tf.refused)))
    seq = 0
    for task in tf.tasks:
        engine.reset()  # tasks are independent: nothing of the last one's conversation is cached
        messages = [dict(m) for m in task.messages]
        for attempt in range(1, s.attempts + 1):
            try:
                rendered = chat.render(template, messages, task.tools)
            except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError and what a template raises
                ctx.emit(TaskRefused(phase=PHASE, line=task.line, task=task.id,
                                     reason=f"task {task.id!r}: the chat template did not render: {exc}"))
                break
            t0 = ctx.clock()
            ids = engine.tokenize_chat(rendered.text)
            t_tok = ctx.clock()
            if len(ids) + task.max_tokens > TASKS_CONTEXT:
                ctx.emit(TaskRefused(phase=PHASE, line=task.line, task=task.id, reason=(
                    f"task {task.id!r}{f' attempt {attempt}' if attempt > 1 else ''}: {len(ids)} prompt tokens + "
                    f"max_tokens {task.max_tokens} exceed the phase's context of {TASKS_CONTEXT} tokens")))
                break
            ctx.emit(ev.RequestStart(phase=PHASE, index=seq, kind="task", case=task.id))  # the parent's timeout
            seq += 1
            got = _generate(engine, ids, task.max_tokens, eos, ctx.clock)
            reply = engine.detokenize(got["reply"]) if got["status"] == "ok" else ""
            verdict = checkers.check(task.checker, reply, list(task.tools), rendered.tool_format) \
                if got["status"] == "ok" else None
            tool: dict = ({"tool": ToolCall(parses=verdict.tool.parses, right_function=verdict.tool.right_function,
                                      arguments_valid=verdict.tool.arguments_valid)}
                    if verdict is not None and verdict.tool is not None else {})
            ctx.emit(TaskAttemptDone(
                phase=PHASE, category=task.category, checker=task.checker["type"], task=task.id, attempt=attempt,
                status=got["status"], error=got["error"], t0=t0, t_tokenized=t_tok, token_times=tuple(got["times"]),
                prompt_tokens=len(ids), tokens=tuple(got["tokens"]), stop=got["stop"], text=reply,
                correct=verdict.correct if verdict else None, message=verdict.message if verdict else None, **tool))
            if verdict is None or verdict.correct:
                break
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": chat.RETRY.format(message=verdict.message)}]
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory() or None))


SERVER_FORMAT = "the server's own chat template (a chat completion of the task's messages)"
SERVER_GENERATION = ("one chat completion per attempt, not streamed (its wall time, the server's usage count of "
                     "tokens; no per-token stamps), ended by the server at its model's EOS or max_tokens; "
                     "greedy (temperature 0)")


# a server that takes the field may still render a template without tools: the model then never sees them
SERVER_TOOLS = ("OpenAI tools field, the call read from the reply's tool_calls (whether the model sees the tools is "
                "the server's template's doing), else json")


def _run_on_server(ctx: PhaseContext, tf) -> None:
    """The tasks through a server's chat completions: the task's messages as they are, its tools
    in the OpenAI ``tools`` field (a tool call read from the reply's ``tool_calls``), or, where the
    server refuses that field, described in a system turn and read in the JSON form; said per
    attempt's message where it happened and in the phase's tool_format."""
    engine, s = ctx.engine, ctx.settings
    ctx.emit(TasksStart(
        phase=PHASE, task_set=TaskSetInfo(source=tf.source, sha256=tf.sha256, bytes=tf.bytes, tasks=len(tf.tasks),
                                          refused=len(tf.refused)),
        prompt_format=SERVER_FORMAT, tool_format=SERVER_TOOLS
        if any(t.tools for t in tf.tasks) else None, generation=SERVER_GENERATION, attempts_allowed=s.attempts,
        temperature=s.temperature, seed=s.seed, context_tokens=None,
        refusals=tuple(TaskRefusal(line=line, task=task, reason=why) for line, task, why in tf.refused)))
    seq = 0
    for task in tf.tasks:
        messages = [dict(m) for m in task.messages]
        for attempt in range(1, s.attempts + 1):
            ctx.emit(ev.RequestStart(phase=PHASE, index=seq, kind="task", case=task.id))
            seq += 1
            t0 = ctx.clock()
            try:
                got = engine.chat(messages, list(task.tools), task.max_tokens,
                                  chat.with_tool_turn(messages, task.tools) if task.tools else ())
                status, error = "ok", None
            except MacprofError as exc:
                got, status, error = {}, "error", str(exc)
            t_end = ctx.clock()
            reply = got.get("text") or ""
            if got.get("tool_calls"):  # the server parsed the call: checked in the documented JSON form
                import json

                call = got["tool_calls"][0]
                reply = json.dumps({"name": call.get("name"), "arguments": call.get("arguments")})
            verdict = checkers.check(task.checker, reply, list(task.tools), "json") if status == "ok" else None
            tool: dict = ({"tool": ToolCall(parses=verdict.tool.parses, right_function=verdict.tool.right_function,
                                            arguments_valid=verdict.tool.arguments_valid)}
                          if verdict is not None and verdict.tool is not None else {})
            message = verdict.message if verdict else None
            if verdict is not None and got.get("tools_refused"):
                message = f"{message} ({got['tools_refused']}: the tools were described in a system turn)"
            finish = got.get("finish_reason")
            ctx.emit(TaskAttemptDone(
                phase=PHASE, category=task.category, checker=task.checker["type"], task=task.id, attempt=attempt,
                status=status, error=error, t0=t0, t_tokenized=None, token_times=(), prompt_tokens=int(
                    got.get("prompt_tokens") or 0), tokens=(), stop="max_tokens" if finish == "length" else
                "eos" if status == "ok" else None, text=reply, correct=verdict.correct if verdict else None,
                message=message, t_end=t_end, completion_tokens=got.get("completion_tokens"), **tool))
            if verdict is None or verdict.correct:
                break
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": chat.RETRY.format(message=verdict.message)}]
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory() or None))


def _generate(engine, ids: list[int], max_tokens: int, eos: set[int], clock) -> dict:
    """The reply's ids, stamped as each comes: the engine's generate() is consumed up to an
    end-of-generation id or max_tokens, then closed (the engine's loop stops there)."""
    tokens: list[int] = []
    times: list[int] = []
    stop: str | None = "max_tokens"
    status, error = "ok", None
    gen = engine.generate(ids, max_tokens)
    try:
        for token in gen:
            times.append(clock())
            tokens.append(int(token))
            if token in eos:
                stop = "eos"
                break
    except Exception as exc:  # noqa: BLE001 - an engine error is a recorded attempt
        status, error, stop = "error", f"{type(exc).__name__}: {exc}", None
    finally:
        gen.close()
    reply = tokens[:-1] if stop == "eos" else tokens
    return {"tokens": tokens, "times": times, "reply": reply, "stop": stop, "status": status, "error": error}
