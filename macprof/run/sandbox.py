"""The jinja2 sandbox chat templates render in (run/chat.py), with what it builds capped in size.

jinja2's ImmutableSandboxedEnvironment stops a template from reaching Python's internals, not
from asking for memory: ``'x' * 2**33`` allocated 8 GiB in one expression. Here every operation
that can build a large value from small ones is sized before it runs, and refused past
MAX_CHARS characters (or items) with a SecurityError that says what was asked:

- the binary operators ``*``, ``+``, ``**`` and ``%`` (jinja2's ``intercepted_binops``);
- calls of string methods (``center``, ``ljust``, ``replace``, ``join``, ``expandtabs``...) and
  of every filter: an integer argument past MAX_CHARS (a width, a count) is refused, and the
  filters and methods whose result is a product of their inputs' sizes (``join``, ``replace``,
  ``indent``, ``wordwrap``, ``sum``, ``slice``, printf-style ``format`` and ``%``, ``str.format``
  widths, ``tojson``'s indent) are sized first;
- an expression's output (a list holding one long string 100,000 times prints as much), and
  the rendered text as a whole, which is read chunk by chunk (``render``);
- ranges: jinja2's own cap (``MAX_RANGE``, 100,000 items).

What no cap here bounds is time: a template that loops for ever (nested ranges) renders inside
the request's deadline (``--timeout``: the worker announces the item before rendering it, and
the parent kills a worker past it), and memory a template builds slowly, a value at a time, grows
only as long as that deadline lets it.
"""

from __future__ import annotations

import inspect
import re
import string
from typing import Any, Callable

MAX_CHARS = 16 << 20  # a rendered prompt, or any string or list a template builds (a 128k-token prompt is ~0.5 M)
MAX_INT_BITS = 1 << 16  # an integer a template computes (2**65536 is 19,729 digits)
MAX_JSON_INDENT = 64

_PRINTF = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def _refuse(what: str, limit: str = f"at most {MAX_CHARS:,} characters or items in a value") -> None:
    from jinja2.exceptions import SecurityError

    raise SecurityError(f"{what}: the sandbox allows {limit}")


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def text_size(value: Any, budget: int = MAX_CHARS) -> int:
    """About how many characters ``str(value)`` has, counted until past ``budget`` (then any
    number above it): a list that holds the same long string many times counts each time."""
    total = 0
    stack = [value]
    while stack and total <= budget:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            total += 4 * len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(v)
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            total += v.bit_length() // 3 + 1
        else:
            total += 16
    return total


def _int_bits(a: int, b: int, op: str) -> int:
    if op == "*":
        return a.bit_length() + b.bit_length()
    return (abs(a).bit_length() - 1) * b + 1  # "**", b > 0: 2**b has b + 1 bits


def check_binop(op: str, a: Any, b: Any) -> None:
    """Refuse ``a op b`` where its result would pass the caps, before it is computed."""
    ints = isinstance(a, int) and isinstance(b, int)
    la, lb = _length(a), _length(b)
    if op == "*":
        for size, n in ((la, b), (lb, a)):
            if size is not None and isinstance(n, int) and n > 0 and size * n > MAX_CHARS:
                _refuse(f"a value of {size:,} characters or items repeated {n:,} times")
        if ints and _int_bits(a, b, op) > MAX_INT_BITS:
            _refuse(f"an integer product of about {_int_bits(a, b, op):,} bits", f"at most {MAX_INT_BITS:,} bits")
    elif op == "+":
        if la is not None and lb is not None and la + lb > MAX_CHARS:
            _refuse(f"values of {la:,} and {lb:,} joined")
    elif op == "**":
        if ints and b > 0 and abs(a) > 1 and _int_bits(a, b, op) > MAX_INT_BITS:
            _refuse(f"an integer power of about {_int_bits(a, b, op):,} bits", f"at most {MAX_INT_BITS:,} bits")
    elif op == "%" and isinstance(a, str):
        check_printf(a, b)


def check_printf(fmt: str, args: Any) -> None:
    """printf-style ``fmt % args``: a width or precision past MAX_CHARS, written or given by ``*``."""
    given = args if isinstance(args, tuple) else (args,)
    for m in _PRINTF.finditer(fmt):
        for part in m.groups():
            if part and part != "*" and int(part) > MAX_CHARS:
                _refuse(f"a format width of {part}")
    if "*" in fmt:
        _check_ints(given, "a format width")


def check_format(fmt: str) -> None:
    """``str.format``: a width in a replacement field's spec past MAX_CHARS, or a nested one."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises the same, with its own words
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            _refuse("a format spec given by a nested field", "only widths written in the spec")
        for digits in _DIGITS.findall(spec or ""):
            if int(digits) > MAX_CHARS:
                _refuse(f"a format width of {digits}")


def _check_ints(values, what: str) -> None:
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v > MAX_CHARS:
            _refuse(f"{what} of {v:,}")


def _joined(items: list, sep: Any) -> int:
    return sum(text_size(x, MAX_CHARS) for x in items) + len(str(sep)) * max(0, len(items) - 1)


def _replaced(s: str, old: str, new: str, count: int | None) -> int:
    n = len(s) + 1 if old == "" else s.count(old)
    if count is not None and count >= 0:
        n = min(n, count)
    return len(s) + n * (len(new) - len(old))


def _sized(name: str, args: dict) -> tuple[int, str] | None:
    """(the result's size, what it is) of a filter or string method that multiplies its
    inputs' sizes, from its arguments by their jinja2 names; None for the others."""
    if name == "join":
        return _joined(args["value"], args.get("d", "")), "a join"
    if name == "replace":
        return _replaced(str(args["s"]), str(args["old"]), str(args["new"]), args.get("count")), "a replace"
    if name == "indent":
        width = args.get("width", 4)
        w = len(width) if isinstance(width, str) else int(width)
        return len(str(args["s"])) + (str(args["s"]).count("\n") + 1) * max(w, 0), "an indent"
    if name == "wordwrap":
        width = max(int(args.get("width", 79)), 1)
        wrap = args.get("wrapstring") or "\n"
        return len(str(args["s"])) + (len(str(args["s"])) // width + 1) * len(str(wrap)), "a wordwrap"
    if name == "sum" and isinstance(args.get("start"), (str, list, tuple)):
        return _joined(args["iterable"], ""), "a sum"
    if name == "slice":
        return 64 * int(args.get("slices", 0)), "slices (lists) in bytes"
    if name == "expandtabs":
        return len(args["s"]) + args["s"].count("\t") * int(args.get("tabsize", 8)), "an expandtabs"
    if name == "tojson":
        indent = args.get("indent")
        w = len(indent) if isinstance(indent, str) else int(indent or 0)
        if w > MAX_JSON_INDENT:
            _refuse(f"a tojson indent of {w:,}", f"at most {MAX_JSON_INDENT}")
        return text_size(args["value"]) * (1 + w), "a tojson"
    return None


def _check_sized(name: str, args: dict) -> None:
    sized = _sized(name, args)
    if sized and sized[0] > MAX_CHARS:
        _refuse(f"{sized[1]} of about {sized[0]:,}")


def _guarded(name: str, func: Callable) -> Callable:
    """A filter that checks its arguments (bound by name) before it runs: integer arguments after
    the value within MAX_CHARS, a multiplying filter's result sized (``_sized``); ``join`` and
    ``sum`` get their iterable as the list that was sized."""
    import functools

    real = inspect.unwrap(func)
    sig = inspect.signature(real)
    # jinja2's sync/async filters (slice, join, sum...) wrap the sync one and take one argument
    # more, their eval context, that the sync one does not: bound past it
    extra = int(getattr(func, "jinja_pass_arg", None) is not None and getattr(real, "jinja_pass_arg", None) is None)
    params = [p for p in sig.parameters if p not in ("eval_ctx", "environment", "context")]
    value_name = params[0] if params else None

    @functools.wraps(func)  # keeps jinja_pass_arg: the filter gets its context as before
    def run(*args, **kwargs):
        bound = sig.bind(*args[extra:], **kwargs)
        given = bound.arguments
        for key, v in given.items():
            if key in ("args", "kwargs"):  # format's: printf-style arguments
                values = tuple(v.values()) if isinstance(v, dict) else tuple(v)
                if name == "format":
                    check_printf(str(given.get(value_name or "value", "")), values)
                else:
                    _check_ints(values, f"the {name} filter's argument")
            elif key != value_name:
                _check_ints([v], f"the {name} filter's {key}")
        if name in ("join", "sum") and value_name and not isinstance(given[value_name], str):
            given[value_name] = list(given[value_name])  # sized, then joined: an iterator is read once
        _check_sized(name, dict(given))
        return func(*args[:extra], *bound.args, **bound.kwargs)

    return run


def environment(**options):
    """An ImmutableSandboxedEnvironment with the caps above; ``options`` as jinja2 takes them."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Capped(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "+", "**", "%"])

        def call_binop(self, context, operator, left, right):
            check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's own signature
            owner, name = getattr(__obj, "__self__", None), getattr(__obj, "__name__", "")
            _check_ints([*args, *kwargs.values()], f"an argument of {name or 'a call'}")
            if isinstance(owner, str) and name == "join" and args:
                args = (list(args[0]), *args[1:])  # sized, then joined: an iterator is read once
                _check_sized(name, {"value": args[0], "d": owner})
            elif isinstance(owner, str) and name == "replace" and len(args) >= 2:
                _check_sized(name, {"s": owner, "old": args[0], "new": args[1],
                                    "count": args[2] if len(args) > 2 else kwargs.get("count")})
            elif isinstance(owner, str) and name == "expandtabs":
                _check_sized(name, {"s": owner, "tabsize": args[0] if args else kwargs.get("tabsize", 8)})
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value):
            wrapped = super().wrap_str_format(value)
            if wrapped is None:
                return None
            fmt = value.__self__

            def checked(*args, **kwargs):
                check_format(fmt)
                return wrapped(*args, **kwargs)

            return checked

    def finalize(value):
        if not isinstance(value, str) and text_size(value) > MAX_CHARS:
            _refuse(f"an output of more than {MAX_CHARS:,} characters")
        return value

    env = Capped(finalize=finalize, **options)
    for name, func in list(env.filters.items()):
        env.filters[name] = _guarded(name, func)
    return env


def guard_filter(name: str, func: Callable) -> Callable:
    """A filter of the caller's own (``tojson``), checked as jinja2's are."""
    return _guarded(name, func)


def render(template, **context) -> str:
    """``template`` (compiled in ``environment()``) rendered chunk by chunk, refused once the text
    passes MAX_CHARS: a loop of short outputs never holds more than that."""
    parts: list[str] = []
    total = 0
    for chunk in template.generate(**context):
        total += len(chunk)
        if total > MAX_CHARS:
            _refuse(f"a rendered text of more than {MAX_CHARS:,} characters")
        parts.append(chunk)
    return "".join(parts)
