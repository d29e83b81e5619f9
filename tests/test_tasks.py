"""The tasks phase: its orchestration on the fake engine (every attempt journaled, retries
counted, bad lines and over-long tasks refused one line each, the figures recomputed from the
recorded replies), the chat rendering, and on the demo models with both real engines (slow:
random weights, so every answer is wrong, and the machinery exact)."""

import json

import pytest

from macprof.analyse import tasks as at
from macprof.run import chat, checkers, taskfile
from macprof.store import runlog
from tests.test_published_model import smollm2  # noqa: F401,F811 - the fixture: the GGUF the test extra ships
from tests.test_run import macprof

CHATML = chat.Template("model", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
HERMES = chat.Template("model", "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools>"
                                "Call as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>{% endif %}"
                                "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")


def test_prompts_through_a_template_or_the_fallback_form():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    fallback = chat.Template("fallback", chat.FALLBACK)  # the conversation phase's: one form for both (#39)
    assert fallback.render(msgs) == "system:\nBe brief.\n\nuser:\n2+2?\n\nassistant:\n"
    assert CHATML.render(msgs) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                                   "<|im_start|>assistant\n")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    plain = fallback.render(msgs, tools)  # no template: macprof's tool turn joins the task's system turn
    assert fallback.tool_format == "json" and plain.startswith("system:\nBe brief.\n\nYou can call these functions")
    native = HERMES.render(msgs, tools)  # a template that takes tools gets them, in its own format
    assert HERMES.tool_format == "hermes" and native.startswith('<tools>{"type": "function"')
    assert CHATML.tool_format == "json" and fallback.described.startswith("no chat template")


def _run(tmp_path, fake_dir, *args):
    log = tmp_path / "t.json"
    proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks",
                   "--log", str(log), *args, check=False)
    return proc, log


def _recomputed(ph, tools_of):
    """Each attempt's verdict again from its recorded text, and the phase's accuracy from those."""
    for r in ph.results:
        for a in r.attempts:
            assert len(a.tokens) == len(a.token_times) >= 1
            assert (a.stop == "eos") == (a.tokens[-1] == 1) and len(a.tokens) <= 64  # the fake's EOS is id 1
            spec, tools = tools_of[r.task]
            v = checkers.check(spec, a.text, tools, ph.tool_format or "json")
            assert (v.correct, v.message) == (a.correct, a.message)
    solved = sum(1 for r in ph.results if any(a.correct for a in r.attempts))
    assert ph.summary.within.k == solved


def test_the_phase_on_the_fake_engine(fake_dir, tmp_path):
    bad = tmp_path / "tasks.jsonl"
    lines = [json.dumps({"id": "add", "prompt": "What is 2 + 2? Answer with the number only.",
                         "checker": {"type": "number", "answer": 4}, "max_tokens": 8}),
             '{"id": "broken", "prompt": ',
             json.dumps({"id": "re", "prompt": "x", "checker": {"type": "regex", "pattern": "(["}, "max_tokens": 4}),
             json.dumps({"id": "long", "prompt": "word " * 3000, "checker": {"type": "exact", "answer": "x"},
                         "max_tokens": 8}),
             json.dumps({"id": "json", "prompt": "Reply with {}", "checker": {"type": "json-schema", "schema": {}},
                         "max_tokens": 6})]
    bad.write_text("\n".join(lines) + "\n")
    proc, log = _run(tmp_path, fake_dir, "--tasks", str(bad), "--attempts", "3")
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    reasons = [r.reason for r in ph.refusals]
    assert len(reasons) == 3 and all("\n" not in r for r in reasons)
    assert reasons[0].startswith(f"{bad}:2: not JSON") and reasons[1].startswith(f"{bad}:3: task 're': checker regex")
    assert "exceed the phase's context of 2048 tokens" in reasons[2] and "'long'" in reasons[2]
    assert [r.task for r in ph.results] == ["add", "json"]  # the other tasks ran
    assert ph.task_set.tasks == 3 and ph.task_set.refused == 2 and len(ph.task_set.sha256) == 64
    for r in ph.results:  # the fake's replies are noise: wrong, so retried to the limit, each retry counted
        assert r.solved_at is None and [a.attempt for a in r.attempts] == [1, 2, 3]
    assert ph.summary.attempts_run == 6 and ph.summary.first.k == 0 and ph.summary.within.n == 2
    assert ph.summary.tokens_generated == sum(len(a.tokens) for r in ph.results for a in r.attempts)
    assert ph.summary.time_per_correct_s is None and ph.summary.energy_reason
    tf = taskfile.load(str(bad))
    _recomputed(ph, {t.id: (t.checker, list(t.tools)) for t in tf.tasks})
    # a retry's prompt holds the first reply and the checker's message as the next user turn
    journal = [json.loads(x) for x in log.with_name("t.journal.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "task_attempt" for e in journal) == 6


def test_the_default_set_on_the_fake_engine_and_its_figures(fake_dir, tmp_path):
    proc, log = _run(tmp_path, fake_dir)
    assert proc.returncode == 0, proc.stderr
    run = runlog.load(log)
    ph = run.models[0].phases.tasks
    tf = taskfile.load(None)
    assert ph.task_set.source == "macprof/data/tasks.jsonl" and ph.task_set.sha256 == tf.sha256
    assert len(ph.results) == len(tf.tasks) and not ph.refusals
    assert ph.prompt_format.startswith("no chat template") and "EOS" in ph.generation
    assert all(len(r.attempts) == 1 for r in ph.results)
    _recomputed(ph, {t.id: (t.checker, list(t.tools)) for t in tf.tasks})
    assert ph.summary.tool_calls.attempts == sum(t.checker["type"] == "tool-call" for t in tf.tasks)
    figures = at.tasks_figures(run.models[0])
    assert figures["has_tasks"] and figures["tasks_n"] == len(tf.tasks)
    show = macprof("show", str(log))
    assert "Tasks (right answers)" in show.stdout and "accuracy first attempt 0/36" in show.stdout
    assert "**Tasks (right answers)**" in macprof("show", str(log), "--format", "markdown").stdout
    both = macprof("compare", str(log), str(log), "--fail-if", "accuracy:-5%")
    assert both.returncode == 0 and "no significant difference (p=1, 0 vs 0 of 36)" in both.stdout
    assert macprof("plot", str(log), "-o", str(tmp_path / "p.png")).returncode == 0 and (tmp_path / "p.png").stat().st_size


def test_summary_figures_from_hand_made_attempts():
    from macprof.model.tasks import TaskAttempt, TaskResult, ToolCall

    def att(n, ok, t0, t1, tokens):
        return TaskAttempt(task="t", attempt=n, t0=t0, t_tokenized=t0, token_times=(t1,) * tokens,
                           tokens=(5,) * tokens, correct=ok)

    results = [TaskResult(task="a", checker="number", solved_at=1, attempts=(att(1, True, 0, 1_000_000_000, 4),)),
               TaskResult(task="b", checker="number", solved_at=2,
                          attempts=(att(1, False, 0, 2_000_000_000, 6), att(2, True, 0, 1_000_000_000, 2))),
               TaskResult(task="c", checker="tool-call", solved_at=None, attempts=(
                   att(1, False, 0, 1_000_000_000, 8).replace(tool=ToolCall(parses=True)),))]
    s = at.summarize(results)
    assert (s.first.k, s.within.k, s.tasks) == (1, 2, 3)
    assert s.wall_s == pytest.approx(5.0) and s.time_per_correct_s == pytest.approx(2.5)  # failed attempts count
    assert s.tokens_per_correct == pytest.approx(10) and s.mean_attempts_to_correct == pytest.approx(1.5)
    assert s.tool_calls.parses.k == 1 and s.tool_calls.right_function.k == 0
    assert s.energy_per_correct_j is None and s.energy_reason


def test_a_task_file_that_cannot_run_is_one_line(fake_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("# nothing\n{bad\n")
    proc, _ = _run(tmp_path, fake_dir, "--tasks", str(empty))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no task to run" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_demo_models_are_all_wrong_and_the_machinery_exact(tiny_dir, tmp_path):
    log = tmp_path / "d.json"
    small = tmp_path / "small.jsonl"
    tf = taskfile.load(None)
    keep = [t for t in tf.tasks if t.id in ("arith-1", "extract-date", "format-json-bool", "tool-weather")]
    raw = (taskfile.read_bytes(None)[0]).decode().splitlines()
    cut = [{**json.loads(raw[t.line - 1]), "max_tokens": 16} for t in keep]  # random weights: replies run to the limit
    small.write_text("\n".join(json.dumps(t) for t in cut) + "\n")
    proc = macprof("run", "--config", str(tiny_dir / "models.toml"), "--models", "demo-tiny-f16,demo-tiny-mlx-4bit",
                   "--phases", "tasks", "--threads", "1",
                   "--tasks", str(small), "--attempts", "2", "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    run = runlog.load(log)
    assert [m.identity.name for m in run.models] == ["demo-tiny-f16", "demo-tiny-mlx-4bit"]
    for m in run.models:
        ph = m.phases.tasks
        assert ph is not None and not ph.failures, m.identity.name
        assert ph.prompt_format.startswith("no chat template")
        assert ph.summary.within.k == 0 and ph.summary.attempts_run == 2 * len(keep)
        _recomputed_real(ph, {t.id: (t.checker, list(t.tools)) for t in keep})


def _recomputed_real(ph, tools_of):
    for r in ph.results:
        for a in r.attempts:
            assert len(a.tokens) == len(a.token_times) >= 1 and a.stop in ("eos", "max_tokens") and len(a.tokens) <= 16
            spec, tools = tools_of[r.task]
            v = checkers.check(spec, a.text, tools, ph.tool_format or "json")
            assert (v.correct, v.message) == (a.correct, a.message)


def _row(source, outcomes, accuracy):
    return {"source": source, "model": "m", "outcomes": outcomes, "accuracy": accuracy, "time_per_correct_s": 1.0}


def test_accuracy_is_called_only_when_the_paired_test_says_so():
    from macprof.analyse import compare as cmp

    base = {f"t{i}": (True, True) for i in range(20)}
    worse = {**base, **{f"t{i}": (False, False) for i in range(8)}}  # 8 tasks lost, none gained: p = 2/256
    call = cmp.accuracy_call(base, worse)
    assert call["call"] == "less accurate" and call["only_base"] == 8 and call["p"] == pytest.approx(2 / 256)
    mixed = {**base, **{f"t{i}": (False, False) for i in range(3)}}
    assert cmp.accuracy_call(base, mixed)["call"] == "no significant difference"
    few = {k: base[k] for k in list(base)[:5]}
    small = cmp.accuracy_call(few, {k: (False, False) for k in few})
    assert small["call"] == "cannot tell" and "5 paired tasks" in small["why"]
    assert cmp.accuracy_call(base, {**base, **{f"t{i}": (False, False) for i in range(8)}})["call"] == "less accurate"
    assert cmp.parse_fail_if(["accuracy:-5%"]) == [("accuracy", -0.05)]


def test_the_accuracy_gate(fake_dir, tmp_path):
    from macprof.analyse import compare as cmp

    base = {f"t{i}": (True, True) for i in range(20)}
    worse = {**base, **{f"t{i}": (False, False) for i in range(8)}}
    rows = [_row("a", base, 1.0), _row("b", worse, 0.6)]
    for r in rows:
        r.update({k: None for k in ("engine", "decode_tok_s", "warm_ttft_s", "peak_memory_bytes", "memory_figure",
                                    "memory_weights", "kld_mean")})
        r["samples"] = {"decode": [], "ttft": []}
        r["conditions"] = {}
    result = cmp.compare(rows)
    found = cmp.regressions(result, cmp.parse_fail_if(["accuracy:-5%"]))
    assert len(found) == 1 and "-40.0 points" in found[0] and "McNemar" in found[0]
    assert not cmp.regressions(result, cmp.parse_fail_if(["accuracy:-50%"]))
    assert cmp.cannot_judge(result, cmp.parse_fail_if(["accuracy:-5%"])) is None
    rows[1]["outcomes"] = {k: worse[k] for k in list(worse)[:4]}
    rows[0]["outcomes"] = {k: base[k] for k in list(base)[:4]}
    why = cmp.cannot_judge(cmp.compare(rows), cmp.parse_fail_if(["accuracy:-5%"]))
    assert "4 paired tasks" in why and "McNemar" in why


# -- the real SmolLM2 of the test extra, on part of the default set ------------------------------
SMOL_TASKS = ("arith-1", "arith-3", "extract-capital", "format-yesno", "tool-timer", "tool-weather")


@pytest.mark.slow
def test_smollm2_on_the_default_set_recomputes_from_its_replies(smollm2, tmp_path):  # noqa: F811
    """Six tasks of the shipped set, replies cut at 24 tokens (the slow machine): through the
    model's own chat template (its GGUF's), EOS ending replies; every verdict and the accuracy
    recompute from the recorded replies, and each reply is the recorded ids detokenized."""
    from pathlib import Path as _P

    from macprof.engines.base import EngineSettings
    from macprof.engines.llama_cpp import LlamaCppEngine
    path = smollm2
    raw = taskfile.read_bytes(None)[0].decode().splitlines()
    tf = taskfile.load(None)
    picked = [t for t in tf.tasks if t.id in SMOL_TASKS]
    lines = []
    for t in picked:
        task = json.loads(raw[t.line - 1])
        task["max_tokens"] = min(task["max_tokens"], 24)
        lines.append(json.dumps(task))
    small = tmp_path / "smol.jsonl"
    small.write_text("\n".join(lines) + "\n")
    log = tmp_path / "s.json"
    # one thread: a 135M model decodes well on one, and llama.cpp's threads stall each other on shared cores
    proc = macprof("run", str(path), "--phases", "tasks", "--tasks", str(small), "--attempts", "2", "--threads", "1",
                   "--log", str(log), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert not ph.failures and not ph.refusals and ph.prompt_format == "the model's chat template (GGUF tokenizer.chat_template)"
    assert ph.tool_format == "json"  # SmolLM2-135M's template defines no tools: the documented JSON form
    engine = LlamaCppEngine()
    engine.load_model(_P(path), EngineSettings(n_ctx=512, threads=1))
    specs = {t.id: (t.checker, list(t.tools)) for t in picked}
    solved_first = solved = 0
    for r in ph.results:
        for a in r.attempts:
            assert a.status == "ok" and len(a.tokens) == len(a.token_times) <= 24
            assert (a.stop == "eos") == (a.tokens[-1] in engine.eos_ids)
            assert a.text == engine.detokenize(a.tokens[:-1] if a.stop == "eos" else a.tokens)
            spec, tools = specs[r.task]
            v = checkers.check(spec, a.text, tools, "json")
            assert (v.correct, v.message) == (a.correct, a.message)
        right = [a.attempt for a in r.attempts if a.correct]
        assert r.solved_at == (right[0] if right else None) and len(r.attempts) == (right[0] if right else 2)
        solved_first += r.solved_at == 1
        solved += r.solved_at is not None
    s = ph.summary
    assert (s.first.k, s.within.k, s.tasks) == (solved_first, solved, len(picked))
    assert s.attempts_run == sum(len(r.attempts) for r in ph.results)
    engine.close()


# -- through a server (engine openai): chat completions with the OpenAI tools field ---------------
def _chat_server(refuse_tools: bool):
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        seen: list = []

        def log_message(self, *a):
            pass

        def _send(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"data": [{"id": "m"}]}) if self.path == "/v1/models" else self._send(404, {})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": "no such endpoint"})
            Handler.seen.append(body)
            if "tools" in body and refuse_tools:
                return self._send(400, {"error": {"message": "tools are not supported"}})
            if "tools" in body:
                msg = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
            else:
                last = body["messages"][-1]["content"]
                msg = {"role": "assistant", "content": "41" if "Try again" not in last else "4"}
            self._send(200, {"choices": [{"message": msg, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 20, "completion_tokens": 3}})

    return Handler


SERVER_TASKS = [
    {"id": "add", "prompt": "What is 2 + 2?", "checker": {"type": "number", "answer": 4}, "max_tokens": 8},
    {"id": "weather", "prompt": "Weather in Oslo?", "checker": {"type": "tool-call", "name": "get_weather",
                                                                 "arguments": {"city": "Oslo"}}, "max_tokens": 32,
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
         "type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}]},
]


@pytest.mark.parametrize("refuse, sampled", [(False, False), (True, False), (False, True)])
def test_the_phase_through_a_server(loopback, tmp_path, refuse, sampled):
    from macprof.run.phases.tasks import attempt_seed

    handler = _chat_server(refuse)
    url = loopback(handler)
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in SERVER_TASKS) + "\n")
    log = tmp_path / "s.json"
    proc = macprof("run", "--endpoint", url + "/v1", "--phases", "tasks", "--tasks", str(tasks), "--attempts", "2",
                   "--log", str(log), *(("--temperature", "0.7", "--seed", "5") if sampled else ()), check=False)
    assert proc.returncode == 0, proc.stderr
    ph = runlog.load(log).models[0].phases.tasks
    assert ph.prompt_format.startswith("the server's own chat template") and not ph.failures
    add, weather = ph.results
    assert [a.correct for a in add.attempts] == [False, True] and add.solved_at == 2  # the retry, with the message
    assert "Try again" in handler.seen[1]["messages"][-1]["content"]
    assert handler.seen[0]["temperature"] == 0 and "seed" not in handler.seen[0]  # the first attempt: greedy
    if sampled:  # the retry sent the OpenAI temperature and seed, and the attempt records them
        assert (handler.seen[1]["temperature"], handler.seen[1]["seed"]) == (0.7, attempt_seed(5, "add", 2))
        assert (add.attempts[1].temperature, add.attempts[1].seed) == (0.7, attempt_seed(5, "add", 2))
        assert "ignores it gives replies no rerun reproduces" in ph.generation
    else:
        assert handler.seen[1]["temperature"] == 0 and "seed" not in handler.seen[1]
        assert not add.attempts[1].has("temperature") and "greedy (temperature 0)" in ph.generation
    assert all(a.completion_tokens == 3 and a.t_end >= a.t0 for r in ph.results for a in r.attempts)
    assert ph.summary.tokens_generated == 3 * ph.summary.attempts_run
    if refuse:  # asked again without the field, the tools in a system turn; said in the attempt's message
        assert weather.solved_at is None and "refused the tools field" in weather.attempts[0].message
        assert any("You can call these functions" in m["content"] for m in handler.seen[-1]["messages"])
    else:
        assert weather.solved_at == 1 and weather.attempts[0].tool.arguments_valid
        assert handler.seen[2]["tools"] == SERVER_TASKS[1]["tools"]
