"""Messages -> prompt text, as apps render a conversation: through the model's own chat template
(a Jinja2 template, as Hugging Face's ``apply_chat_template`` and llama.cpp's Jinja path run it:
``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``; trim_blocks
and lstrip_blocks on, in a sandbox), from the GGUF's ``tokenizer.chat_template`` or the MLX model's
tokenizer_config.json; or a template file (``--chat-template``); or, where the model has none, the
plain FALLBACK below, which the log names so that no one mistakes it for the model's format.

The text is then tokenized with the model's special tokens parsed (``tokenize(text, special=True)``),
as a server does with a rendered chat prompt; a BOS the template writes and the tokenizer adds
again is kept once (llama.cpp's server warns of the double BOS; Hugging Face adds none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macprof.errors import MacprofError

# A documented plain format for models without a template: each message "role:", a line break,
# its content and a blank line; the generation prompt "assistant:" and a line break, so that the
# reply, rendered in the next turn, follows exactly where it was generated.
FALLBACK = ("{% for m in messages %}{{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:\n{% endif %}")


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # "model" (the model's own), "file" (--chat-template) or "fallback" (the model has none)
    text: str
    path: str | None = None  # the --chat-template file
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        try:
            return _compiled(self.text).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                               bos_token=self.bos_token, eos_token=self.eos_token, tools=None)
        except _Refused as exc:
            raise MacprofError(f"the chat template ({self.where}) refused {len(messages)} messages: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a template's own error, said in one line
            raise MacprofError(f"the chat template ({self.where}) failed to render {len(messages)} messages: "
                               f"{type(exc).__name__}: {exc}") from None

    @property
    def where(self) -> str:
        return f"{self.source}: {self.path}" if self.path else self.source


def template_for(engine, path: str | None) -> ChatTemplate:
    """The template a conversation is rendered with: ``path`` (--chat-template) when given,
    else the model's own (the engine's ``chat_template``), else FALLBACK."""
    specials = dict(getattr(engine, "special_texts", lambda: {})() or {})
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MacprofError(f"--chat-template {path}: cannot be read: {exc}") from None
        template = ChatTemplate("file", text, str(path), **specials)
    elif getattr(engine, "chat_template", None):
        template = ChatTemplate("model", engine.chat_template, None, **specials)
    else:
        template = ChatTemplate("fallback", FALLBACK, None, **specials)
    _compiled(template.text)  # a template that does not compile is refused before any request
    return template


def chat_ids(engine, text: str) -> list[int]:
    """The rendered prompt's ids, special tokens parsed; a BOS the template wrote and the
    tokenizer added again is kept once."""
    ids = list(engine.tokenize(text, special=True))
    lead = list(engine.tokenize(""))
    if lead and ids[:2 * len(lead)] == lead + lead:
        ids = ids[len(lead):]
    return ids


class _Refused(Exception):
    """A template's own ``raise_exception`` (roles that do not alternate, a role it does not know)."""


_cache: dict[str, Any] = {}


def _compiled(text: str):
    if text not in _cache:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise _Refused(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            _cache[text] = env.from_string(text)
        except TemplateError as exc:
            raise MacprofError(f"the chat template does not compile: {exc}") from None
    return _cache[text]
