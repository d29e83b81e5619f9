"""The tasks phase's sampled retries and its timeouts (issue #27): a retry at --temperature is
drawn by the engine's own sampler from a seed derived from --seed, the task and the attempt,
recorded with the attempt, so a rerun gives the same replies (the fake engine here; the demo
models with llama.cpp and MLX in the slow tier); a task whose attempt outlives the timeout is
that task's recorded failure, its wall time counted, and the tasks after it run."""

import json

import pytest

from macprof import config
from macprof.analyse import tasks as at
from macprof.engines.base import EngineSettings
from macprof.engines.capabilities import CAPABILITIES
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.tasks import TaskAttemptDone, TaskRefused, TasksStart
from macprof.run import resume
from macprof.run.phases.common import done_requests
from macprof.run.phases.tasks import attempt_seed, sampling_of, settled_tasks
from macprof.store import runlog
from tests.test_run import macprof

TASKS = [{"id": "add", "prompt": "What is 2 + 2? Answer with the number only.", "checker": {"type": "number", "answer": 4},
          "max_tokens": 8},
         {"id": "word", "prompt": "Say yes.", "checker": {"type": "exact", "answer": "yes"}, "max_tokens": 8},
         {"id": "json", "prompt": "Reply with {}", "checker": {"type": "json-schema", "schema": {"type": "object"}},
          "max_tokens": 6}]


def _task_file(tmp_path, tasks=TASKS):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


def _run(tmp_path, fake_dir, name, *args, env=None):
    log = tmp_path / f"{name}.json"
    proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks",
                   "--log", str(log), *args, env=env, check=False)
    return proc, log


def _attempts(log):
    ph = runlog.load(log).models[0].phases.tasks
    return ph, {(r.task, a.attempt): a for r in ph.results for a in r.attempts}


def test_an_attempts_seed_is_its_own_and_the_same_on_a_rerun():
    seeds = {attempt_seed(s, t, k) for s in (0, 1) for t in ("a", "b") for k in (2, 3)}
    assert len(seeds) == 8 and all(0 <= x < 2 ** 31 for x in seeds)  # llama.cpp reads 0xFFFFFFFF as "random"
    assert attempt_seed(1, "a", 2) == attempt_seed(1, "a", 2)
    assert sampling_of(0.0, 1, "a", 2) is None  # temperature 0: greedy at every attempt
    assert sampling_of(0.7, 1, "a", 1) is None  # the first attempt is greedy
    assert sampling_of(0.7, 1, "a", 2) == (0.7, attempt_seed(1, "a", 2))


def test_the_fake_engine_samples_reproducibly(fake_dir):
    from macprof.engines.fake import FakeEngine

    engine = FakeEngine()
    engine.load_model(fake_dir / "fake-a.gguf", EngineSettings(n_ctx=512))
    ids = engine.tokenize("What is two and two?")
    greedy = list(engine.generate(ids, 24))
    first = list(engine.generate_sampled(ids, 24, 1.5, 11))
    assert list(engine.generate_sampled(ids, 24, 1.5, 11)) == first  # the same seed: the same draws
    assert list(engine.generate_sampled(ids, 24, 1.5, 12)) != first
    assert first != greedy and len(first) == 24
    engine.reset()  # from an empty cache as from the cached prefix: the same tokens
    assert list(engine.generate_sampled(ids, 24, 1.5, 11)) == first
    engine.close()


def test_sampled_retries_are_recorded_and_reproduced(fake_dir, tmp_path):
    tasks = _task_file(tmp_path)
    runs = {}
    for name, extra in (("a", ("--temperature", "1.5", "--seed", "7")), ("b", ("--temperature", "1.5", "--seed", "7")),
                        ("c", ("--temperature", "1.5", "--seed", "8")), ("greedy", ())):
        proc, log = _run(tmp_path, fake_dir, name, "--tasks", str(tasks), "--attempts", "3", *extra)
        assert proc.returncode == 0, proc.stderr
        runs[name] = _attempts(log)
    ph, a = runs["a"]
    assert "each retry sampled at temperature 1.5" in ph.generation and "--seed 7" in ph.generation
    assert (ph.temperature, ph.seed) == (1.5, 7)
    assert set(a) == {(t["id"], k) for t in TASKS for k in (1, 2, 3)}  # the fake's replies are wrong: retried
    for (task, k), x in a.items():
        assert len(x.tokens) == len(x.token_times) >= 1  # counted by id and stamped, as greedy attempts are
        if k == 1:
            assert not x.has("temperature") and not x.has("seed")
        else:
            assert (x.temperature, x.seed) == (1.5, attempt_seed(7, task, k))
    same = runs["b"][1]
    assert all((x.tokens, x.text) == (same[key].tokens, same[key].text) for key, x in a.items())
    other, greedy = runs["c"][1], runs["greedy"][1]
    assert all(a[(t["id"], 1)].tokens == other[(t["id"], 1)].tokens == greedy[(t["id"], 1)].tokens for t in TASKS)
    assert any(a[key].tokens != other[key].tokens for key in a if key[1] > 1)  # another seed, other draws
    # the retries' prompts are the same in both runs (a greedy first reply, the same message):
    # only sampling makes the retry differ from the greedy one
    assert any(a[key].tokens != greedy[key].tokens for key in a if key[1] > 1)
    assert not any(x.has("temperature") for x in greedy.values())


def test_an_engine_that_cannot_sample_is_refused_with_its_reason():
    from macprof.run.phases import PhaseContext
    from macprof.run.phases.tasks import run_tasks

    class NoSample:
        name = "nosample"
        kind = "in_process"
        capabilities = {**dict.fromkeys(CAPABILITIES), "sample": "its decoding loop is an argmax"}

    s = config.Settings(phases=("tasks",), temperature=0.7, attempts=2)
    with pytest.raises(MacprofError, match="cannot sample: its decoding loop is an argmax"):
        run_tasks(PhaseContext(NoSample(), None, s, lambda e: None))


@pytest.mark.parametrize("kind, status", [("hang", "timeout"), ("segfault", "crashed")])
def test_a_task_that_times_out_costs_that_task_only(fake_dir, tmp_path, kind, status):
    """The worker hangs (or dies) at task "word" (the test hook): the parent kills it at the
    timeout, records the attempt (verdict timeout, its wall time), and a new worker runs the
    tasks after it; the tasks before it are not run again."""
    tasks = _task_file(tmp_path)
    fault = {"model": "fake-a", "kind": kind, "phase": "tasks", "case": "word"}
    proc, log = _run(tmp_path, fake_dir, "t", "--tasks", str(tasks), "--attempts", "2", "--timeout", "3",
                     env={"MACPROF_TEST_FAULT": json.dumps(fault)})
    assert proc.returncode == 0, proc.stderr  # the run measured every task: the failure is the log's, and a warning
    assert f"tasks word failed ({status})" in proc.stdout
    ph, a = _attempts(log)
    assert [r.task for r in ph.results] == ["add", "word", "json"]
    (cut,) = [x for (task, _), x in a.items() if task == "word"]
    assert cut.status == status and cut.error == ph.failures[0].reason and cut.correct is None and not cut.tokens
    assert cut.t_end > cut.t0  # the attempt's start (the worker's stamp) to the kill (the parent's)
    assert [k for (task, k) in a if task != "word"] == [1, 2, 1, 2]  # the others ran, each to its limit
    assert all(x.status == "ok" for (task, _), x in a.items() if task != "word")
    s = ph.summary
    assert s.attempts_run == 5 and s.attempts_cut == 1 and s.within.n == 3
    windows = [at.attempt_window(x) for x in a.values()]
    assert s.wall_s == pytest.approx(sum(b - t for t, b in windows) / 1e9)  # the cut attempt's time counts
    assert s.tokens_per_correct is None and "not known" in s.tokens_reason
    (failure,) = ph.failures
    assert failure.status == status and failure.case == "word"
    journal = [json.loads(x) for x in log.with_name("t.journal.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "worker_spawn" for e in journal) == 2 and sum(e["event"] == "tasks_start" for e in journal) == 2
    assert sum(e["event"] == "task_attempt" and e["task"] == "add" for e in journal) == 2  # not run again
    show = macprof("show", str(log)).stdout
    assert "1 attempt(s) cut by a timeout or a crash" in show


def _read(events) -> resume.ModelPast:
    """What resume reads of a worker's events (run/resume.py, event by event)."""
    spawn = ev.WorkerSpawn(model="m", worker="w1", phases=("tasks",), trial=0, t_spawn=0, pid=1)
    out = resume.ModelPast()
    for e in events:
        resume._read(out, e.replace(model="m", worker="w1"), spawn)
    return out


def _attempt(task, attempt, correct, status="ok"):
    return TaskAttemptDone(phase="tasks", task=task, attempt=attempt, status=status, correct=correct,
                           checker="exact", t0=0, t_tokenized=0, token_times=(1,), tokens=(5,))


def test_resume_names_the_settled_tasks():
    past = _read([TasksStart(phase="tasks", attempts_allowed=2),
                  _attempt("right", 1, True), _attempt("wrong", 1, False), _attempt("wrong", 2, False),
                  _attempt("half", 1, False),  # interrupted before its retry: run again
                  _attempt("cut", 1, None, status="timeout"), _attempt("raised", 1, None, status="error")])
    done = done_requests(past.requests)
    assert settled_tasks(done) == {"right", "wrong", "cut", "raised"}


def test_the_record_joins_the_workers_parts_and_keeps_a_task_run_again_once():
    start = TasksStart(phase="tasks", attempts_allowed=2)
    refused = TaskRefused(phase="tasks", line=3, task="long", reason="too long")
    events = [start, _attempt("a", 1, False), _attempt("b", 1, False), refused,  # the first worker, cut in b's retry
              start, _attempt("b", 1, True), refused, _attempt("c", 1, True)]  # the next: b again from its first
    ph = at.build_tasks(events, [], None)
    assert [(r.task, r.solved_at, len(r.attempts)) for r in ph.results] == [("a", None, 1), ("b", 1, 1), ("c", 1, 1)]
    assert len(ph.refusals) == 1


# -- the real engines on the demo models (random weights: every answer wrong, the machinery exact)
@pytest.mark.slow
@pytest.mark.parametrize("engine_name, rel", [("llama.cpp", "gguf/demo-tiny-f16.gguf"), ("mlx", "mlx/demo-tiny-f16")])
def test_the_real_engines_sample_reproducibly(tiny_dir, engine_name, rel):
    from macprof import engines

    engine = engines.create(engine_name)
    engine.load_model(tiny_dir / rel, EngineSettings(n_ctx=256, threads=1))
    engine.load_tokenizer()
    ids = engine.tokenize("The quick brown fox jumps over the lazy dog.")

    def fresh(gen):
        engine.reset()  # each from an empty cache: the same logits, bit for bit
        return list(gen)

    greedy = fresh(engine.generate(ids, 24))
    sampled = fresh(engine.generate_sampled(ids, 24, 5.0, 11))
    assert len(sampled) == 24 and all(0 <= t < engine.vocab_size for t in sampled)
    assert sampled != greedy  # at a high temperature the draws leave the argmax
    assert fresh(engine.generate_sampled(ids, 24, 5.0, 11)) == sampled  # the same seed: the same tokens
    assert fresh(engine.generate_sampled(ids, 24, 5.0, 12)) != sampled
    assert fresh(engine.generate(ids, 24)) == greedy  # sampling left the greedy path as it was
    engine.close()


@pytest.mark.slow
def test_sampled_retries_on_the_demo_models(tiny_dir, tmp_path):
    """Both real engines through the phase: the retries sampled at a high temperature differ
    from a greedy run's and a second run reproduces them exactly."""
    tasks = _task_file(tmp_path, [{**t, "max_tokens": 8} for t in TASKS[:2]])
    logs = {}
    for name, extra in (("a", ("--temperature", "5", "--seed", "3")), ("b", ("--temperature", "5", "--seed", "3")),
                        ("greedy", ())):
        logs[name] = tmp_path / f"{name}.json"
        proc = macprof("run", "--config", str(tiny_dir / "models.toml"), "--models", "demo-tiny-f16,demo-tiny-mlx-f16",
                       "--phases", "tasks", "--threads", "1", "--tasks", str(tasks), "--attempts", "2",
                       "--log", str(logs[name]), *extra, check=False)
        assert proc.returncode == 0, proc.stderr
    runs = {name: runlog.load(log).models for name, log in logs.items()}
    for i in range(2):
        a, b, greedy = ({(r.task, x.attempt): x for r in runs[n][i].phases.tasks.results for x in r.attempts}
                        for n in ("a", "b", "greedy"))
        assert set(a) == set(greedy) == {(t["id"], k) for t in TASKS[:2] for k in (1, 2)}
        assert all(a[key].tokens == b[key].tokens for key in a)  # reproduced from the same seed
        assert all(a[(t["id"], 1)].tokens == greedy[(t["id"], 1)].tokens for t in TASKS[:2])  # the first: greedy
        assert any(a[key].tokens != greedy[key].tokens for key in a if key[1] == 2)
        assert all(len(x.tokens) == len(x.token_times) for x in a.values())


def test_a_resumed_run_goes_on_after_the_settled_tasks(fake_dir, tmp_path):
    """A journal cut after the first task (the parent killed there) is resumed: the settled
    task is not asked again, the others are, and the replies are the uninterrupted run's,
    sampled retries included (their seeds name the task and the attempt, not the run)."""
    tasks = _task_file(tmp_path)
    args = ("--tasks", str(tasks), "--attempts", "2", "--temperature", "1.5", "--seed", "2")
    proc, full = _run(tmp_path, fake_dir, "full", *args)
    assert proc.returncode == 0, proc.stderr
    lines = full.with_name("full.journal.jsonl").read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if '"event":"task_attempt"' in line and '"task":"word"' in line)
    journal = tmp_path / "cut.journal.jsonl"
    journal.write_text("\n".join(lines[:cut]) + "\n")
    log = tmp_path / "cut.json"
    proc = macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "tasks", *args,
                   "--resume", str(journal), check=False)
    assert proc.returncode == 0, proc.stderr
    (_, whole), (ph, resumed) = _attempts(full), _attempts(log)
    assert [r.task for r in ph.results] == [t["id"] for t in TASKS] and set(resumed) == set(whole)
    assert all(resumed[key].tokens == whole[key].tokens for key in whole)
    journaled = [json.loads(x) for x in journal.read_text().splitlines()]
    assert sum(e["event"] == "task_attempt" and e["task"] == "add" for e in journaled) == 2  # asked once
