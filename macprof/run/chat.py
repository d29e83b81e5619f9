"""Messages as the prompt text a model reads: a task's (``render``) and a conversation's turns
(``template_for`` / ``Template.render``, the conversation phase). A task's, pure, no engine: through the
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

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from macprof.engines.base import MAX_TEMPLATE_BYTES, ChatTemplate
from macprof.errors import MacprofError, reason
from macprof.run import sandbox

PLAIN = "plain: 'System: ...' / 'User: ...' / 'Assistant: ...' turns, one blank line after the system turn"
TOOL_INSTRUCTION = ("You can call these functions (each with the JSON Schema of its arguments):\n{tools}\n"
                    "To call one, reply with only a JSON object: "
                    '{{"name": "<the function\'s name>", "arguments": {{<its arguments>}}}}')
RETRY = "That is not right: {message}. Try again."  # the next user turn after a failed attempt


@dataclass(frozen=True)
class Rendered:
    text: str
    tool_format: str  # how the reply's tool call is read (run/checkers.py TOOL_FORMATS)


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
    def raise_exception(message: str):
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(value, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        import datetime

        return datetime.datetime.now().strftime(fmt)

    # jinja2's immutable sandbox, with what a template builds capped in size (run/sandbox.py)
    env = sandbox.environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = sandbox.guard_filter("tojson", tojson)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    return env


def render(template: ChatTemplate | None, messages: Sequence[dict], tools: Sequence[dict] = ()) -> Rendered:
    """The prompt text of ``messages`` (and ``tools``) for a model with ``template``; a template
    that fails to render (its own error, a sandbox refusal, whatever it raises) is one
    MacprofError saying why (the phase records it per task)."""
    msgs = [dict(m) for m in messages]
    if template is None:
        return Rendered(plain(with_tool_turn(msgs, tools) if tools else msgs), "json")
    native = takes_tools(template)
    if tools and not native:
        msgs = with_tool_turn(msgs, tools)
    try:
        text = sandbox.render(_jinja(template.text), messages=msgs, tools=list(tools) if tools and native else None,
                         add_generation_prompt=True, bos_token=template.bos_token, eos_token=template.eos_token)
    except Exception as exc:  # noqa: BLE001 - a template's own error, a sandbox refusal, a MemoryError: one line
        raise MacprofError(f"the chat template ({template.source}) did not render: {reason(exc)}") from None
    return Rendered(text, tool_format(template) if tools else "json")


# -- a conversation's turns (the conversation phase) ------------------------------------------
# A documented plain format for models without a template: each message "role:", a line break,
# its content and a blank line; the generation prompt "assistant:" and a line break, so that the
# reply, rendered in the next turn, follows exactly where it was generated.
FALLBACK = ("{% for m in messages %}{{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:\n{% endif %}")


@dataclass(frozen=True)
class Template:
    """The template a conversation is rendered with, and where it came from."""

    source: str  # "model" (the model's own), "file" (--chat-template) or "fallback" (the model has none)
    text: str
    path: str | None = None  # the --chat-template file, or where the model's came from
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        try:
            return sandbox.render(_compiled(self.text), messages=messages, add_generation_prompt=add_generation_prompt,
                             bos_token=self.bos_token, eos_token=self.eos_token, tools=None)
        except Exception as exc:  # noqa: BLE001 - a template's own error (its raise_exception too), in one line
            raise MacprofError(f"the chat template ({self.where}) failed to render {len(messages)} messages: "
                               f"{reason(exc)}") from None

    @property
    def where(self) -> str:
        return f"{self.source}: {self.path}" if self.path else self.source


def read_template(path: str) -> str:
    """A --chat-template file's text, compiled once to refuse one that does not compile; one line
    where it cannot be read: through the one reader (files/filekind.py), so a FIFO, /dev/zero
    or /proc/self/environ is refused, never read into a prompt."""
    from macprof.files import filekind

    try:
        text = filekind.read_text(Path(path), MAX_TEMPLATE_BYTES, "a chat template")
    except OSError as exc:
        raise MacprofError(f"--chat-template {path}: cannot be read: {exc.strerror or exc}") from None
    except MacprofError as exc:
        raise MacprofError(f"--chat-template {exc}") from None
    try:
        _compiled(text)
    except MacprofError as exc:
        raise MacprofError(f"--chat-template {path}: {exc}") from None
    return text


def template_for(engine, path: str | None) -> Template:
    """``path`` (--chat-template) when given, else the model's own (``engine.chat_template()``),
    else FALLBACK; a template that does not compile is refused before any request."""
    own = engine.chat_template()
    specials = {"bos_token": own.bos_token, "eos_token": own.eos_token} if own else {}
    if path:
        template = Template("file", read_template(path), str(path), **specials)
    elif own:
        template = Template("model", own.text, own.source, **specials)
    else:
        template = Template("fallback", FALLBACK)
    _compiled(template.text)
    return template


@functools.lru_cache(maxsize=None)
def _jinja(text: str):
    """A template's compiled form, compiled once per text (every task attempt and conversation
    turn renders the same one); jinja2's TemplateError where it does not compile."""
    return _environment().from_string(text)


def _compiled(text: str):
    from jinja2.exceptions import TemplateError

    try:
        return _jinja(text)
    except TemplateError as exc:
        raise MacprofError(f"the chat template does not compile: {exc}") from None
