"""The chat-template sandbox's caps (run/sandbox.py, issue #37 row 4): every way a template can
build a large value from small ones is sized before it runs and refused past MAX_CHARS, with a
reason; what real templates do renders as before (llama.cpp's 70 templates rendered the same
through jinja2's plain sandbox and this one when it was written)."""

from __future__ import annotations

import time

import pytest

from macprof.errors import MacprofError, reason
from macprof.run import chat, sandbox

OVER = sandbox.MAX_CHARS + 1
MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]

# (probe, what the refusal says): each just past a cap, so that a sandbox without it renders it
# cheaply (16 MiB) instead of refusing; 'x' * 2**33 allocated 8 GiB
PROBES = [
    (f"{{{{ 'x' * {OVER} }}}}", f"a value of 1 characters or items repeated {OVER:,} times"),
    (f"{{{{ ['x'] * {OVER} }}}}", "repeated"),
    (f"{{% set a = 'x' * {OVER // 2 + 1} %}}{{{{ a + a }}}}", "joined"),
    ("{{ 2 ** 70000 }}", "an integer power of about 70,001 bits"),
    ("{{ (2 ** 40000) * (2 ** 40000) }}", "an integer product"),
    (f"{{{{ 'x'.center({OVER}) }}}}", f"an argument of center of {OVER:,}"),
    (f"{{{{ 'x'.ljust({OVER}) }}}}", "an argument of ljust"),
    (f"{{{{ 'x'|center({OVER}) }}}}", "the center filter's width"),
    ("{% set a = 'x' * 1000000 %}{{ ([a] * 17)|join }}", "a join of about 17,000,000"),
    ("{% set a = 'x' * 1000000 %}{{ ''.join([a] * 17) }}", "a join of about 17,000,000"),
    ("{% set a = 'x' * 5000 %}{{ a|replace('', a) }}", "a replace of about 25,010,000"),
    ("{% set a = 'x' * 5000 %}{{ a.replace('', a) }}", "a replace"),
    ("{% set a = '\n' * 100000 %}{{ a|indent(200) }}", "an indent"),
    ("{% set a = 'x' * 100000 %}{{ a|wordwrap(1, wrapstring='y' * 200) }}", "a wordwrap"),
    ("{% set a = ['x'] * 1000000 %}{{ ([a] * 17)|sum(start=[]) }}", "a sum"),
    ("{{ range(3)|slice(1000000)|list }}", "slices"),
    ("{{ ('\t' * 100000).expandtabs(200) }}", "an expandtabs"),
    (f"{{{{ '{{:>{OVER}}}'.format(1) }}}}", f"a format width of {OVER}"),
    ("{{ '{:{w}}'.format(1, w=5) }}", "a format spec given by a nested field"),
    (f"{{{{ '%0{OVER}d' % 1 }}}}", f"a format width of {OVER}"),
    (f"{{{{ '%*d' % ({OVER}, 1) }}}}", "a format width"),
    (f"{{{{ '%0{OVER}d'|format(1) }}}}", "a format width"),
    ("{{ messages|tojson(indent=100) }}", "a tojson indent of 100: the sandbox allows at most 64"),
    ("{% set a = 'x' * 1000000 %}{{ [a] * 17 }}", "an output of more than"),
    ("{% set a = 'x' * 1000000 %}{% for i in range(17) %}{{ a }}{% endfor %}", "a rendered text of more than"),
    (f"{{% for i in range({OVER}) %}}{{% endfor %}}", "an argument of safe_range"),
]


@pytest.mark.parametrize("probe, says", PROBES, ids=[f"probe{i}" for i in range(len(PROBES))])
def test_a_template_that_builds_too_much_is_refused_with_its_reason(probe, says):
    t0 = time.monotonic()
    with pytest.raises(MacprofError) as err:
        chat.Template("test", probe).render(MSGS)
    line = str(err.value)
    assert line.startswith(f"the chat template (test) failed to render {len(MSGS)} messages: SecurityError: ") \
        and says in line, line
    assert "\n" not in line and time.monotonic() - t0 < 10
    # a --chat-template file goes through the same sandbox (one template path: run/chat.py)
    with pytest.raises(MacprofError, match="SecurityError"):
        chat.Template("file", probe, "t.jinja").render(MSGS)


def test_what_templates_do_renders_as_before():
    text = ("{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}\n{% endfor %}{{ '%5d|%-3s|' % (3, 'a') }}"
            "{{ 'a'.center(5) }}{{ [1, 2]|join(',') }}{{ 2 ** 10 }}{{ 'ab' * 3 }}{{ [[1], [2]]|sum(start=[]) }}"
            "{{ '{:>4}'.format(7) }}{{ messages|map(attribute='role')|join('/') }}{{ range(10)|slice(3)|list|length }}"
            "{{ messages[0]|tojson(indent=2)|length > 0 }}{{ 'x\ty'.expandtabs(2) }}{{ 'a-b'.replace('-', '+') }}")
    out = chat.Template("test", text).render(MSGS)
    assert out == ("SYSTEM: Be brief.\nUSER: 2+2?\n    3|a  |  a  1,21024ababab[1, 2]   7system/user3Truex y"
                   "a+b")


def test_a_refusal_always_says_why():
    """"did not render: " followed by nothing was the bug: an exception with no message (a
    MemoryError, raise_exception('')) is named by its type."""
    with pytest.raises(MacprofError, match=r"failed to render \d+ messages: TemplateError$"):
        chat.Template("test", "{{ raise_exception('') }}").render(MSGS)
    assert reason(MemoryError()) == "MemoryError"
    assert reason(ValueError("two\nlines")) == "ValueError: two lines"
