"""The tasks phase's checkers on hand-written replies (right, wrong, near-miss, malformed JSON, a
tool call with a wrong argument type), and the task file's line-by-line refusals."""

import json

import pytest

from macprof.errors import MacprofError
from macprof.run import checkers as c
from macprof.run import taskfile

WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city", "parameters": {
    "type": "object", "required": ["city", "days"], "additionalProperties": False,
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


def test_exact():
    spec = {"type": "exact", "answer": "Paris"}
    assert c.check(spec, "  Paris\n").correct
    near = c.check(spec, "Paris.")
    assert not near.correct and "Paris." in near.message
    assert not c.check(spec, "paris").correct
    assert c.check({**spec, "ignore_case": True}, "paris").correct
    assert c.check(spec, "").message == "the reply is empty"


def test_regex():
    spec = {"type": "regex", "pattern": r"^\d{4}-\d{2}-\d{2}$", "full": True}
    assert c.check(spec, "2024-03-05\n").correct
    assert not c.check(spec, "2024-3-5").correct
    assert not c.check(spec, "The date is 2024-03-05").correct
    assert c.check({"type": "regex", "pattern": r"\d{4}-\d{2}-\d{2}"}, "The date is 2024-03-05").correct


def test_number():
    spec = {"type": "number", "answer": 42}
    assert c.check(spec, "42").correct
    assert c.check(spec, "The answer is 42.").correct
    assert c.check(spec, "17 + 25 = 42").correct  # the final number is the answer
    assert not c.check(spec, "17 + 25 = 32").correct
    near = c.check(spec, "41")
    assert not near.correct and near.message == "41 is not the right number" and "42" not in near.message
    assert not c.check(spec, "42.5").correct
    assert c.check({**spec, "tolerance": 0.5}, "42.5").correct
    assert c.check({"type": "number", "answer": 1234.5}, "1,234.5").correct
    assert c.check({"type": "number", "answer": -7}, "-7").correct
    assert c.check(spec, "forty-two").message.startswith("no number in the reply")


def test_a_reply_naming_two_options_chose_neither():
    """"Yes/No" named both options: the slash joins alternatives, it does not end a choice as a
    comma or a full stop does."""
    assert c.chosen_option(["Yes", "No"], "Yes/No") is None
    assert c.chosen_option(["Yes", "No"], "**yes/no**") is None
    assert c.chosen_option(["A", "B", "C"], "B|C") is None
    assert c.chosen_option(["A", "B", "C"], "B/ C, I think") is None
    assert not c.check({"type": "choice", "options": ["Yes", "No"], "answer": "Yes"}, "Yes/No").correct
    assert c.chosen_option(["Yes", "No"], "Yes/maybe") == "Yes"  # one option named: still chosen
    assert c.chosen_option(["Yes", "No"], "Yes, not no") == "Yes"


def test_choice():
    spec = {"type": "choice", "options": ["A", "B", "C", "D"], "answer": "B"}
    for reply in ("B", "b", "B) Paris", "**B**", "(B)", "B. because"):
        assert c.check(spec, reply).correct, reply
    assert c.check(spec, "C").message == "C is not the right option"
    # a sentence that starts with the article "A" chose nothing
    assert not c.check(spec, "A good answer is B").correct
    assert c.chosen_option(["A", "B"], "A good answer") is None
    assert c.check(spec, "I think so").message.startswith("the reply does not start with one of the options")
    assert c.check({"type": "choice", "options": ["yes", "no"], "answer": "no"}, "No, it is not.").correct


def test_json_schema():
    spec = {"type": "json-schema", "schema": {"type": "object", "required": ["name", "age"],
                                             "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}
    assert c.check(spec, '{"name": "Ann", "age": 31}').correct
    assert c.check(spec, '```json\n{"name": "Ann", "age": 31}\n```').correct
    wrong = c.check(spec, '{"name": "Ann", "age": "31"}')
    assert not wrong.correct and "age" in wrong.message and "schema" in wrong.message
    bad = c.check(spec, '{"name": "Ann", "age": 31')
    assert not bad.correct and bad.message.startswith("the reply is not valid JSON")
    assert not c.check(spec, '{"name": "Ann"}').correct


@pytest.mark.parametrize("fmt, reply", [
    ("json", '{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}'),
    ("json", '```json\n{"name": "get_weather", "parameters": {"city": "Oslo", "days": 2}}\n```'),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>'),
    ("hermes", '<tool_call>\n[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]'),  # cut at EOS
    ("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}]'),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo", "days": 2}}'),
    ("json", '{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\", \\"days\\": 2}"}'),
])
def test_a_right_tool_call_in_each_format(fmt, reply):
    v = c.check({"type": "tool-call", "name": "get_weather", "arguments": {"city": "Oslo"}}, reply, WEATHER, fmt)
    assert v.correct and v.tool == c.ToolValidity(True, True, True), v.message


def test_tool_calls_that_fail_say_at_which_step():
    spec = {"type": "tool-call", "name": "get_weather"}
    wrong_type = c.check(spec, '{"name": "get_weather", "arguments": {"city": "Oslo", "days": "2"}}', WEATHER)
    assert wrong_type.tool == c.ToolValidity(True, True, False) and "days" in wrong_type.message
    other = c.check(spec, '{"name": "get_time", "arguments": {}}', WEATHER)
    assert other.tool == c.ToolValidity(True, False, False) and "not the function" in other.message
    unknown = c.check(spec, '{"name": "launch", "arguments": {}}', WEATHER)
    assert "no such function" in unknown.message
    broken = c.check(spec, '{"name": "get_weather", "arguments": {"city": "Oslo"', WEATHER)
    assert broken.tool == c.ToolValidity(False, False, False) and "not valid JSON" in broken.message
    assert c.check(spec, "It is sunny in Oslo.", WEATHER, "hermes").message == "no <tool_call> in the reply"
    value = c.check({**spec, "arguments": {"city": "Bergen"}},
                    '{"name": "get_weather", "arguments": {"city": "Oslo", "days": 1}}', WEATHER)
    assert not value.correct and value.tool == c.ToolValidity(True, True, True)


def test_spec_problems():
    assert "does not compile" in c.spec_problem({"type": "regex", "pattern": "(unclosed"}, None)
    assert "not valid JSON Schema" in c.spec_problem({"type": "json-schema", "schema": {"type": "objekt"}}, None)
    assert "not among the task's tools" in c.spec_problem({"type": "tool-call", "name": "nope"}, WEATHER)
    assert c.spec_problem({"type": "choice", "options": ["A", "B"], "answer": "C"}, None)
    assert c.spec_problem({"type": "number", "answer": 1}, None) is None


def _line(**kw):
    task = {"id": "t", "prompt": "2+2?", "checker": {"type": "number", "answer": 4}, "max_tokens": 8}
    task.update(kw)
    return json.dumps({k: v for k, v in task.items() if v is not None})


def test_a_malformed_task_file_is_refused_line_by_line():
    lines = [
        _line(id="good"),
        "{not json",
        _line(id="both", messages=[{"role": "user", "content": "x"}]),
        _line(id="neither", prompt=None),
        _line(id="re", checker={"type": "regex", "pattern": "(["}),
        _line(id="schema", checker={"type": "json-schema", "schema": {"type": 5}}),
        _line(id="tok", max_tokens=0),
        _line(id="kind", checker={"type": "fuzzy"}),
        _line(id="extra", checker={"type": "number", "answer": 4, "tol": 1}),
        _line(id="tool", checker={"type": "tool-call", "name": "get_weather"}),
        _line(id="good"),
        "",
        "# a comment",
        _line(id="good2"),
    ]
    tf = taskfile.parse("\n".join(lines).encode(), "my.jsonl")
    assert [t.id for t in tf.tasks] == ["good", "good2"]
    by_line = {line: why for line, _, why in tf.refused}
    assert sorted(by_line) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert all(why.startswith(f"my.jsonl:{n}: ") and "\n" not in why for n, why in by_line.items())
    assert "not JSON" in by_line[2]
    assert "either 'prompt' or 'messages'" in by_line[3] and "either" in by_line[4]
    assert "does not compile" in by_line[5]
    assert "not valid JSON Schema" in by_line[6]
    assert "max_tokens" in by_line[7]
    assert "fuzzy" in by_line[8]
    assert "unknown key(s) tol" in by_line[9]
    assert "defines no tools" in by_line[10]
    assert "already line 1's" in by_line[11]
    assert len(tf.sha256) == 64


def test_a_file_with_no_task_or_unreadable_is_one_line(tmp_path):
    with pytest.raises(MacprofError, match=r"bad.jsonl: no task to run .*bad.jsonl:1: not JSON"):
        taskfile.parse(b"{oops\n", "bad.jsonl")
    with pytest.raises(MacprofError, match="not UTF-8"):
        taskfile.parse(b"\xff\xfe", "bad.jsonl")
    with pytest.raises(MacprofError, match="cannot read the task file"):
        taskfile.load(str(tmp_path / "missing.jsonl"))


def test_the_default_set_is_whole_and_deterministic():
    tf = taskfile.load(None)
    assert not tf.refused and len(tf.tasks) >= 24
    kinds = {t.checker["type"] for t in tf.tasks}
    assert kinds == set(c.KINDS)
    assert {t.category for t in tf.tasks} >= {"arithmetic", "extraction", "format", "tool-call"}
    assert taskfile.load(None).sha256 == tf.sha256


# -- issue #37: nothing a task names is fetched or opened; NaN is no JSON; nesting refused per line
@pytest.fixture
def counting_server():
    """A loopback HTTP server serving a schema and counting the requests it gets."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    server.server_close()


def _remote_and_file_refs(tmp_path, base):
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "SECRET-7f3a"}')
    return [f"{base}/x.json", f"{base}/x.json#/type", secret.as_uri(), f"{secret.as_uri()}#/const"]


def test_a_schema_reference_is_never_fetched_nor_opened(tmp_path, counting_server):
    """Row 1: the json-schema checker and the tool-call arguments' check validate through an
    empty registry: a remote or file $ref cannot be judged (the phase records it as the checker's
    failure); nothing reaches the server, the file's content is in no message."""
    base, hits = counting_server
    refs = _remote_and_file_refs(tmp_path, base)
    for ref in refs:
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
        with pytest.raises(c.Unjudgeable, match="does not resolve inside it") as err:
            c.check({"type": "json-schema", "schema": schema}, '{"a": 1}')
        assert "SECRET" not in str(err.value)
        tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
        with pytest.raises(c.Unjudgeable):
            c.check({"type": "tool-call", "name": "f"}, '{"name": "f", "arguments": {"a": 1}}', tools, "json")
    assert hits == []  # 8 references, none fetched
    # a reference inside the schema still resolves
    inside = {"$defs": {"n": {"type": "number"}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}}
    assert c.check({"type": "json-schema", "schema": inside}, '{"a": 1}').correct
    assert "not of type 'number'" in c.check({"type": "json-schema", "schema": inside}, '{"a": "x"}').message


def test_remote_and_file_references_are_refused_when_the_task_file_loads(tmp_path, counting_server):
    """Row 1 at load: each line whose schema (the checker's or a tool's parameters) names a URL,
    a file or nothing in the schema is refused, naming the file, the line and the reference;
    the other lines run; nothing is fetched."""
    base, hits = counting_server
    refs = [*_remote_and_file_refs(tmp_path, base), "#/$defs/missing", "other.json"]
    lines = [_line(id="good")]
    for i, ref in enumerate(refs):
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}}
        if i % 2:
            tool = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
            lines.append(_line(id=f"r{i}", checker={"type": "tool-call", "name": "f"}, tools=tool))
        else:
            lines.append(_line(id=f"r{i}", checker={"type": "json-schema", "schema": schema}))
    embedded = {"$defs": {"x": {"$id": "http://example.com/x.json", "type": "string"}},
                "properties": {"a": {"$ref": "http://example.com/x.json"}}}  # an $id inside it: resolved there
    lines.append(_line(id="embedded", checker={"type": "json-schema", "schema": embedded}))
    lines.append(_line(id="data", checker={"type": "json-schema", "schema": {"enum": [{"$ref": base}]}}))  # data
    tf = taskfile.parse("\n".join(lines).encode(), "t.jsonl")
    assert [t.id for t in tf.tasks] == ["good", "embedded", "data"]
    assert len(tf.refused) == len(refs) == 6
    for (line, task, why), ref in zip(tf.refused, refs):
        assert why.startswith(f"t.jsonl:{line}: task '{task}': ") and f"$ref {ref!r}" in why and "\n" not in why
        assert ("names a file" if ref.startswith("file:") else "names a remote document (http)"
                if ref.startswith("http") else "points to nothing in the schema") in why
    assert hits == []


def test_nan_and_infinity_are_not_json():
    """Row 15: "NaN" passed {"type": "number", "maximum": 1}; Python's json reads it, JSON has no NaN."""
    spec = {"type": "json-schema", "schema": {"type": "number", "maximum": 1}}
    for word in ("NaN", "Infinity", "-Infinity", '{"a": NaN}'):
        verdict = c.check(spec, word)
        assert not verdict.correct and "is not JSON" in verdict.message
    assert c.check(spec, "0.5").correct
    call = c.check({"type": "tool-call", "name": "get_weather"},
                   '{"name": "get_weather", "arguments": {"city": "Oslo", "days": NaN}}', WEATHER, "json")
    assert not call.correct and not call.tool.parses and "NaN is not JSON" in call.message
    tf = taskfile.parse(("\n".join([_line(id="good"), _line(id="nan").replace("4}", "NaN}")])).encode(), "t.jsonl")
    assert [t.id for t in tf.tasks] == ["good"] and tf.refused[0][2] == "t.jsonl:2: not JSON (NaN is not JSON)"


def test_a_line_nested_deep_is_refused_alone():
    """Row 11: a line nested 100,000 deep (past the parser) and a schema 3,000 deep (past
    jsonschema's recursion) once stopped the run with "internal error: RecursionError"."""
    deep_line = '{"id": "deep", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    deep_schema = ('{"id": "schema", "prompt": "x", "max_tokens": 4, "checker": {"type": "json-schema", "schema": '
                   + '{"items": ' * 3000 + "{}" + "}" * 3000 + "}}")
    medium = json.loads(_line(id="medium"))
    medium["checker"] = {"type": "json-schema", "schema": json.loads('{"items": ' * 200 + "{}" + "}" * 200)}
    tf = taskfile.parse("\n".join([_line(id="good"), deep_line, deep_schema, json.dumps(medium)]).encode(), "t.jsonl")
    assert [t.id for t in tf.tasks] == ["good"]
    by_line = {line: why for line, _, why in tf.refused}
    assert by_line[2] == "t.jsonl:2: nested more than 64 deep" and by_line[3] == "t.jsonl:3: nested more than 64 deep"
    assert by_line[4].startswith("t.jsonl:4: task 'medium': /checker/schema/items") and "nested more than 64 deep" in by_line[4]
