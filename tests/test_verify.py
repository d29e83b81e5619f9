"""`macprof verify` (store/verify.py): a log proves its figures when every summary recomputes
from its raw records (by build itself: analyse/unbuild.py reads them back as the events they
were built from), none is impossible (model/bounds.py) and its digest matches (store/digest.py).
Untouched logs verify (every fixture, real runs of every phase on the fake engine and a server);
hand edits are caught and named; show and compare warn on stderr alone; an impossible proportion
is never printed as a figure (issue 37 row 14)."""

from __future__ import annotations

import copy
import fnmatch
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from macprof.analyse.unbuild import kept, rebuilt
from macprof.cli import main
from macprof.collect import telemetry
from macprof.store import runlog
from macprof.store.digest import FORM, canonical, sha256_of
from macprof.store.verify import verify, verify_file
from tests.conftest import FIXTURES, cli as run
from tests.test_energy import ConstantSource
from tests.test_run import macprof
from tests.test_server_run import RUN as SERVER_RUN, fake_server  # noqa: F401  # fake_server: a fixture

LOGS = FIXTURES / "runlogs"
GOOD = ["tiny-a.json", "tiny-b.json", "tiny-sweeps.json", "tiny-telemetry.json", "schema1.json",
        "other-machine-demo-small.json"]
DEFAULT_RUN = LOGS / "other-machine-demo-small.json"  # a default run of the six small demo models
TASKS = [{"id": "any", "prompt": "Say anything.", "checker": {"type": "regex", "pattern": "(?s).*"}, "max_tokens": 6},
         {"id": "add", "prompt": "What is 2 + 2? Answer with the number only.", "checker": {"type": "number", "answer": 4},
          "max_tokens": 6},
         {"id": "tool", "category": "tool-call", "prompt": "Weather in Oslo?", "max_tokens": 8,
          "checker": {"type": "tool-call", "name": "get_weather", "arguments": {"city": "Oslo"}},
          "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
              "type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}]}]
SMALL = ["--prompt-tokens", "32", "--gen-tokens", "8", "--reps", "2", "--cold-trials", "2"]


def _tasks(folder: Path) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def _loaded(data: dict):
    return runlog.parse("edited", json.dumps(data), data)


def _problems(data: dict) -> list:
    found = verify(_loaded(data), data)
    return list(found.problems)


# -- real runs: every phase, a model draft, faults, a server ---------------------------------------
@pytest.fixture(scope="module")
def everything(fake_dir, tmp_path_factory):
    """One model through every in-process phase (the sweeps, quality, speculative with ngram in
    both implementations, a two-app conversation, tasks with sampled retries) with a telemetry
    source that reads power, as a Mac's does: energy per token, per request and per sweep case."""
    folder = tmp_path_factory.mktemp("everything")
    log = folder / "run.json"
    mp = pytest.MonkeyPatch()
    mp.setattr(telemetry, "open_source", lambda platform=None: ConstantSource())
    mp.setattr(telemetry, "IDLE_BASELINE_S", 0.6)  # two whole samples at 0.25 s
    try:
        r = CliRunner().invoke(main, [
            "run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", *SMALL,
            "--phases", "cold,warm,prefix,grid,depth,batch,quality,speculative,conversation,tasks,bench", "--shape", "chat",
            "--depth", "0,64", "--batch", "1,2", "--quality-ctx", "64", "--quality-tokens", "128", "--draft", "ngram",
            "--draft-tokens", "1,3", "--speculative-impl", "both", "--turns", "3", "--apps", "2",
            "--tasks", str(_tasks(folder)), "--attempts", "2", "--temperature", "0.7", "--log", str(log)])
    finally:
        mp.undo()
    assert r.exit_code == 0, r.output
    return log


@pytest.fixture(scope="module")
def others(fake_dir, tmp_path_factory) -> dict[str, Path]:
    """Runs whose records take other paths: a model draft (its memory, DraftEnd, the mapped
    weights added), a crashed cold trial, a crashed sweep case, an attempt its worker died in."""
    from macprof.engines.fake import write_model

    folder = tmp_path_factory.mktemp("others")
    draft = folder / "draft.gguf"
    write_model(draft, hidden=32)
    toml = str(fake_dir / "models.toml")
    runs = {
        "model draft": (["--phases", "warm,speculative", "--draft", str(draft), "--draft-tokens", "2"], None),
        "cold crash": (["--phases", "cold,warm"], {"model": "fake-b", "kind": "segfault", "phase": "cold"}),
        "case crash": (["--depth", "0,64"], {"model": "fake-b", "kind": "segfault", "phase": "depth", "case": "d64"}),
        "attempt crash": (["--phases", "tasks", "--tasks", str(_tasks(folder))],
                          {"model": "fake-b", "kind": "segfault", "phase": "tasks", "case": "add"}),
    }
    out = {}
    for name, (args, fault) in runs.items():
        log = folder / f"{name.replace(' ', '-')}.json"
        macprof("run", "--config", toml, "--models", "fake-b", *SMALL, *args, "--log", str(log),
                env={"MACPROF_TEST_FAULT": json.dumps(fault)} if fault else None)
        out[name] = log
    return out


def _strictly_rebuilt(path: Path) -> list[str]:
    """Every difference between a log and the log built again from its raw records, strings and
    keys included, but for what the log keeps no raw record of (unbuild.kept): the inverse of
    build is complete."""
    log = runlog.load(path)
    stored, again = log.to_json(), rebuilt(log).to_json()
    skip = [f"models/{i}/{p}" for i, m in enumerate(stored["models"]) for p in kept(m)]
    out: list[str] = []

    def walk(a, b, at):
        if a == b or any(fnmatch.fnmatchcase(at, p) for p in skip):
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in set(a) | set(b):
                if (k not in a or k not in b) and not any(fnmatch.fnmatchcase(f"{at}/{k}", p) for p in skip):
                    out.append(f"{at}/{k}: only {'stored' if k in a else 'rebuilt'}")
                elif k in a and k in b:
                    walk(a[k], b[k], f"{at}/{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{at}/{i}")
        else:
            out.append(f"{at}: {str(a)[:60]} != {str(b)[:60]}")

    for i, (m, n) in enumerate(zip(stored["models"], again["models"])):
        for key in m:  # a failure's model is the journal's key: build groups by it
            if key != "failures":
                walk(m[key], n.get(key), f"models/{i}/{key}")
    return out


def test_a_run_of_every_phase_verifies_and_builds_again_from_its_raw_records(everything):
    found = verify_file(everything)
    assert found.ok and found.digest == "matches", found.lines()
    assert _strictly_rebuilt(everything) == []
    data = json.loads(everything.read_text())
    m = data["models"][0]
    assert m["phases"]["warm"]["telemetry"]["energy"]["decode_j_per_token"] is not None  # power was read
    assert m["phases"]["speculative"]["native"] and m["phases"]["tasks"]["summary"]["within"]["k"] >= 1


@pytest.mark.parametrize("name", ["model draft", "cold crash", "case crash", "attempt crash"])
def test_runs_with_a_draft_model_and_with_crashes_verify(others, name):
    data = json.loads(others[name].read_text())
    m = data["models"][0]
    if name != "model draft":
        assert m["failures"], "the fault struck"
    found = verify_file(others[name])
    assert found.ok and found.digest == "matches", found.lines()
    assert _strictly_rebuilt(others[name]) == []


def test_a_server_run_with_failed_requests_verifies(fake_server, tmp_path):  # noqa: F811
    url = fake_server(fail_every=3)
    log = tmp_path / "server.json"
    macprof("run", "--endpoint", url, "--model", "fake-model", "--phases", "warm,prefix,concurrency",
            "--concurrency", "1,2", "--slo", "ttft:10s,itl:10s", *SERVER_RUN, "--log", str(log))
    found = verify_file(log)
    assert found.ok and found.digest == "matches", found.lines()
    assert _strictly_rebuilt(log) == []


def test_a_conversation_whose_requests_fail_verifies(loopback, tmp_path):
    """Two apps through a server that fails every 5th completion it would stream: each failed
    turn stops its app, kept in the log with its reason and the requests it made (a failed one
    among them); the log verifies and builds again, stops and requests included."""
    import io
    import threading

    from macprof.bench import fake_server as fakes

    state = fakes.new_state(token_ms=0.5, prompt_ms=0.01, tokenizer="llama.cpp", cache=1)
    count, lock = [0], threading.Lock()

    class Failing(fakes.handler(state)):  # type: ignore[misc]
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.loads(raw or b"{}")
            with lock:
                count[0] += bool(body.get("stream") and body.get("max_tokens") == 4)
                fail = body.get("stream") and body.get("max_tokens") == 4 and count[0] % 5 == 0
            if fail:
                return self._json({"error": {"message": "the fake is overloaded"}}, 503)
            self.rfile = io.BytesIO(raw)
            super().do_POST()

    log = tmp_path / "conversation.json"
    macprof("run", "--endpoint", loopback(Failing) + "/v1", "--phases", "conversation", "--apps", "2", "--turns", "4",
            "--gen-tokens", "4", "--turn-tokens", "10", "--system-tokens", "12", "--timeout", "30", "--log", str(log))
    ph = runlog.load(log).models[0].phases.conversation
    assert ph.stops and all(s.error and s.reason.endswith("conversation stops here") for s in ph.stops)
    assert len({s.app for s in ph.stops}) == len(ph.stops)  # one stop an app
    failed = [r for s in ph.stops for r in (s.natural, s.emptied) if r is not None and r.status == "error"]
    assert failed and all("503" in r.error for r in failed)
    found = verify_file(log)
    assert found.ok and found.digest == "matches", found.lines()
    assert _strictly_rebuilt(log) == []
    # a log from before stops: its one reason (the first), which it still verifies and shows
    data = json.loads(log.read_text())
    del data["digest"]
    older = data["models"][0]["phases"]["conversation"]
    older["stopped"] = older.pop("stops")[0]["reason"]
    assert _problems(data) == []
    older_log = tmp_path / "older.json"
    older_log.write_text(json.dumps(data))
    assert f"   stopped: {older['stopped']}" in macprof("show", str(older_log)).stdout.splitlines()


@pytest.mark.slow
def test_a_run_of_the_real_engines_verifies_and_builds_again(tiny_dir, tmp_path):
    """llama.cpp and MLX on the tiny demo models, with what each engine's own speculative path tells
    (llama-cpp-python's prompt lookup; mlx-lm refuses it, said so) and a conversation."""
    log = tmp_path / "real.json"
    macprof("run", "--config", str(tiny_dir / "models.toml"), "--models", "demo-tiny-q4_k_m,demo-tiny-mlx-f16",
            "--phases", "cold,warm,prefix,speculative,conversation", "--draft", "ngram", "--speculative-impl", "both",
            "--draft-tokens", "2", "--prompt-tokens", "32", "--prefix-tokens", "24", "--gen-tokens", "8", "--reps", "2",
            "--cold-trials", "1", "--turns", "2", "--threads", "1", "--log", str(log))
    found = verify_file(log)
    assert found.ok and found.digest == "matches", found.lines()
    assert _strictly_rebuilt(log) == []


@pytest.mark.parametrize("name", GOOD)
def test_every_fixture_log_verifies_and_says_it_has_no_digest(name):
    r = run("verify", LOGS / name)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{LOGS / name}: verifies: its figures recompute from its raw records, no digest")
    assert "no digest (a log written before macprof recorded one)" in r.output


@pytest.mark.parametrize("name,message", [
    ("truncated.json", "not valid JSON (truncated or corrupt)"), ("newer.json", "is newer than this macprof"),
    ("malformed.json", "does not match the run-log schema"), ("incomplete.journal.jsonl", "a journal, not a run log"),
    ("absent.json", "cannot read (No such file or directory)"), ("", "not a regular file (a directory)")])
def test_what_is_no_run_log_is_one_line_and_exit_1(name, message):
    r = run("verify", LOGS / name, LOGS / "tiny-a.json")
    assert r.exit_code == 1 and "Traceback" not in r.output
    first, *rest = r.output.splitlines()
    assert message in first and first.endswith("does not verify")
    assert rest[0].endswith("verifies: its figures recompute from its raw records, no digest")  # the next is checked


# -- hand edits ------------------------------------------------------------------------------------
def _warm_median(m):
    m["phases"]["warm"]["summary"]["decode_tok_s"]["median"] *= 1.02
    return "models/0/phases/warm/summary/decode_tok_s/median"


def _speedup(m):
    m["phases"]["prefix"]["summary"]["ttft_speedup"] = 3.0
    return "models/0/phases/prefix/summary/ttft_speedup"


def _within(m):
    w = m["phases"]["tasks"]["summary"]["within"]
    w.update(k=9, n=2, value=4.5)
    return "models/0/phases/tasks/summary/within/k"


def _alpha(m):
    m["phases"]["speculative"]["cases"][0]["acceptance"] = 5.0
    return "models/0/phases/speculative/cases/0/acceptance"


def _hit_rate(m):
    m["phases"]["conversation"]["summary"]["hit_rate"] = 0.5
    return "models/0/phases/conversation/summary/hit_rate"


def _stamp(m):
    r = next(r for r in m["phases"]["warm"]["requests"] if r["kind"] == "measured")
    r["token_times"][-1] += 40_000_000  # the last token 40 ms later: its request's and the phase's figures
    return "models/0/phases/warm/requests/1/decode_tok_s"


def _energy(m):
    m["phases"]["depth"]["cases"][1]["energy"]["decode_j"] = 7.0
    return "models/0/phases/depth/cases/1/energy/decode_j"


def _round(m):
    j, req = next((j, r) for j, r in enumerate(m["phases"]["speculative"]["cases"][1]["requests"]) if r["rounds"])
    req["rounds"][0]["accepted"] = req["rounds"][0]["drafted"] + 1
    return f"models/0/phases/speculative/cases/1/requests/{j}/rounds/0/accepted"


@pytest.mark.parametrize("edit", [_warm_median, _speedup, _within, _alpha, _hit_rate, _stamp, _energy, _round])
def test_a_hand_edit_is_caught_and_named(everything, tmp_path, edit):
    data = json.loads(everything.read_text())
    path = edit(data["models"][0])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data, indent=1))
    r = run("verify", edited)
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = [line for line in r.output.splitlines() if not line.startswith(f"{edited}: flag: ")]  # the fake beats its ceiling
    assert lines[0] == f"{edited}: does not verify: {len(lines) - 1} problem(s)"
    assert f"{edited}: digest: its content digest does not match" in r.output
    named = [line for line in lines if line.startswith(f"{edited}: {path} (fake-a): ")]
    assert named, r.output


def test_an_edited_stamp_names_the_figures_it_moves(everything):
    data = json.loads(everything.read_text())
    req = data["models"][0]["phases"]["warm"]["requests"][1]
    before = req["decode_tok_s"]
    _stamp(data["models"][0])
    data.pop("digest")
    found = {p.path: p for p in _problems(data)}
    p = found["models/0/phases/warm/requests/1/decode_tok_s"]
    assert p.stored == before and p.recomputed < before  # slower: the figure it gives, beside the stored
    assert f"stored {before:.6g}, recomputed from its raw records {p.recomputed:.6g}" in p.what
    assert "models/0/phases/warm/summary/decode_tok_s/max" in found or "models/0/phases/warm/summary/decode_tok_s/min" in found


def test_impossible_figures_are_named_as_such(everything):
    data = json.loads(everything.read_text())
    m = data["models"][0]
    _within(m)
    _alpha(m)
    m["phases"]["conversation"]["summary"]["hit_rate"] = -3.0
    m["phases"]["warm"]["requests"][1]["token_times"][3] = 1  # a time that runs backwards
    pp = m["phases"]["bench"]["cases"][0]["requests"][1]  # a pp test's prompt computed before it was tokenized
    assert m["phases"]["bench"]["cases"][0]["test"] == "pp" and pp["t_prefilled"] > pp["t_tokenized"]
    pp["t_prefilled"] = pp["t_tokenized"] - 1
    found = {p.path: p.what for p in _problems(data)}
    assert found["models/0/phases/tasks/summary/within/k"] == "9 is more than n (2)"
    assert found["models/0/phases/tasks/summary/within/value"] == "4.5 is a proportion outside 0..1"
    assert found["models/0/phases/speculative/cases/0/acceptance"] == "5 is a proportion outside 0..1"
    assert found["models/0/phases/conversation/summary/hit_rate"] == "-3 is a proportion outside 0..1"
    assert found["models/0/phases/warm/requests/1/token_times/3"].startswith("a time that runs backwards: 1 after ")
    assert found["models/0/phases/bench/cases/0/requests/1/t_prefilled"] == (
        f"a time that runs backwards: {pp['t_prefilled']} is before t_tokenized ({pp['t_tokenized']})")


def _efficiencies(x, at: str = "") -> dict:
    """Every ceiling's efficiency in a log's JSON, by path: read from the JSON, not the registry."""
    if isinstance(x, dict):
        found = {f"{at}/efficiency": x["efficiency"]} if at.endswith(("/spec", "/measured")) and "roofline" in at \
            and isinstance(x.get("efficiency"), (int, float)) else {}
        for k, v in x.items():
            found |= _efficiencies(v, f"{at}/{k}" if at else k)
        return found
    if isinstance(x, list):
        return {k: v for i, item in enumerate(x) for k, v in _efficiencies(item, f"{at}/{i}").items()}
    return {}


def test_decode_above_a_ceiling_is_flagged_in_every_phase_and_case_that_has_one(everything):
    """The fake engine decodes far above any bandwidth ceiling: every such efficiency in the log,
    wherever it is (warm, prefix, each sweep case, bench's tg tests), is a flag, never a problem."""
    data = json.loads(everything.read_text())
    above = {path for path, value in _efficiencies(data).items() if value > 1}
    assert "models/0/phases/bench/cases/1/roofline/measured/efficiency" in above  # tg8
    assert {p.split("/")[3] for p in above} >= {"warm", "prefix", "grid", "depth", "batch", "bench"}
    found = verify(runlog.load(everything), data)
    assert found.ok and {f.path for f in found.flags} == above


def test_a_phase_its_settings_do_not_list_is_named(everything):
    """A phase record added by hand (or left when its setting was taken out) is built from nothing."""
    data = json.loads(everything.read_text())
    data["models"][0]["settings"]["phases"].remove("quality")
    found = {p.path: p.what for p in _problems(data)}
    assert found["models/0/phases/quality"].startswith("stored, but nothing of it is built from its raw records")


def test_a_changed_digest_alone_is_caught(everything, tmp_path):
    data = json.loads(everything.read_text())
    data["digest"]["sha256"] = "0" * 64
    edited = tmp_path / "digest.json"
    edited.write_text(json.dumps(data))
    r = run("verify", edited)
    assert r.exit_code == 1
    assert [line for line in r.output.splitlines()[1:] if " flag: " not in line] == [f"{edited}: digest: its content digest does not match: the log was edited "
                                         f"after it was written (recorded sha256 0000000000000000..., content "
                                         f"{sha256_of(data)[:16]}...)"]


def test_a_log_without_its_digest_verifies_and_says_so(everything, tmp_path):
    data = json.loads(everything.read_text())
    data.pop("digest")
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(data))
    found = verify_file(stripped)
    assert found.ok and found.digest == "absent" and "no digest" in found.lines()[-1]


def test_the_digest_is_sha256_of_the_documented_canonical_form(everything):
    """What docs/runlog.md says another tool computes: the log without digest, keys sorted, no
    whitespace, UTF-8, numbers as the file has them."""
    import hashlib

    text = everything.read_text()
    data = json.loads(text)
    body = {k: v for k, v in data.items() if k != "digest"}
    form = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert data["digest"] == {"sha256": hashlib.sha256(form).hexdigest(), "form": FORM} and canonical(data) == form


def test_a_shared_copy_verifies_with_its_own_digest(everything, tmp_path):
    out = tmp_path / "shared.json"
    r = run("share", everything, "-o", out)
    assert r.exit_code == 0 and r.stderr == "", r.output
    original, shared = json.loads(everything.read_text()), json.loads(out.read_text())
    assert shared["digest"]["sha256"] != original["digest"]["sha256"]
    assert original["digest"]["sha256"] not in out.read_text()  # not kept: a guessed name could be checked against it
    found = verify_file(out)
    assert found.ok and found.digest == "matches", found.lines()


def test_share_says_when_its_original_does_not_verify(everything, tmp_path):
    data = json.loads(everything.read_text())
    _warm_median(data["models"][0])
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    r = run("share", edited, "-o", tmp_path / "copy.json")
    assert r.exit_code == 0 and r.stderr.startswith(f"macprof: warning: {edited} does not verify (")


# -- show and compare ------------------------------------------------------------------------------
def test_show_and_compare_warn_on_stderr_and_print_the_same(everything, tmp_path):
    data = json.loads(everything.read_text())
    data["digest"]["sha256"] = "1" * 64  # the content as it was: what they print cannot differ
    edited = tmp_path / "run.json"  # the same name: compare's run column
    edited.write_text(json.dumps(data))
    for args in (["show"], ["show", "--format", "json"], ["compare"]):
        clean, warned = run(*args, everything), run(*args, edited)
        assert clean.exit_code == warned.exit_code == 0 and clean.stderr == ""
        assert warned.stdout == clean.stdout
        assert warned.stderr.count("\n") == 1
        assert warned.stderr.startswith(f"macprof: warning: {edited} does not verify (digest: its content digest does "
                                        f"not match") and warned.stderr.endswith(f"`macprof verify {edited}` names each problem\n")


def test_compare_warns_on_an_older_log_whose_figures_do_not_recompute(tmp_path):
    data = json.loads(DEFAULT_RUN.read_text())  # no digest: compare rebuilds it
    data["models"][2]["phases"]["warm"]["summary"]["ttft_s"]["median"] = 0.001
    edited = tmp_path / "older.json"
    edited.write_text(json.dumps(data))
    r = run("compare", DEFAULT_RUN, edited)
    assert r.exit_code == 0 and r.stderr.count("\n") == 1
    assert "models/2/phases/warm/summary/ttft_s/median (demo-small-q4_k_m): stored 0.001, recomputed" in r.stderr


def test_an_impossible_proportion_is_never_printed_as_a_figure(everything, tmp_path):
    """Issue 37 row 14: "within 1: 9/2 = 450 %", hit rate "-3e+02%", α 5.000 printed as they were stored."""
    data = json.loads(everything.read_text())
    m = data["models"][0]
    _within(m)
    _alpha(m)
    m["phases"]["conversation"]["summary"]["hit_rate"] = -3.0
    m["phases"]["conversation"]["turns"][1]["reuse_rate"] = 2.5
    m["phases"]["speculative"]["cases"][1]["checks"]["identical"] = 7  # of 2 checked
    edited = tmp_path / "impossible.json"
    edited.write_text(json.dumps(data))
    show, compare = run("show", edited), run("compare", edited, everything)
    for r in (show, compare):
        assert r.exit_code == 0 and "INVALID" in r.stdout
        for figure in ("9/2 =", "450 %", "-3e+02", "-300%", "α 5.000", "5.000,", "250%", "7/2 identical"):
            assert figure not in r.stdout, figure
    assert "within 2: INVALID" in show.stdout and "hit rate INVALID" in show.stdout and "(α INVALID," in show.stdout
    assert "INVALID identical" in show.stdout
    verdict = run("verify", edited)
    for path in ("tasks/summary/within/k", "speculative/cases/0/acceptance", "conversation/summary/hit_rate",
                 "conversation/turns/1/reuse_rate", "speculative/cases/1/checks/identical"):
        assert f"models/0/phases/{path} (fake-a): " in verdict.output, path


# -- any single edit of a summary figure is caught -------------------------------------------------
def _summary_figures(data: dict) -> list[tuple]:
    """(path as keys, value) of every number under a key named summary."""
    out = []

    def walk(value, at, inside):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, (*at, k), inside or k == "summary")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, (*at, i), inside)
        elif inside and isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((at, value))

    walk(data, (), False)
    return out


DEFAULT_DATA = json.loads(DEFAULT_RUN.read_text())
FIGURES = _summary_figures(DEFAULT_DATA)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIGURES), st.floats(min_value=0.001, max_value=10))
def test_any_single_edit_of_a_summary_figure_is_caught(figure, change):
    """Any number under a summary, changed by any amount past rounding, is named by its path."""
    at, value = figure
    new = value + max(1, round(change)) if isinstance(value, int) else (value * (1 + change) if value else change)
    data = copy.deepcopy(DEFAULT_DATA)
    holder = data
    for key in at[:-1]:
        holder = holder[key]
    holder[at[-1]] = new
    paths = [p.path for p in _problems(data)]
    assert "/".join(map(str, at)) in paths
