"""`macprof share` removes by kind, not by list (issue #23, row 2 and class item 2): every string
field of the run log has a kind (its record's KINDS, walked by macprof/model/kinds.py), and a maximal log from each kind of
run, with a home path, URL credentials, the user name and the host name planted wherever they
can arrive from, shares with none of them left in any string.

The runs: models.toml on the fake engine (a crash's stderr tail, a refused model, the quality
phase on a --text under the home), MODEL references (a hub id and an Ollama name under the
user's name, a ~ path), --endpoint with user:secret@ in its URL against a server that lists
the model's full path and fails some requests quoting all of it, --serve (a stand-in for
llama-cpp-python's server: tests/fake_llama_server.py), and a distributed group's journal (its
ranks' hosts and facts)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest

from macprof.model import kinds
from macprof.model.records import record_fields
from macprof.run import serve
from macprof.store import runlog
from tests.conftest import cli
from tests.test_run import macprof
from tests.test_stores import hub_repo, ollama_model

USER, HOST, SECRET = "mallory", "mallorys-mbp", "s3cr3t-pw"
REPO = Path(__file__).resolve().parent.parent
FAKE_SERVER = Path(__file__).parent / "fake_llama_server.py"


# -- every field has a kind ------------------------------------------------------------------------
def test_every_string_field_of_the_run_log_has_a_kind():
    """A field added later without a kind fails here, naming it, instead of being shared as is."""
    missing, walked = [], 0
    for cls in kinds.reachable():
        hints = typing.get_type_hints(cls)
        for f in record_fields(cls):
            declared = kinds.fields_of(cls)[f.name]
            if declared.record is None and kinds.holds_text(hints[f.name]):
                walked += 1
                if declared.kind not in kinds.KINDS:
                    missing.append(f"{cls.__qualname__}.{f.name}")
    assert not missing, f"fields without a kind in their record's KINDS: {', '.join(missing)}"
    assert walked > 150  # the log's string fields, all of them
    stale = [f"{cls.__qualname__}.{name}" for cls in kinds.reachable() for name in vars(cls).get("KINDS", {})
             if name not in {f.name for f in record_fields(cls)}]
    assert not stale, f"KINDS names fields that are not there: {stale}"
    wrong = [f"{cls.__qualname__}.{name}: {k}" for cls in kinds.reachable() for name, k in vars(cls).get("KINDS", {}).items()
             if k not in kinds.KINDS]
    assert not wrong, f"KINDS gives kinds that are not kinds: {wrong}"


# -- the runs --------------------------------------------------------------------------------------
def _wait(url: str, proc: subprocess.Popen) -> None:
    from macprof.engines import wire

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the fake server exited"
        try:
            wire.get_json(url + "/models", timeout=1.0)
            return
        except wire.ServerError:
            time.sleep(0.05)
    raise AssertionError("the fake server did not answer")


def _distributed(journal: Path, out: Path, hosts: list[str], home: Path) -> Path:
    """A run's journal as a sharded model's would be: its settings name the group's hosts, and
    the events its ranks stream (their facts, their timelines, the communication pass) follow
    its load, each with the planted values where a rank's facts and messages carry them."""
    lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    model = next(e for e in lines if e["event"] == "model_start")
    model["settings"]["distributed"] = {"hosts": hosts, "backend": "ring", "parallel": "tensor", "link_gbs": None}
    loaded = next(i for i, e in enumerate(lines) if e["event"] == "loaded")
    who = {"model": model["model"], "worker": lines[loaded]["worker"]}
    facts = [{"rank": r, "pid": 100 + r, "device": "Device(gpu, 0)", "host_id": "5bce98f7", "os": "Darwin",
              "cpu_model": "Apple M4 Max", "chip": "Apple M4 Max", "node": f"{h} ({home}/.cache)"}
             for r, h in enumerate(hosts)]
    request = next(e for e in lines if e["event"] == "request")
    ranks = [{"event": "rank_group", **who, "size": len(hosts), "backend": "ring", "parallel": "tensor",
              "hosts": hosts, "ranks": facts},
             {"event": "rank_timeline", **who, "phase": "warm", "rank": 1,
              "requests": [{k: request[k] for k in ("phase", "index", "kind", "t0", "t_tokenized", "token_times",
                                                    "tokens")} | {"note": f"{hosts[1]}: {home}/x"}]},
             {"event": "comm_profile", **who, "parallel": "tensor", "prompt_tokens": 8, "gen_tokens": 2,
              "method": "mx.distributed all_sum timed", "ranks": [
                  {"rank": r, "steps": [{"step_ns": 2000, "comm_ns": 500, "collectives": 4, "payload_bytes": 2048}],
                   "prefill": {"host": h}} for r, h in enumerate(hosts)]}]
    lines[loaded + 1:loaded + 1] = ranks
    failure = {"event": "failure", **who, "status": "refused", "phase": "warm", "kind": "distributed",
               "reason": f"host {hosts[0]} does not answer: ssh: Could not resolve hostname {HOST}.local ({home})"}
    lines.insert(-2, failure)
    for seq, e in enumerate(lines):
        e["seq"] = seq
    out.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory, fake_dir):
    """The logs of every kind of run, recorded under a home of the planted user's."""
    root = tmp_path_factory.mktemp("share-kinds")
    home = root / "Users" / USER
    models, notes = home / "models", home / "notes"
    models.mkdir(parents=True)
    notes.mkdir()
    fine = models / f"{USER}-finetune.gguf"
    shutil.copy(fake_dir / "fake-b.gguf", fine)
    (home / f"{HOST}-models").mkdir()
    shutil.copy(fake_dir / "fake-b.gguf", home / f"{HOST}-models" / "crash.gguf")
    (notes / f"{USER}.gguf").write_text("not a model\n")
    text = notes / f"{USER}-notes.txt"
    shutil.copy(REPO / "macprof" / "data" / "quality.txt", text)
    env = {"HOME": str(home), "USER": USER, "LOGNAME": USER, "HF_HOME": str(home / ".cache" / "huggingface"),
           "OLLAMA_MODELS": str(home / ".ollama" / "models"), "LLAMA_CACHE": "", "XDG_CACHE_HOME": str(home / ".cache")}
    hub_repo(Path(env["HF_HOME"]) / "hub", f"{USER}/private-GGUF", {"private-Q4_K_M.gguf": fake_dir / "fake-a.gguf"})
    ollama_model(Path(env["OLLAMA_MODELS"]), USER, "private", "latest", fake_dir / "fake-a.gguf")
    message = (f"cannot open {home}/models/{USER}.gguf on {HOST} for {USER} "
               f"(http://{USER}:{SECRET}@127.0.0.1:1/v1, C:\\Users\\{USER}\\x.gguf)")
    small = ["--prompt-tokens", "16", "--gen-tokens", "3", "--reps", "2"]
    out: dict[str, Path] = {}

    # models.toml, in-process: a crash's stderr tail, a refused model, quality on a --text under the home
    toml = home / "models.toml"
    toml.write_text(f'[[models]]\nname = "{USER}-finetune"\nengine = "fake"\npath = "{fine}"\n\n'
                    f'[[models]]\nname = "{USER}-crash"\nengine = "fake"\npath = "{home / f"{HOST}-models" / "crash.gguf"}"\n\n'
                    f'[[models]]\nname = "{USER}-notes"\nengine = "fake"\npath = "{notes / f"{USER}.gguf"}"\n')
    fault = json.dumps({"model": f"{USER}-crash", "kind": "segfault", "after_requests": 1})
    out["in-process"] = home / "config.json"
    macprof("run", "--config", str(toml), "--phases", "warm,quality", "--quality-tokens", "256", "--quality-ctx", "256", "--text", str(text),
            *small, "--log", str(out["in-process"]), env={**env, "MACPROF_TEST_FAULT": fault})

    # references: a hub id and an Ollama name in the user's namespace, a path given with ~
    out["references"] = home / "refs.json"
    macprof("run", f"{USER}/private-GGUF", f"ollama:{USER}/private", f"~/models/{fine.name}", "--engine", "fake",
            "--phases", "warm", *small, "--log", str(out["references"]), env=env)

    # --endpoint with credentials, against a server listing the model's full path
    port = serve.free_port()
    server = subprocess.Popen([sys.executable, str(FAKE_SERVER), "--model", str(home / f"{HOST}-models" / f"{USER}.gguf"),
                               "--port", str(port), "--fail-every", "3", "--message", message])
    try:
        _wait(f"http://127.0.0.1:{port}/v1", server)
        out["endpoint"] = home / "endpoint.json"
        macprof("run", "--endpoint", f"http://{USER}:{SECRET}@127.0.0.1:{port}/v1", "--phases", "warm,concurrency",
                "--concurrency", "2", "--load-requests", "4", *small, "--log", str(out["endpoint"]), env=env)
    finally:
        server.terminate()
        server.wait(10)

    # --serve: macprof starts the server (the stand-in, in llama-cpp-python's place) on ~/models/...
    launcher = root / "serve_fake.py"
    launcher.write_text(
        "import sys\nfrom macprof.run import serve\n"
        f"def command(kind, path, port, *a, **k):\n"
        f"    return ([sys.executable, {str(FAKE_SERVER)!r}, '--model', str(path), '--host', serve.HOST, '--port',\n"
        f"             str(port), '--message', {message!r}], str(path), 'llama_cpp_python')\n"
        "serve.command = command\nfrom macprof.cli import main\nmain(prog_name='macprof')\n")
    out["serve"] = home / "serve.json"
    proc = subprocess.run([sys.executable, str(launcher), "run", "--serve", "llama.cpp", f"~/models/{fine.name}",
                           "--phases", "warm", *small, "--log", str(out["serve"])], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr

    # a distributed group, from its journal
    out["distributed"] = _distributed(out["references"].with_suffix(".journal.jsonl"), home / "group.journal.jsonl",
                                      [f"{USER}@{HOST}.local", "10.0.0.2"], home)
    return {"home": home, "env": env, "logs": out}


def _strings(value, at=""):
    """(place, string) for every string of a JSON value, its keys included."""
    if isinstance(value, str):
        yield at, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield f"{at}/{k} (key)", k
            yield from _strings(v, f"{at}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{at}/{i}")


@pytest.fixture(scope="module")
def shared(logs, tmp_path_factory):
    """Each log shared as its user would, on their machine (their home, user and host name)."""
    out = tmp_path_factory.mktemp("shared")
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(logs["home"]))
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        mp.setenv(var, USER)
    mp.setattr("socket.gethostname", lambda: f"{HOST}.local")
    copies = {}
    try:
        for kind, path in logs["logs"].items():
            r = cli("share", path, "-o", out / f"{kind}.shared.json")
            assert r.exit_code == 0, r.output
            copies[kind] = (out / f"{kind}.shared.json", r.output)
    finally:
        mp.undo()
    return copies


def test_the_planted_values_arrived(logs):
    """The test plants nothing the runs did not record: each secret is in the logs as written."""
    text = "".join(runlog.load(p).to_json().__repr__() for p in logs["logs"].values())
    for planted in (str(logs["home"]), SECRET, f"{USER}/private", f"{HOST}-models", "llama_cpp", "SIGSEGV"):
        assert planted in text, planted
    endpoint = runlog.load(logs["logs"]["endpoint"]).models[0]
    assert endpoint.identity.name.startswith(str(logs["home"]))  # the listed id: the model's full path
    served = runlog.load(logs["logs"]["serve"]).models[0].engine_versions
    assert str(logs["home"]) in served["command"] and sys.executable in served["command"]


def test_no_string_of_a_shared_log_holds_a_path_a_credential_or_a_name(logs, shared):
    home = str(logs["home"])
    user = re.compile(rf"(?<![^\W_]){USER}(?![^\W_])")
    host = re.compile(rf"(?<![^\W_]){HOST}(?![^\W_])", re.IGNORECASE)
    # a path with folders that are not the system's: what is left of one is <path>/NAME
    folders = re.compile(r"(?<![\w.:/<>@-])/(?!(?:usr|sys|proc|dev|etc|System|Library)/)[^\s/<>\"']+/")
    walked, leaks = 0, []
    for kind, (path, printed) in shared.items():
        data = json.loads(path.read_text())
        for at, s in [*_strings(data), *(("printed", line) for line in printed.split("\n")[1:])]:
            walked += 1
            words = re.sub(r"<(user|host|home)>|user names|host names|home-directory paths", "", s)
            if (home in s or SECRET in s or user.search(words) or host.search(words) or folders.search(s)
                    or str(REPO) in s or "\\Users\\" in s):
                leaks.append(f"{kind}: {at}: {s[:200]!r}")
    assert not leaks, "\n".join(leaks[:40])
    assert walked > 5000, walked  # every string of five maximal logs
    print(f"share: {walked} strings walked in {len(shared)} shared logs ({', '.join(shared)})")


def test_what_share_keeps_and_says(shared):
    refs = json.loads(shared["references"][0].read_text())
    assert [m["identity"]["source"] for m in refs["models"]] == [
        {"ref": "<user>/private-GGUF", "store": "hf", "path": None},  # a store's reference: how others find it
        {"ref": "ollama:<user>/private", "store": "ollama", "path": None},
        {"ref": "<path of <user>-finetune>", "store": "path", "path": None}]  # a reference that is a path
    assert all(m["identity"]["path"] is None for m in refs["models"])
    assert refs["models"][0]["identity"]["files"][0]["name"] == "private-Q4_K_M.gguf"  # files stay named
    first = json.loads(shared["in-process"][0].read_text())["models"][0]
    assert first["settings"]["text"] == "<path>/<user>-notes.txt"  # the file name stays, its folders go
    assert first["phases"]["quality"]["text"]["source"] == "<path>/<user>-notes.txt"
    endpoint = json.loads(shared["endpoint"][0].read_text())["models"][0]
    assert endpoint["engine_versions"]["openai-endpoint"].startswith("http://127.0.0.1:")  # less its credentials
    assert endpoint["engine_versions"]["models_listed"] == ["<path>/<user>.gguf"] == [endpoint["identity"]["name"]]
    served = json.loads(shared["serve"][0].read_text())["models"][0]["engine_versions"]["command"]
    assert served.startswith("<path>/python <path>/fake_llama_server.py --model <path>/<user>-finetune.gguf --host")
    group = json.loads(shared["distributed"][0].read_text())["models"][0]
    assert group["settings"]["distributed"]["hosts"] == group["distributed"]["hosts"] == ["<host 1>", "<host 2>"]
    assert all(r["host_id"] is None for r in group["distributed"]["ranks"])
    assert "<host 1> does not answer" in group["failures"][-1]["reason"]
    for kind, words in (("endpoint", "URL credentials"), ("distributed", "distributed host names"),
                        ("in-process", "folders of paths")):
        assert re.search(rf"removed: \d+ occurrence\(s\) of {words}", shared[kind][1]), shared[kind][1]


def test_shared_copies_load_show_and_compare(shared):
    paths = [p for p, _ in shared.values()]
    for p in paths:
        assert runlog.load(p).redacted.by == "macprof share"
        r = cli("show", p)
        assert r.exit_code == 0, r.output
    r = cli("compare", *paths)
    assert r.exit_code == 0, r.output


def test_show_prints_no_credentials(logs):
    r = cli("show", logs["logs"]["endpoint"])
    assert r.exit_code == 0 and "server: http://127.0.0.1:" in r.output and SECRET not in r.output
