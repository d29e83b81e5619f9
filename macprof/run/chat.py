"""Messages as the prompt text a model reads, for every phase that renders them (the tasks
phase's attempts, the conversation phase's turns): one path. ``template_for``: the
``--chat-template`` file where one is given (its text as the run's parent read it, once:
``TemplateFile``, handed to every worker), else the model's own chat template, else FALLBACK,
macprof's one documented form for a model that has none (the demo models). A template renders
as transformers' apply_chat_template renders it (a jinja2 sandbox, trim_blocks and
lstrip_blocks, ``tojson``, ``raise_exception``, ``add_generation_prompt``). Which one, and how
tool calls are to be written, go into the log (docs/tasks.md; docs/design.md, "Conversations: the reuse apps really get").

The fallback form (FALLBACK):

    system:
    <system turn>

    user:
    <user turn>

    assistant:
    <assistant turn>

    ...
    assistant:
    <- generation starts here

each message ``<role>:``, a line break, its content and a blank line; the generation prompt
``assistant:`` and a line break, so that a reply rendered in the next turn follows exactly where
it was generated (a form whose generation prompt ends in a space, "Assistant:" then " reply",
would put the reply's first token elsewhere than the model generated it, and stop its reuse).

Where a server renders the messages itself (a chat completion: the tasks phase through a server,
the conversation phase with ``--api chat``), there is nothing to render here: a ``--chat-template``
is refused in one line (``rendered_by_server``), never ignored.

Tools: a template that takes ``tools`` gets them as it defines, and its tool-call format is
read off the template's markup (``Template.tool_format``); otherwise the tools and the
documented JSON form are described in a system turn of macprof's (TOOL_INSTRUCTION).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from macprof.engines.base import MAX_TEMPLATE_BYTES, EngineCore
from macprof.errors import MacprofError, reason
from macprof.run import sandbox

if TYPE_CHECKING:
    from jinja2 import Template as Jinja

    from macprof.config import ModelSpec
    from macprof.run.phases.api import Reads

TOOL_INSTRUCTION = ("You can call these functions (each with the JSON Schema of its arguments):\n{tools}\n"
                    "To call one, reply with only a JSON object: "
                    '{{"name": "<the function\'s name>", "arguments": {{<its arguments>}}}}')
RETRY = "That is not right: {message}. Try again."  # the next user turn after a failed attempt

# macprof's form for a model with no template (the module's note)
FALLBACK = ("{% for m in messages %}{{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:\n{% endif %}")
FALLBACK_FORM = ("macprof's fallback: each message '<role>:', a line break, its content and a blank line; then "
                 "'assistant:' and a line break")


def _tool_turn(tools: Sequence[dict]) -> dict:
    listed = "\n".join(json.dumps(t["function"], separators=(",", ":")) for t in tools)
    return {"role": "system", "content": TOOL_INSTRUCTION.format(tools=listed)}


def with_tool_turn(messages: Sequence[dict], tools: Sequence[dict]) -> list[dict]:
    """macprof's tool turn, joined to the task's own system turn where it has one."""
    turn = _tool_turn(tools)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": messages[0]["content"] + "\n\n" + turn["content"]}, *messages[1:]]
    return [turn, *messages]


@dataclass(frozen=True)
class Template:
    """The template a phase renders messages with, and where it came from."""

    source: str  # "model" (the model's own), "file" (--chat-template) or "fallback" (the model has none)
    text: str
    path: str | None = None  # the --chat-template file, or where the model's came from
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict] = ()) -> str:
        """The prompt text of ``messages`` (and ``tools``), the generation prompt after them; a
        template that fails to render (its own error, a sandbox refusal, whatever it raises) is
        one MacprofError saying why (the phase records it: the task refused, the app stopped)."""
        msgs = [dict(m) for m in messages]
        native = bool(tools) and self.takes_tools
        if tools and not native:
            msgs = with_tool_turn(msgs, tools)
        try:
            return sandbox.render(_compiled(self.text), messages=msgs, tools=list(tools) if native else None,
                                  add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token)
        except Exception as exc:  # noqa: BLE001 - a template's own error (its raise_exception too), a sandbox refusal: one line
            raise MacprofError(f"the chat template ({self.where}) failed to render {len(messages)} messages: "
                               f"{reason(exc)}") from None

    @property
    def where(self) -> str:
        return f"{self.source}: {self.path}" if self.path else self.source

    @property
    def takes_tools(self) -> bool:
        return "tools" in self.text

    @property
    def tool_format(self) -> str:
        """How a reply's tool call is read (run/checkers.py TOOL_FORMATS): the format the
        template defines, read off its markup; "json" (the documented form) where it defines none."""
        if not self.takes_tools:
            return "json"
        if "<tool_call>" in self.text:
            return "hermes"
        if "[TOOL_CALLS]" in self.text:
            return "mistral"
        if "<|python_tag|>" in self.text or "ipython" in self.text:
            return "llama3"
        return "json"

    @property
    def described(self) -> str:
        """What the log says of how prompts were written (the tasks phase's prompt_format)."""
        if self.source == "model":
            return f"the model's chat template ({self.path})"
        if self.source == "file":
            return f"the chat template file {self.path} (--chat-template)"
        return f"no chat template: {FALLBACK_FORM}"


@dataclass(frozen=True)
class TemplateFile:
    """A --chat-template file as it was read, once per run, by the parent of the phases that
    render through it (``given_template``): its text is what every worker
    renders, and its sha256 what the model's inputs record and a --resume compares."""

    path: str
    text: str

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8")  # the file's bytes (it was read as UTF-8)

    @property
    def sha256(self) -> str:
        import hashlib

        return hashlib.sha256(self.data).hexdigest()


def read_template(path: str) -> TemplateFile:
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
    return TemplateFile(str(path), text)


CHAT_TEMPLATE = "the chat template"  # its role among a model's inputs (model_start identity.inputs)


def given_template(reads: Reads, model: ModelSpec) -> TemplateFile | None:
    """The model's --chat-template as the run reads it, once however many phases and models
    render through it (``read_template``: one that cannot be read or compiled is one line); None
    where none is given. A parent of a phase that renders (the conversation, the tasks) hands it
    to its workers, which render that text."""
    path = model.settings.chat_template
    return reads.once(CHAT_TEMPLATE, path, read_template) if path else None


def given_templates(reads: Reads, models: Sequence[ModelSpec], phase: str) -> None:
    """Each --chat-template of a model that asks for ``phase`` read now, before any worker."""
    for m in models:
        if phase in m.settings.phases:
            given_template(reads, m)


def template_input(reads: Reads, model: ModelSpec) -> list[dict]:
    """The --chat-template file among the model's inputs (Parent.inputs), where one is given: the
    size and sha256 of the text the run read, which its workers render."""
    given = given_template(reads, model)
    return [] if given is None else [{"role": CHAT_TEMPLATE, "path": str(Path(given.path)), "bytes": len(given.data),
                                      "sha256": given.sha256}]  # the path as every input's (api.py file_input)


def template_for(engine: EngineCore, given: TemplateFile | None) -> Template:
    """``given`` (the --chat-template the parent read) when there is one, else the model's own
    (``engine.chat_template()``), else FALLBACK; a template that does not compile is refused
    before any request."""
    own = engine.chat_template()
    specials = {"bos_token": own.bos_token, "eos_token": own.eos_token} if own else {}
    if given is not None:
        template = Template("file", given.text, given.path, **specials)
    elif own:
        template = Template("model", own.text, own.source, **specials)
    else:
        template = Template("fallback", FALLBACK)
    _compiled(template.text)
    return template


def rendered_by_server(path: str | None, what: str, instead: str = "") -> None:
    """Where the server applies its model's own template to the messages (``what`` says where):
    a --chat-template cannot be honoured, and is refused in one line rather than ignored
    (``instead``: what to give to have it honoured)."""
    if path:
        raise MacprofError(f"--chat-template {path}: {what} the server applies its model's own template to the "
                           f"messages, so no template is rendered here{instead}")


@functools.lru_cache(maxsize=None)
def _jinja(text: str) -> Jinja:
    """A template's compiled form, compiled once per text (every task attempt and conversation
    turn renders the same one); jinja2's TemplateError where it does not compile."""
    return _environment().from_string(text)


def _compiled(text: str) -> Jinja:
    from jinja2.exceptions import TemplateError

    try:
        return _jinja(text)
    except TemplateError as exc:
        raise MacprofError(f"the chat template does not compile: {exc}") from None


def _environment() -> Any:
    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        import datetime

        return datetime.datetime.now().strftime(fmt)

    # jinja2's immutable sandbox, with what a template builds capped in size (run/sandbox.py)
    env = sandbox.environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = sandbox.guard_filter("tojson", tojson)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    return env
