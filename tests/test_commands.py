"""Nothing a stranger hands over runs code (issue "nothing lost", second round, row 1 and class
item 1): every external command macprof runs, each given hostile values where it takes any.
A value reaches a command line only as a number, an absolute path, a value joined to its
option by "=", a name checked to its kind, something after "--" or after `-c CODE` / `-m
MODULE` (the program's own data), or on stdin; the rest are literal constants. The inventory
at the end fails when a new call site appears without a row here."""

from __future__ import annotations

import ast
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from macprof.config.dist import MAX_HOSTS, Distributed, check_hosts, host_refusal
from macprof.errors import MacprofError
from macprof.model.quality import QualityJob
from macprof.run.job import WorkerJob, decode, encode

HOSTILE_HOSTS = ["-oProxyCommand=touch /tmp/macprof-pwned", "-F/etc/passwd", "--", "a;id", "$(id)", "`id`", "a b",
                 "host\n", "a|b", "user@-oProxyCommand=x", "-user@host", "a/b", "", "..", "fe80::1%eth0", "h" * 254,
                 "-", "a..b", "-host.local"]
GOOD_HOSTS = ["127.0.0.1", "mac-mini.local", "studio", "me@10.0.0.2", "::1", "user.name@host-2.lan", "a_b@h"]
HOSTILE_PATHS = ["-evil.gguf", "--help", "-oProxyCommand=x"]


def _is_data(argv: list[str], value: str) -> bool:
    """Whether ``value`` stands in ``argv`` where no program reads it as an option."""
    for i, arg in enumerate(argv):
        if arg.endswith("=" + value) and arg.startswith("--"):  # --opt=value
            return True
        if arg == value:
            before = argv[:i]
            return ("--" in before or value.startswith("/")
                    or any(a in ("-c", "-m") for a in before[1:2]))  # python -c CODE / -m MODULE ARGS...
    return False


def _capture(monkeypatch, module) -> list[list[str]]:
    calls: list[list[str]] = []

    def fake(cmd, *a, **k):
        calls.append([str(c) for c in cmd])
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(module.subprocess, "run", fake)
    return calls


# -- the hosts: ssh (the preflight) and mlx.launch ------------------------------------------------

@pytest.mark.parametrize("host", HOSTILE_HOSTS)
def test_a_hostile_host_is_refused_in_one_line(host):
    assert host_refusal(host)
    with pytest.raises(MacprofError, match=r"^--hosts\[0\]: "):
        check_hosts("--hosts", [host])


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_a_host_of_each_form_is_let_through(host):
    assert host_refusal(host) is None


def test_more_hosts_than_the_cap_are_refused():
    with pytest.raises(MacprofError, match=f"at most {MAX_HOSTS}"):
        check_hosts("--hosts", ["127.0.0.1"] * (MAX_HOSTS + 1))


def test_ssh_reads_the_host_after_dashdash(monkeypatch):
    from macprof.run import distributed

    calls = _capture(monkeypatch, distributed)
    distributed._ssh_refusal("studio.local")
    (argv,) = calls
    assert argv[0] == "ssh" and argv[-3:] == ["--", "studio.local", "true"]


def test_the_preflight_refuses_a_hostile_host_before_ssh_sees_it(monkeypatch, tmp_path):
    from macprof.config import ModelSpec, Settings
    from macprof.run import distributed

    calls = _capture(monkeypatch, distributed)
    for host in HOSTILE_HOSTS:
        spec = Distributed((host, "127.0.0.1"), "ring", "tensor", None)  # as a tampered journal could hold it
        model = ModelSpec("m", "mlx", tmp_path, None, Settings(distributed=spec))
        assert (distributed.preflight(sys.executable, model) or "").startswith("distributed.hosts: ")
    assert calls == []  # no ssh, no probe


def test_mlx_launch_gets_each_value_joined_to_its_option():
    from macprof.run import distributed

    spec = Distributed(("me@10.0.0.2", "studio"), "ring", "tensor", None)
    argv = distributed.command(sys.executable, spec)
    assert "--hosts=me@10.0.0.2,studio" in argv and "--backend=ring" in argv
    assert argv[argv.index("--") + 1:] == [sys.executable, "-m", "macprof.run.worker"]
    for host in HOSTILE_HOSTS:
        with pytest.raises(MacprofError):
            distributed.command(sys.executable, Distributed((host, "studio"), "ring", "tensor", None))


def test_a_hostile_host_on_the_command_line_or_in_models_toml_runs_nothing(tmp_path, fake_dir):
    from tests.test_run import macprof

    marker = tmp_path / "pwned"
    toml = tmp_path / "models.toml"
    toml.write_text(f'[[models]]\nname = "m"\nengine = "mlx"\npath = "{fake_dir}"\n'
                    f'distributed = {{ hosts = ["-oProxyCommand=touch {marker}", "127.0.0.1"] }}\n')
    for args in (["run", str(fake_dir / "fake-a.gguf"), "--hosts", f"-oProxyCommand=touch {marker},127.0.0.1"],
                 ["run", "--config", str(toml)], ["run", str(fake_dir / "fake-a.gguf"), "--hosts", "70000"]):
        proc = macprof(*args, "--log", str(tmp_path / "x.json"), check=False)
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert "hosts" in line and "Traceback" not in proc.stderr
    assert not marker.exists() and not list(tmp_path.glob("x*"))  # nothing ran, nothing was journaled


# -- the servers --serve starts ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mlx", "llama.cpp", "llama-server"])
@pytest.mark.parametrize("name", HOSTILE_PATHS)
def test_a_served_model_path_is_never_an_option(kind, name, tmp_path, monkeypatch):
    from macprof.run import serve

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(serve.shutil, "which", lambda _: "/usr/local/bin/llama-server")
    model = Path(name)
    (model.mkdir() if kind == "mlx" else model.write_bytes(b"GGUF"))
    argv, served_as, _ = serve.command(kind, model, 8080, 4096, 2)
    path = str(tmp_path / name)
    assert _is_data(argv, path)
    assert not any(a.startswith(name) for a in argv)  # never the relative "-..." form
    if kind == "llama-server":
        assert not argv[argv.index("--alias") + 1].startswith("-") and served_as == argv[argv.index("--alias") + 1]
    if kind == "llama.cpp":
        assert f"--model_alias={Path(name).stem}" in argv


def test_the_llama_server_version_takes_no_value(monkeypatch):
    from macprof.run import serve

    calls = _capture(monkeypatch, serve)
    monkeypatch.setattr(serve.shutil, "which", lambda _: "/opt/llama-server")
    serve._version("llama-server")
    assert calls == [["/opt/llama-server", "--version"]]


def test_the_lifeline_watcher_gets_a_number(monkeypatch):
    from macprof.collect import lifeline

    seen = []
    monkeypatch.setattr(lifeline.subprocess, "Popen", lambda cmd, **k: seen.append(cmd))
    lifeline.watch_group(4242)
    assert seen == [[sys.executable, "-m", "macprof.collect.lifeline", "4242"]]


def test_the_worker_takes_its_job_on_stdin(fake_dir, monkeypatch):
    from macprof.run import watch

    seen = []

    class P:
        pid, stdin = 1, None

    monkeypatch.setattr(watch.subprocess, "Popen", lambda cmd, **k: seen.append(cmd) or P())
    try:
        watch.spawn(sys.executable, WorkerJob(name="-x", engine="fake", path="-evil.gguf", phases=[], settings={}, n_ctx=1))
    except Exception:  # noqa: BLE001 - only the command line matters here
        pass
    assert seen and seen[0][:3] == [sys.executable, "-m", "macprof.run.worker"] and len(seen[0]) == 3


# -- the benchmarks' commands -----------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTILE_PATHS)
def test_llama_bench_gets_an_absolute_model(name, monkeypatch, tmp_path):
    from macprof.bench import fullpath, loop

    monkeypatch.chdir(tmp_path)
    for module, call in ((fullpath, lambda: fullpath._llama_bench(Path("/b/llama-bench"), Path(name), 8, 0, 2, 3)),
                         (loop, lambda: loop._llama_bench(Path("/b/llama-bench"), Path(name), 8, 0, 2))):
        calls = _capture(monkeypatch, module)
        with pytest.raises(Exception):  # the fake prints no JSON: only its command line is looked at
            call()
        argv = calls[0]
        assert argv[argv.index("-m") + 1] == str(tmp_path / name)


def test_the_overhead_runs_name_the_model_as_data(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from macprof.bench import fullpath

    calls = _capture(monkeypatch, fullpath)
    named = SimpleNamespace(name="-m", engine="llama.cpp", source=SimpleNamespace(ref="-evil.gguf"))
    listed = SimpleNamespace(name="--help", engine="llama.cpp", source=None)
    for model in (named, listed):
        with pytest.raises(MacprofError):  # no log was written by the fake: only the command line matters
            fullpath._macprof_run(tmp_path / "models.toml", model, 8, 0, None, 1)
    assert _is_data(calls[0], "-evil.gguf")
    assert "--models=--help" in calls[1] and f"--config={tmp_path / 'models.toml'}" in calls[1]
    calls.clear()
    with pytest.raises(IndexError):  # the fake printed nothing; its argv is read by position (bench/mlx_reference.py)
        fullpath._mlx_reference(Path("-evil"), 8, 0, 1)
    assert _is_data(calls[0], "-evil")


def test_the_probes_get_their_arguments_after_the_code(monkeypatch):
    from macprof.collect import probes

    calls = _capture(monkeypatch, probes)
    with pytest.raises(Exception):  # the fake child printed nothing
        probes.isolated("measure", size_mb=8)
    argv = calls[0]
    assert argv[1] == "-c" and argv[3] == "measure"


def test_the_server_overhead_names_the_server_in_a_config_file(tmp_path):
    from macprof.bench import server

    text = server._toml('x"\n[[models]]\nname = "y')
    import tomllib

    assert tomllib.loads(f"v = {text}")["v"] == 'x"\n[[models]]\nname = "y'  # a value, never TOML of its own


# -- the inventory: every place macprof starts a program -------------------------------------------

CONSTANT = "constant argv"  # macOS collectors: sysctl, system_profiler, ioreg, pmset, python -c CODE
SITES = {  # (module, function) -> the test(s) above, or CONSTANT (checked below: literals only)
    ("bench/fullpath.py", "_macprof_run"): "test_the_overhead_runs_name_the_model_as_data",
    ("bench/fullpath.py", "_llama_bench"): "test_llama_bench_gets_an_absolute_model",
    ("bench/fullpath.py", "_mlx_reference"): "test_the_overhead_runs_name_the_model_as_data",
    ("bench/loop.py", "_llama_bench"): "test_llama_bench_gets_an_absolute_model",
    ("bench/server.py", "_macprof_run"): "test_the_server_overhead_names_the_server_in_a_config_file",
    ("collect/chips.py", "_run"): CONSTANT, ("collect/chips.py", "detect"): CONSTANT,
    ("collect/doctor.py", "_run_command"): CONSTANT, ("collect/doctor.py", "_python"): CONSTANT,
    ("collect/machine.py", "cpu_model"): CONSTANT, ("collect/machine.py", "_darwin_facts"): CONSTANT,
    ("collect/macos.py", "_run"): CONSTANT, ("collect/macos.py", "_python"): CONSTANT,
    ("collect/power_macos.py", "power_source"): CONSTANT,
    ("collect/probes.py", "isolated"): "test_the_probes_get_their_arguments_after_the_code",
    ("collect/system.py", "run_command"): CONSTANT,
    ("engines/llama_cpp_facts.py", "_sysctl"): CONSTANT,
    ("run/checking.py", "_start"): CONSTANT,
    ("run/distributed.py", "preflight"): "test_the_preflight_refuses_a_hostile_host_before_ssh_sees_it",
    ("run/distributed.py", "_ssh_refusal"): "test_ssh_reads_the_host_after_dashdash",
    ("collect/lifeline.py", "watch_group"): "test_the_lifeline_watcher_gets_a_number",
    ("run/serve.py", "_version"): "test_the_llama_server_version_takes_no_value",
    ("run/serve.py", "start"): "test_a_served_model_path_is_never_an_option",
    ("run/watch.py", "spawn"): "test_the_worker_takes_its_job_on_stdin",
}
STARTERS = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_output", "os.system",
            "os.popen", "os.execv", "os.execvp", "os.spawnv", "run_command", "_run", "_run_command"}


def _sites() -> dict[tuple[str, str], list[ast.Call]]:
    root = Path(__file__).resolve().parent.parent / "macprof"
    out: dict[tuple[str, str], list[ast.Call]] = {}
    for path in sorted(root.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and ast.unparse(node.func) in STARTERS:
                        out.setdefault((str(path.relative_to(root)), fn.name), []).append(node)
    return out


def test_every_place_that_starts_a_program_has_its_row():
    sites = _sites()
    missing = sorted(set(sites) - set(SITES))
    assert not missing, f"a new place starts a program: add it to SITES with a test of its hostile values: {missing}"
    assert not set(SITES) - set(sites), "a row of SITES names a place that starts nothing any more"
    names = {n for n in dir(sys.modules[__name__]) if n.startswith("test_")}
    assert {t for t in SITES.values() if t != CONSTANT} <= names
    print(f"\nexternal-command sites: {len(SITES)} ({sum(t != CONSTANT for t in SITES.values())} with hostile-value "
          f"tests, {sum(t == CONSTANT for t in SITES.values())} with constant command lines)")


def test_the_constant_sites_pass_only_literals():
    """Where a call's command is written as a list at the call, every item is a literal (or
    sys.executable): no value from a user, a file or a server can reach it."""
    for site, calls in _sites().items():
        if SITES.get(site) != CONSTANT:
            continue
        for call in calls:
            if call.args and isinstance(call.args[0], ast.List):
                for item in call.args[0].elts:
                    ok = isinstance(item, ast.Constant) or ast.unparse(item) in ("sys.executable", "code", "key")  # key: test_the_sysctl_keys_are_constants
                    assert ok, f"{site}: {ast.unparse(item)} reaches a command line"


def test_the_sysctl_keys_are_constants():
    """llama_cpp_facts._sysctl(key) is called with literal keys only."""
    root = Path(__file__).resolve().parent.parent / "macprof"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("_sysctl", "sysctl or _sysctl") and node.args:
                assert isinstance(node.args[0], ast.Constant), f"{path}: {ast.unparse(node)}"


def test_no_command_goes_through_a_shell():
    root = Path(__file__).resolve().parent.parent / "macprof"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                assert isinstance(node.value, ast.Constant) and node.value.value is False, path


if os.name != "posix":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX command lines")


# -- the worker's job ---------------------------------------------------------------------------
def test_the_worker_job_is_typed_both_ways():
    """The job, and each phase's part of it (its parent's, decoded with the type its registry line
    names: run/phases prepared_of), typed both ways: a mistyped key names its place."""
    import msgspec

    from macprof.run.phases import prepared_of

    part = QualityJob(reference="r", store="/s", missing="r failed")
    job = WorkerJob(name="m", engine="fake", path="/m.gguf", phases=["warm", "batch"], settings={"reps": 2}, n_ctx=640,
                    cases={"batch": [{"id": "b2"}]}, prepared={"quality": msgspec.Raw(msgspec.json.encode(part))})
    assert decode(encode(job)) == job and prepared_of(decode(encode(job)), "quality") == part
    bare = decode(b'{"name":"m","engine":"fake","path":"/m","phases":[],"settings":{},"n_ctx":8}')
    assert bare.prepared == {} and prepared_of(bare, "quality") is None
    for bad, where in (('"n_ctx":"8"', "$.n_ctx"), ('"n_ctx":8,"seed":1', "seed"), ('"n_ctx":8,"prepared":[]',
                                                                                   "$.prepared")):
        with pytest.raises(msgspec.ValidationError, match=re.escape(where)):
            decode(('{"name":"m","engine":"fake","path":"/m","phases":[],"settings":{},' + bad + "}").encode())
    mistyped = decode(b'{"name":"m","engine":"fake","path":"/m","phases":[],"settings":{},"n_ctx":8,'
                      b'"prepared":{"quality":{"store":3}}}')
    with pytest.raises(msgspec.ValidationError, match=re.escape("$.store")):
        prepared_of(mistyped, "quality")
