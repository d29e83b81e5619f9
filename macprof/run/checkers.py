"""The tasks phase's checkers: is a reply right? Pure functions of the checker's spec (a task
line's ``checker`` object), the reply's text and, for a tool call, the task's tools and the
model's tool-call format. No I/O, no engine: tests/test_checkers.py holds them to hand-written
replies. The definitions, for users, are in docs/tasks.md.

A checker's message is what the model is told on a retry (the next user turn), so it says what
is wrong without giving the answer away: "41 is not the right number", never "the answer is 42".
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

KINDS = ("exact", "regex", "number", "choice", "json-schema", "tool-call")
# the formats a tool call is read in: the documented JSON form, and the models' own ones a chat
# template can define (run/chat.py tool_format reads which from the template)
TOOL_FORMATS = ("json", "hermes", "mistral", "llama3")


@dataclass(frozen=True)
class ToolValidity:
    """A tool call's three steps: it parses (in the format), names the asked function, and its
    arguments validate against that function's JSON Schema (each false from the first that fails)."""

    parses: bool
    right_function: bool
    arguments_valid: bool


@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str
    tool: ToolValidity | None = None  # tool-call checkers only


NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n(.*?)\n?```$", re.DOTALL)


def strip_fence(text: str) -> str:
    """The reply without its surrounding whitespace and one markdown code fence (```json ... ```),
    as apps strip them before parsing."""
    text = text.strip()
    m = _FENCE.match(text)
    return m.group(1).strip() if m else text


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return json.dumps(text if len(text) <= n else text[:n] + "...")


# -- the checkers ---------------------------------------------------------------------------
def exact(spec: dict, reply: str) -> Verdict:
    """The reply, stripped of surrounding whitespace, is the answer (case folded with ignore_case)."""
    got, want = reply.strip(), str(spec["answer"]).strip()
    if spec.get("ignore_case"):
        got, want = got.casefold(), want.casefold()
    if got == want:
        return Verdict(True, "right")
    return Verdict(False, f"the reply {_short(reply)} is not the expected answer" if got else "the reply is empty")


def regex(spec: dict, reply: str) -> Verdict:
    """The pattern is found in the stripped reply (``full``: it matches the whole of it)."""
    flags = re.IGNORECASE if spec.get("ignore_case") else 0
    pattern = re.compile(spec["pattern"], flags | re.DOTALL)
    text = reply.strip()
    hit = pattern.fullmatch(text) if spec.get("full") else pattern.search(text)
    if hit:
        return Verdict(True, "right")
    return Verdict(False, f"the reply {_short(reply)} is not in the required form")


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (thousands commas allowed: 1,234.5), or None: the
    final answer, as lm-evaluation-harness's flexible extract reads it ("17 + 25 = 42" is 42)."""
    found = NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:  # pragma: no cover - the pattern only matches numbers
        return None


def number(spec: dict, reply: str) -> Verdict:
    """The last number in the reply is within ``tolerance`` (absolute, default 0) of the answer."""
    got = last_number(reply)
    if got is None:
        return Verdict(False, f"no number in the reply {_short(reply)}")
    want, tol = float(spec["answer"]), float(spec.get("tolerance", 0))
    if math.isfinite(got) and abs(got - want) <= tol:
        return Verdict(True, "right")
    return Verdict(False, f"{got:g} is not the right number")


def chosen_option(options: list[str], reply: str) -> str | None:
    """The option the reply chose: the reply (markdown emphasis, quotes and brackets around it
    dropped) is one option, or starts with one followed by punctuation or a line break ("B) Paris",
    "B. because", "No, it is not"), never by a space ("A good answer is B" chose nothing: "A" is an
    article there), nor by a slash or bar that joins another option ("Yes/No" named both: it chose
    neither); case-insensitive. None: no option at its start."""
    text = reply.strip().strip("*_`\"'([ ").strip()
    for opt in sorted(options, key=len, reverse=True):  # "AB" before "A"
        if text.casefold() == opt.casefold():
            return opt
        head, rest = text[:len(opt)], text[len(opt):]
        if head.casefold() == opt.casefold() and rest and not rest[0].isalnum() and rest[0] not in " \t":
            after = rest[1:].strip().casefold()
            if rest[0] in "/|" and any(after.startswith(o.casefold()) for o in options if o != opt):
                return None
            return opt
    return None


def choice(spec: dict, reply: str) -> Verdict:
    options = [str(o) for o in spec["options"]]
    got = chosen_option(options, reply)
    if got is None:
        return Verdict(False, f"the reply does not start with one of the options {', '.join(options)}")
    if got.casefold() == str(spec["answer"]).casefold():
        return Verdict(True, "right")
    return Verdict(False, f"{got} is not the right option")


def validator(schema: Any):
    """A Draft 2020-12 validator of ``schema`` that reaches nothing outside it: its references
    resolve in the schema itself (and the metaschemas jsonschema ships) through an empty
    ``referencing.Registry``, which retrieves nothing. jsonschema's default registry fetches an
    http reference and opens a file: one, and the content went into the checker's message,
    the retry turn and the log. A reference outside the schema raises ``referencing``'s
    Unresolvable; the task file refuses one when it loads (``ref_problem``)."""
    import jsonschema
    from referencing import Registry

    return jsonschema.Draft202012Validator(schema, registry=Registry())


class Unjudgeable(Exception):
    """A checker's spec that cannot be applied to the reply (a schema's reference that does not
    resolve inside it): the check fails with this reason; the task file refuses such a spec."""


def _schema_error(schema: Any, value: Any) -> str | None:
    import jsonschema
    from referencing.exceptions import Unresolvable

    try:
        err = jsonschema.exceptions.best_match(validator(schema).iter_errors(value))
    except Unresolvable as exc:
        ref = getattr(exc, "ref", None) or str(exc)
        raise Unjudgeable(f"the schema's reference {ref!r} does not resolve inside it (macprof fetches and opens "
                          f"nothing a task names)") from None
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return f"{'at ' + where + ': ' if where else ''}{err.message}"


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def loads(text: str) -> Any:
    """JSON as the standard reads it: Python's json module also takes NaN, Infinity and
    -Infinity, which JSON has no word for ("NaN" passed {"type": "number", "maximum": 1})."""
    return json.loads(text, parse_constant=_not_json)


def json_schema(spec: dict, reply: str) -> Verdict:
    """The reply (one code fence stripped) parses as JSON and validates against the schema."""
    text = strip_fence(reply)
    try:
        value = loads(text)
    except ValueError as exc:
        return Verdict(False, f"the reply is not valid JSON ({exc})")
    err = _schema_error(spec["schema"], value)
    return Verdict(True, "right") if err is None else Verdict(False, f"the JSON does not follow the schema: {err}")


def parse_tool_call(reply: str, fmt: str) -> tuple[str, Any]:
    """(function name, arguments) of the first call in ``reply`` written in ``fmt``; ValueError
    saying why not. Formats (docs/tasks.md):
    json     the reply is {"name": NAME, "arguments": {...}} (or "parameters"), a code fence allowed
    hermes   <tool_call>{"name": ..., "arguments": ...}</tool_call> (Qwen, Hermes)
    mistral  [TOOL_CALLS] [{"name": ..., "arguments": ...}] (the tag may be absent: a special token)
    llama3   <|python_tag|>{"name": ..., "parameters": ...} (the tag optional, as Llama 3.1 writes)"""
    text = reply.strip()
    if fmt == "hermes":
        m = re.search(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", text, re.DOTALL)
        if not m:
            raise ValueError("no <tool_call> in the reply")
        text = m.group(1)
    elif fmt == "mistral":
        text = text.removeprefix("[TOOL_CALLS]").strip()
    elif fmt == "llama3":
        text = text.removeprefix("<|python_tag|>").strip()
    text = strip_fence(text)
    try:
        value = loads(text)
    except ValueError as exc:
        raise ValueError(f"the tool call is not valid JSON ({exc})") from None
    if isinstance(value, list) and fmt in ("mistral", "hermes", "json"):
        if not value:
            raise ValueError("the list of tool calls is empty")
        value = value[0]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError('the tool call is not an object with a "name"')
    key = "arguments" if "arguments" in value else "parameters"
    args = value.get(key, {})
    if isinstance(args, str):  # OpenAI's own wire form carries the arguments as a JSON string
        try:
            args = loads(args)
        except ValueError as exc:
            raise ValueError(f"the call's arguments are not valid JSON ({exc})") from None
    return value["name"], args


def tool_of(tools: list[dict], name: str) -> dict | None:
    return next((t["function"] for t in tools or () if t.get("function", {}).get("name") == name), None)


def tool_call(spec: dict, reply: str, tools: list[dict], fmt: str) -> Verdict:
    """The reply is a call of ``spec["name"]`` whose arguments validate against that tool's
    parameters schema, and hold ``spec["arguments"]``'s values where it gives some."""
    try:
        name, args = parse_tool_call(reply, fmt)
    except ValueError as exc:
        return Verdict(False, str(exc), ToolValidity(False, False, False))
    if name != spec["name"]:
        known = tool_of(tools, name) is not None
        return Verdict(False, f"called {name!r}, {'not the function this needs' if known else 'no such function'}",
                       ToolValidity(True, False, False))
    err = _schema_error((tool_of(tools, name) or {}).get("parameters") or {}, args)
    if err is not None:
        return Verdict(False, f"the arguments of {name} are not valid: {err}", ToolValidity(True, True, False))
    valid = ToolValidity(True, True, True)
    for key, want in (spec.get("arguments") or {}).items():
        if not isinstance(args, dict) or args.get(key) != want:
            return Verdict(False, f"the argument {key!r} of {name} is not the right value", valid)
    return Verdict(True, "right", valid)


_TEXT_CHECKERS: dict[str, Callable[[dict, str], Verdict]] = {
    "exact": exact, "regex": regex, "number": number, "choice": choice, "json-schema": json_schema}


def check(spec: dict, reply: str, tools: list[dict] | None = None, fmt: str = "json") -> Verdict:
    """The verdict of the checker ``spec`` (its ``type`` one of KINDS) on ``reply``."""
    if spec["type"] == "tool-call":
        return tool_call(spec, reply, tools or [], fmt)
    return _TEXT_CHECKERS[spec["type"]](spec, reply)


# -- what a checker spec must hold (the task file's check, run/taskfile.py) ----------------
def spec_problem(spec: dict, tools: list[dict] | None) -> str | None:
    """Why a checker spec (already of the right shape) cannot judge: a regex that does not
    compile, a schema that is not valid JSON Schema, a tool call of a function the task does not
    define, or one whose parameters are no valid schema. None: it can."""
    import jsonschema

    kind = spec["type"]
    if kind == "regex":
        try:
            re.compile(spec["pattern"])
        except re.error as exc:
            return f"checker regex: the pattern {spec['pattern']!r} does not compile ({exc})"
    schemas: list[tuple[str, Any]] = []
    if kind == "json-schema":
        schemas.append(("checker json-schema: the schema", spec["schema"]))
    if kind == "choice" and str(spec["answer"]).casefold() not in {str(o).casefold() for o in spec["options"]}:
        return f"checker choice: the answer {spec['answer']!r} is not one of the options"
    for tool in tools or ():
        schemas.append((f"tool {tool['function']['name']!r}: its parameters", tool["function"].get("parameters") or {}))
    if kind == "tool-call" and tool_of(tools or [], spec["name"]) is None:
        return f"checker tool-call: the function {spec['name']!r} is not among the task's tools"
    for what, schema in schemas:
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            return f"{what} is not valid JSON Schema ({'at ' + where + ': ' if where else ''}{exc.message})"
        problem = ref_problem(schema)
        if problem:
            return f"{what}: {problem}"
    return None


def ref_problem(schema: Any) -> str | None:
    """Why a schema's references cannot all be resolved inside it, or None: a reference to a URL
    or a file (macprof fetches and opens nothing a task names: the validator's registry is empty),
    or one that points nowhere in the schema. Every ``$ref`` and ``$dynamicRef`` where the draft
    reads a subschema (not inside an ``enum`` or ``const``: data), resolved against its ``$id``
    base as the validator would; the walk is iterative."""
    from urllib.parse import urljoin, urlsplit

    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    root = DRAFT202012.create_resource(schema)
    registry = Registry().with_resource(root.id() or "", root).crawl()
    stack = [(root, "")]
    while stack:
        resource, base = stack.pop()
        if resource.id():
            base = urljoin(base, resource.id())
        contents = resource.contents
        for key in ("$ref", "$dynamicRef"):
            ref = contents.get(key) if isinstance(contents, dict) else None
            if not isinstance(ref, str):
                continue
            try:
                registry.resolver(base_uri=base).lookup(ref)
            except Unresolvable:
                scheme = urlsplit(urljoin(base, ref)).scheme
                if not scheme:
                    return f"{key} {ref!r} points to nothing in the schema"
                where = "a file" if scheme == "file" else f"a remote document ({scheme})"
                return (f"{key} {ref!r} names {where}: references are resolved only inside the schema; macprof "
                        f"opens and fetches nothing a task names")
        stack.extend((sub, base) for sub in resource.subresources())
    return None
