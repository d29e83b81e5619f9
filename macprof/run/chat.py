"""A task's conversation as the prompt text a model reads (pure, no engine): through the
model's own chat template where it has one, rendered as transformers' apply_chat_template
renders it (a jinja2 sandbox, trim_blocks and lstrip_blocks, ``tojson``, ``raise_exception``,
``add_generation_prompt``), else the plain form below. Which one, and how tool calls are to be
written, go into the log (docs/tasks.md).

The plain form (the demo models have no template):

    System: <system turn>            (if any)

    User: <user turn>
    Assistant: <assistant turn>
    ...
    Assistant:

Tools: a template that takes ``tools`` gets them as it defines, and its tool-call format is
read off the template's markup (``tool_format``); otherwise the tools and the documented JSON
form are described in a system turn of macprof's (TOOL_INSTRUCTION).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from macprof.engines.base import ChatTemplate

PLAIN = "plain: 'System: ...' / 'User: ...' / 'Assistant: ...' turns, one blank line after the system turn"
TOOL_INSTRUCTION = ("You can call these functions (each with the JSON Schema of its arguments):\n{tools}\n"
                    "To call one, reply with only a JSON object: "
                    '{{"name": "<the function\'s name>", "arguments": {{<its arguments>}}}}')
RETRY = "That is not right: {message}. Try again."  # the next user turn after a failed attempt


@dataclass(frozen=True)
class Rendered:
    text: str
    tool_format: str  # how the reply's tool call is read (measure/checkers.py TOOL_FORMATS)


def prompt_format(template: ChatTemplate | None) -> str:
    """What the log says of how prompts were written."""
    return f"the model's chat template ({template.source})" if template else f"no chat template: {PLAIN}"


def takes_tools(template: ChatTemplate | None) -> bool:
    return bool(template) and "tools" in template.text  # type: ignore[union-attr]


def tool_format(template: ChatTemplate | None) -> str:
    """The tool-call format the template defines, read off its markup; "json" (the documented
    form) where it defines none."""
    if not takes_tools(template):
        return "json"
    text = template.text  # type: ignore[union-attr]
    if "<tool_call>" in text:
        return "hermes"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if "<|python_tag|>" in text or "ipython" in text:
        return "llama3"
    return "json"


def _tool_turn(tools: Sequence[dict]) -> dict:
    listed = "\n".join(json.dumps(t["function"], separators=(",", ":")) for t in tools)
    return {"role": "system", "content": TOOL_INSTRUCTION.format(tools=listed)}


def with_tool_turn(messages: list[dict], tools: Sequence[dict]) -> list[dict]:
    """macprof's tool turn, joined to the task's own system turn where it has one."""
    turn = _tool_turn(tools)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + turn["content"]}, *messages[1:]]
    return [turn, *messages]


def plain(messages: Sequence[dict]) -> str:
    out = []
    for m in messages:
        if m["role"] == "system":
            out.append(f"System: {m['content']}\n\n")
        else:
            out.append(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}\n")
    return "".join(out) + "Assistant:"


def _environment():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        import datetime

        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    return env


def render(template: ChatTemplate | None, messages: Sequence[dict], tools: Sequence[dict] = ()) -> Rendered:
    """The prompt text of ``messages`` (and ``tools``) for a model with ``template``; a template
    that fails to render raises jinja2's TemplateError (the phase records it per task)."""
    msgs = [dict(m) for m in messages]
    if template is None:
        return Rendered(plain(with_tool_turn(msgs, tools) if tools else msgs), "json")
    native = takes_tools(template)
    if tools and not native:
        msgs = with_tool_turn(msgs, tools)
    text = _environment().from_string(template.text).render(
        messages=msgs, tools=list(tools) if tools and native else None, add_generation_prompt=True,
        bos_token=template.bos_token, eos_token=template.eos_token)
    return Rendered(text, tool_format(template) if tools else "json")
