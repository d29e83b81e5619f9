"""What a log holds must not leak or break what macprof prints: `share` with hostile
identities, model names holding escape sequences and line breaks at every exit (terminal,
tables, markdown, CSV, SVG, progress lines), and a reader that goes away mid-output."""

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from unittest.mock import ANY

import pytest

from macprof.store import runlog
from tests.conftest import FIXTURES, cli as run
from tests.test_run import FAULT_ARGS, macprof

LOGS = FIXTURES / "runlogs"
A, B = LOGS / "tiny-a.json", LOGS / "tiny-b.json"


# -- 7. share: leak nothing, redact only whole tokens ------------------------------------------
def _strings(value):
    """Every string value of a log (keys are the schema's own names)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _identified(tmp_path, user, host, home):
    """tiny-a as recorded on a Mac by ``user`` on ``host``, its name and paths all over it."""
    log = json.loads(A.read_text())
    log.pop("redacted")
    log["machine"].update(chip="Apple M4 Max", host_id="5bce98f7")
    log["bandwidth"]["spec"].update(source="published (M4 Max)")
    first, second = log["models"][:2]
    first["identity"].update(name=f"{user}-finetune", path=f"{home}/models/{user}.gguf")
    second["identity"].update(path=f"{home}/models/q4.gguf")
    first["failures"] = [{"phase": "warm", "status": "error",
                          "reason": f"{home}/models/{user}.gguf: boom in {home}/.cache/x on {host.upper()} "
                                    f"(see {home}ine/notes and {home}/)"}]
    src = tmp_path / "mine.json"
    src.write_text(json.dumps(log))
    return src


IDENTITIES = [
    ("max", "maxs-mbp.local", "/Users/max"),  # "M4 Max" and "maximum.reduce" hold "max", not as the user
    ("M4", "emo", "/data/M4"),  # the chip's own word; a host inside "demo-tiny"; a home outside /Users
    ("home", "user", "/home/home"),  # the words of the labels themselves
]


@pytest.mark.parametrize("user,host,home", IDENTITIES, ids=[i[0] for i in IDENTITIES])
def test_share_leaks_nothing_and_redacts_only_whole_tokens(tmp_path, monkeypatch, user, host, home):
    monkeypatch.setenv("HOME", home)
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, user)
    monkeypatch.setattr("socket.gethostname", lambda: host)
    src = _identified(tmp_path, user, host, home)
    r = run("share", src)
    assert r.exit_code == 0, r.output
    runlog.load(tmp_path / "mine.shared.json")  # a valid run log
    shared = json.loads((tmp_path / "mine.shared.json").read_text())
    user_word = re.compile(rf"(?<![^\W_]){re.escape(user)}(?![^\W_])")
    host_word = re.compile(rf"(?<![^\W_]){re.escape(host.split('.')[0])}(?![^\W_])", re.IGNORECASE)
    printed = r.output.split("\n")[1:]  # after "wrote PATH": the user's own path, on their own terminal
    for text in [*_strings(shared), *printed]:  # the file, its own report included, and what was printed
        if text in ("Apple M4 Max", "published (M4 Max)"):
            continue  # vocabulary (checked below), never the user's
        words = re.sub(r"<(user|host|home)>|user names|host names|home-directory paths", "", text)  # share's own
        assert not user_word.search(words) and not host_word.search(words) and home + "/" not in text, text
    first = shared["models"][0]
    assert first["identity"]["name"] == "<user>-finetune" and first["identity"]["path"] is None
    # a path keeps its file name; its folders go, and say whether they were a home: any user's
    # home is one, /data/M4ine is not (the home /data/M4 is a prefix of it, not its folder)
    other = "<home>" if home.startswith(("/Users/", "/home/")) else "<path>"
    assert first["failures"][0]["reason"] == (f"<path of <user>-finetune>: boom in <path>/x on <host> "
                                              f"(see {other}/notes and <home>/)")
    assert "model path of <user>-finetune" in shared["redacted"]["removed"]
    assert "  removed: model path of <user>-finetune" in r.output
    # over-redaction corrupts: the chip, the methods and the models' own names stay as they are
    assert shared["machine"]["chip"] == "Apple M4 Max" and shared["bandwidth"]["spec"]["source"] == "published (M4 Max)"
    assert shared["bandwidth"]["measured"]["method"] == json.loads(A.read_text())["bandwidth"]["measured"]["method"]
    assert [m["identity"]["name"] for m in shared["models"][1:]] == ["demo-tiny-q4_k_m", "demo-tiny-mlx-f16",
                                                                      "demo-tiny-mlx-8bit"]
    assert not any("<<" in s for s in _strings(shared))  # a label is never scrubbed again


# -- 11. one sanitiser at every exit ------------------------------------------------------------
HOSTILE = {
    "esc": "evil\x1b[31mred\x1b[0m\x1b[2J",
    "osc8": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "title": "\x1b]0;pwned\x07title",
    "bel": "ding\x07dong",
    "cr": "over\rwrite",
    "nl": "fake\n| row | injected |",
    "c1": "csi\x9b31m8bit",
}
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # any control character but the line break


def _named(tmp_path, name):
    log = json.loads(A.read_text())
    log["models"][0]["identity"].update(name=name, path="/tmp/x.gguf")
    log["models"][0]["failures"] = [{"phase": "warm", "status": "error", "reason": f"{name} raised"}]
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(log))
    return p


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The output of each command on the same log with a plain name (computed once)."""
    log, seen = _named(tmp_path_factory.mktemp("plain"), "plain"), {}
    return lambda args: seen.get(args) or seen.setdefault(args, run(*[log if a == "LOG" else a for a in args]))


def _same_lines(tmp_path, plain, name, *args):
    """The command's output with the hostile name, and with a plain one: the same number of
    lines (a line break in a name adds none), and no control character."""
    out, ref = run(*[_named(tmp_path, name) if a == "LOG" else a for a in args]), plain(args)
    assert out.exit_code == ref.exit_code == 0, out.output
    assert not CONTROL.search(out.output), repr(out.output)
    assert out.output.count("\n") == ref.output.count("\n"), out.output
    if "json" not in args:  # JSON carries the raw name, escaped (\u001b); elsewhere whole sequences go
        assert not re.search(r"\[(31|0|2)?[mJ]|\]8;;|evil\.example|\]0;|pwned", out.output), out.output
    return out.output


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("cmd", [("show", "LOG"), ("show", "LOG", "--format", "markdown"),
                                 ("show", "LOG", "--format", "csv"), ("show", "LOG", "--format", "json"),
                                 ("compare", "LOG", B), ("compare", "LOG", B, "--format", "markdown"),
                                 ("compare", "LOG", B, "--format", "csv"), ("share", "LOG")],
                         ids=["show", "show-md", "show-csv", "show-json", "compare", "compare-md", "compare-csv", "share"])
def test_hostile_names_at_every_exit(tmp_path, plain, name, cmd):
    out = _same_lines(tmp_path, plain, name, *cmd)
    if "markdown" in cmd:
        rows = [line for line in out.split("\n") if line.startswith("| ")]
        assert all("| injected" not in r.replace("\\| injected", "") for r in rows)


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_compare_baseline_with_a_hostile_name(tmp_path, name):
    log = _named(tmp_path, name)
    md = run("compare", log, B, "--baseline", name, "--format", "markdown")  # found, and named in the notes
    assert md.exit_code == 0 and not CONTROL.search(md.output)
    assert "Baseline: " in md.output and "\x1b" not in md.output
    missing = run("compare", log, B, "--baseline", "nope")  # the error lists the models, hostile one included
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1 and not CONTROL.search(missing.stderr)


def test_plot_svg_with_hostile_names_is_valid_xml(tmp_path):
    log = json.loads(A.read_text())
    for m, name in zip(log["models"], list(HOSTILE.values()) + ["a $\\frac{$ b", "--><!--"]):
        m["identity"]["name"] = name
    log["machine"]["cpu_model"] = "cpu\x1b]8;;x\x1b\\\x07\r\n"
    (tmp_path / "hostile.json").write_text(json.dumps(log))
    out = tmp_path / "chart.svg"
    r = run("plot", tmp_path / "hostile.json", "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text)
    ET.parse(out)  # raises on invalid XML


def test_progress_lines_with_hostile_names(tmp_path, cache_root):
    """A run's progress lines (plain lines off a terminal): one line per event, whatever the
    model's name holds."""
    (tmp_path / "notes.gguf").write_text("not a model\n")
    toml_name = "".join(f"\\u{ord(c):04x}" if ord(c) < 32 or c in '"\\' else c for c in "".join(HOSTILE.values()))
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "{toml_name}"\nengine = "llama.cpp"\n'
                                          f'path = "{tmp_path / "notes.gguf"}"\n')
    proc = macprof("run", "--config", str(tmp_path / "models.toml"), *FAULT_ARGS, "--log", str(tmp_path / "r.json"),
                   check=False)
    assert proc.returncode == 3  # refused: nothing measured
    for line in proc.stderr.strip().split("\n"):
        assert re.match(r"\[ *\d+\.\ds\] |macprof: error: ", line) and not CONTROL.search(line), repr(line)
    assert "skipped" in proc.stderr and "click" in proc.stderr
    assert not CONTROL.search(proc.stdout) and "| row | injected |" in proc.stdout  # the text stays...
    assert not any(line.startswith("| row") for line in proc.stdout.split("\n"))  # ...on its name's line


# -- 14. a reader that goes away ----------------------------------------------------------------
@pytest.mark.parametrize("args", [("show", A), ("show", A, "--format", "json"), ("compare", A, B),
                                  ("compare", A, B, "--fail-if", "decode:-99%")], ids=["show", "json", "compare", "gate"])
def test_a_closed_pipe_ends_quietly(args):
    """`macprof show LOG | head -1`, with the reader gone before the first line: a real pipe
    whose read end is closed, so every write fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "macprof", *map(str, args)], stdout=write, check=False,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr  # as a shell reports SIGPIPE; a cut-short gate never passes
    assert proc.stderr == ""  # no traceback, no "internal error", no "Exception ignored"


def test_head_reads_one_line():
    """The real thing: the first line arrives, whatever happens to the rest."""
    out = subprocess.run(f"'{sys.executable}' -m macprof show '{A}' | head -1", shell=True, check=False,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("macprof ") and out.stdout.count("\n") == 1 and out.stderr == ""


def test_share_leaves_a_host_name_that_is_a_common_word_in_macprofs_own_messages():
    """Host "vm": telemetry's reason "(a desktop or a VM reports none)" is macprof's wording, not
    the host's name, and stays; the home directory in a library's message still goes."""
    from macprof.store.share import redact

    log = {"models": [{"phases": {"warm": {"telemetry": {"unavailable": {
        "power_source": "no mains supply listed (a desktop or a VM reports none)",
        "power": "cannot load /home/max/lib/libmacmon.dylib"}}}}}],
        "machine": {"hostname_note": "ran on vm"}}
    out, _ = redact(log, [("/home/max", "<home>"), ("max", "<user>"), ("vm", "<host>")])
    unavailable = out["models"][0]["phases"]["warm"]["telemetry"]["unavailable"]
    assert unavailable["power_source"].endswith("(a desktop or a VM reports none)")
    assert unavailable["power"] == "cannot load <path>/libmacmon.dylib"  # its folders in the home go
    assert out["machine"]["hostname_note"] == "ran on <host>"


# -- logs and journals that cannot be read, and what would make one (issue #23, rows 9 and 14) --
def _one_line_exit_2(r, *words):
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output and "internal error" not in r.output, r.output
    assert all(w in r.output for w in words), r.output


def test_a_log_nested_past_the_limit_is_refused_in_one_line(tmp_path):
    """`share` of a log nested 600 deep died in a RecursionError (exit 1); a log or a journal
    line nested past MAX_DEPTH is refused on load, in one line, by every command."""
    from macprof.model.records import MAX_DEPTH

    log = json.loads(A.read_text())
    deep = {}
    node = deep
    for _ in range(600):
        node["a"] = {}
        node = node["a"]
    log["models"][0]["engine_versions"]["deep"] = deep
    (tmp_path / "deep.json").write_text(json.dumps(log))
    for cmd in (["share"], ["show"], ["compare"], ["plot", "-o", tmp_path / "x.svg"]):
        _one_line_exit_2(run(cmd[0], tmp_path / "deep.json", *cmd[1:]), f"nested more than {MAX_DEPTH} deep")
    journal = LOGS / "incomplete.journal.jsonl"
    lines = journal.read_text().splitlines()
    lines[3] = lines[3][:-1] + ', "deep": ' + "[" * 50_000 + "]" * 50_000 + "}"
    (tmp_path / "deep.journal.jsonl").write_text("\n".join(lines) + "\n")
    _one_line_exit_2(run("show", tmp_path / "deep.journal.jsonl"), "line 4", "nested more than")


def test_an_integer_past_64_bits_is_refused_in_one_line(tmp_path):
    """`plot` of a log holding 10^300 died in an OverflowError (matplotlib's C long); no figure
    needs more than 64 bits, and such a log is refused on load."""
    log = json.loads(A.read_text())
    log["models"][0]["phases"]["warm"]["summary"]["decode_tok_s"]["median"] = 10 ** 300
    (tmp_path / "huge.json").write_text(json.dumps(log))
    for cmd in (["plot", "-o", tmp_path / "x.png"], ["show"], ["compare"], ["share"]):
        _one_line_exit_2(run(cmd[0], tmp_path / "huge.json", *cmd[1:]),
                         "/models/0/phases/warm/summary/decode_tok_s/median: an integer of 997 bits")


def test_wrong_typed_journal_fields_are_one_line_naming_the_event_and_field(tmp_path):
    """`show JOURNAL` of a journal with a field of the wrong type (a list for a timestamp, a
    string for a count) raised TypeError from the arithmetic (exit 1); every field of every
    event, given each wrong type in turn, is read or refused in one line naming both."""
    from macprof.errors import MacprofError
    from macprof.render.show import render_show

    lines = (LOGS / "incomplete.journal.jsonl").read_text().splitlines()
    tried, refused = 0, 0
    for i, line in enumerate(lines):
        event = json.loads(line)
        for key in [k for k in event if k != "event"]:
            for wrong in ("x", 1.5, [], {}, True, [["x"]]):
                if type(wrong) is type(event[key]):
                    continue
                tried += 1
                path = tmp_path / f"f{tried}.journal.jsonl"
                path.write_text("\n".join([*lines[:i], json.dumps({**event, key: wrong}), *lines[i + 1:]]) + "\n")
                try:
                    render_show(runlog.load(path), "text")
                except MacprofError as exc:
                    refused += 1
                    assert f"line {i + 1}: {event['event']} event" in str(exc) and key in str(exc), str(exc)
                path.unlink()
    assert tried > 3000 and refused > 1000, (tried, refused)


def test_hosts_past_the_cap_are_refused_before_anything_is_written(tmp_path, fake_dir):
    """`--hosts 70000` built 70,000 ranks and left a journal with no end and no log."""
    from macprof.config.dist import MAX_HOSTS, from_cli
    from macprof.errors import MacprofError

    assert len(from_cli(str(MAX_HOSTS), None, None, None)["hosts"]) == MAX_HOSTS
    for hosts in (str(MAX_HOSTS + 1), "70000", "9" * 5000, ",".join(["10.0.0.1"] * (MAX_HOSTS + 1))):
        with pytest.raises(MacprofError, match=f"at most {MAX_HOSTS}"):
            from_cli(hosts, None, None, None)
    r = run("run", fake_dir / "fake-b.gguf", "--engine", "fake", "--hosts", "70000", "--log", tmp_path / "r.json")
    _one_line_exit_2(r, "--hosts 70000: at most")
    assert list(tmp_path.iterdir()) == []


def test_a_runs_path_that_is_a_file_says_so(tmp_path, fake_dir):
    """"(File exists)" said nothing of what was in the way."""
    from macprof.errors import MacprofError
    from macprof.model.log import RunLog
    from macprof.store.runlog import save

    (tmp_path / "runs").write_text("notes\n")
    r = run("run", fake_dir / "fake-b.gguf", "--engine", "fake", "--log", tmp_path / "runs" / "x.json")
    _one_line_exit_2(r, f"{tmp_path / 'runs'} is a regular file, not a folder")
    with pytest.raises(MacprofError, match="runs is a regular file, not a folder"):
        save(RunLog(), tmp_path / "runs" / "sub" / "x.json")


def test_a_log_its_own_readers_would_refuse_is_never_written(tmp_path):
    """Class item 4 of the second hostile campaign: the log `save` writes is checked against the
    schema that `load` checks, so a value that slipped past every guard (here a negative token
    count) gives one line naming the journal, and no file, instead of a log that every command
    then refuses."""
    from macprof.errors import MacprofError
    from macprof.store import runlog

    good = runlog.load(A)  # migrated to this schema version on load
    runlog.save(good, tmp_path / "good.json")
    assert runlog.load(tmp_path / "good.json").to_json() == {**good.to_json(), "digest": ANY}  # save adds its digest
    # decoding refuses -7 too (the types are the schema): built as code would build it
    m = good.models[0]
    warm = m.phases.warm
    requests = (warm.requests[0].replace(prompt_tokens=-7), *warm.requests[1:])
    bad = good.replace(models=(m.replace(phases=m.phases.replace(warm=warm.replace(requests=requests))), *good.models[1:]))
    with pytest.raises(MacprofError) as caught:
        runlog.save(bad, tmp_path / "bad.json")
    line = str(caught.value)
    assert "\n" not in line and "prompt_tokens" in line and "not written" in line and "journal" in line
    assert not (tmp_path / "bad.json").exists() and not list(tmp_path.glob(".bad.json.*"))
