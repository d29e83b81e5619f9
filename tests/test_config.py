"""models.toml: good files parse into frozen settings; each bad file gives one clear line
naming the file, the entry and the key, exit code 2, no traceback."""

import dataclasses
import re
import sys

import click
import pytest
from click.testing import CliRunner

from macprof import config
from macprof.cli import main
from macprof.errors import MacprofError

GOOD = """
[settings]
gen_tokens = 64

[[models]]
name = "a"
engine = "llama.cpp"
path = "model.gguf"
quant = "Q4_K_M"
reps = 3

[models.linux]
reps = 2

[models.macos]
reps = 7

[[models]]
name = "b"
engine = "mlx"
path = "mlxdir"
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "mlxdir").mkdir()
    return tmp_path


def test_good_file(folder):
    p = folder / "models.toml"
    p.write_text(GOOD)
    cfg = config.load(p, {"prompt_tokens": 100, "prefix_tokens": 90})
    a, b = cfg.models
    assert a.path == folder / "model.gguf" and a.quant == "Q4_K_M"
    assert a.settings.gen_tokens == 64 and a.settings.prompt_tokens == 100
    assert a.settings.reps == {"linux": 2, "darwin": 7}.get(sys.platform, 3)
    assert b.settings.reps == 5  # built-in default
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.settings.reps = 1
    assert cfg.select(["b"]) == (b,)


def test_demo_paths_resolve(folder, monkeypatch, tmp_path):
    monkeypatch.setenv("MACPROF_CACHE", str(tmp_path / "cache"))
    p = folder / "models.toml"
    p.write_text('[[models]]\nname = "d"\nengine = "mlx"\npath = "demo:small/mlx-4bit"\n')
    (m,) = config.load(p).models
    assert m.demo == "small/mlx-4bit" and m.path == tmp_path / "cache" / "demo" / "mlx" / "demo-small-4bit"


M = '[[models]]\nname = "a"\nengine = "llama.cpp"\npath = "model.gguf"\n'
BAD = [
    ("invalid toml", "[[models]\nname=", "invalid TOML"),
    ("no models", "[settings]\nreps = 2\n", "no models"),
    ("unknown key", M + "promt_tokens = 5\n", "models[0] (\"a\"): unknown key 'promt_tokens'"),
    ("unknown top key", M + "[extra]\nx = 1\n", "unknown top-level key 'extra'"),
    ("wrong type", M + 'reps = "five"\n', "models[0] (\"a\"): key 'reps' must be a positive integer, 1 to 2^63 - 1, not 'five'"),
    ("bool for int", M + "reps = true\n", "key 'reps' must be a positive integer, 1 to 2^63 - 1, not True"),
    ("negative", M + "gen_tokens = -3\n", "key 'gen_tokens' must be a positive integer, 1 to 2^63 - 1, not -3"),
    ("zero timeout", M + "timeout = 0\n", "key 'timeout' must be a number of seconds, more than 0, at most 86400, not 0"),
    ("bad phase", M + 'phases = ["hot"]\n', "key 'phases' must be a non-empty list of distinct phases"),
    ("missing path", '[[models]]\nname = "a"\nengine = "mlx"\n', "models[0] (\"a\"): missing key 'path'"),
    ("missing file", M.replace("model.gguf", "nope.gguf"), "key 'path': "),
    ("duplicate name", M + M.replace("model.gguf", "mlxdir").replace("llama.cpp", "mlx"),
     "models[1] (\"a\"): duplicate name 'a' (also models[0])"),
    ("same model twice", M + M.replace('"a"', '"b"'), "models[1] (\"b\"): key 'path': the same model is already listed as 'a'"),
    ("unknown engine", M.replace("llama.cpp", "vllm"), "key 'engine': unknown engine 'vllm'"),
    ("directory for a gguf", M.replace("model.gguf", "mlxdir"), "mlxdir is a directory; llama.cpp needs a .gguf file"),
    ("file for an mlx dir", M.replace("llama.cpp", "mlx"), "model.gguf is a file; mlx needs a model directory"),
    ("directory for the fake engine", M.replace("model.gguf", "mlxdir").replace("llama.cpp", "fake"),
     "mlxdir is a directory; fake needs a .gguf file"),
    ("prefix >= prompt", M + "prompt_tokens = 64\nprefix_tokens = 64\n", "prefix_tokens (64) must be smaller than prompt_tokens (64)"),
    ("settings wrong type", "[settings]\nreps = 1.5\n" + M, "[settings]: key 'reps' must be a positive integer, 1 to 2^63 - 1, not 1.5"),
    ("platform table type", M + "linux = 3\n", "key 'linux' must be a table of settings"),
    ("bad demo ref", M.replace("model.gguf", "demo:huge/q4"), "key 'path': unknown demo model 'huge/q4'"),
    ("negative depth", M + "depths = [0, -5]\n", "key 'depths' must be a non-empty list of distinct integers >= 0, each 0 to 2^63 - 1, not [0, -5]"),
    ("zero batch", M + "batches = [0, 2]\n", "key 'batches' must be a non-empty list of distinct positive integers"),
    ("repeated grid value", M + "prompt_grid = [128, 128]\n", "key 'prompt_grid' must be a non-empty list of distinct"),
    ("unknown shape", M + 'shapes = ["essay"]\n', "key 'shapes' must be a non-empty list of distinct shapes from rag, chat, code"),
    ("depth phase, no depths", M + 'phases = ["depth"]\n', "phase 'depth' needs depths"),
    ("batch phase, no sizes", M + 'phases = ["batch"]\n', "phase 'batch' needs batch sizes"),
]


@pytest.mark.parametrize("label,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_files(folder, label, text, message):
    p = folder / "models.toml"
    p.write_text(text)
    with pytest.raises(MacprofError) as err:
        config.load(p)
    assert message in str(err.value)
    assert str(p) in str(err.value) and "\n" not in str(err.value)
    result = CliRunner().invoke(main, ["run", "--config", str(p)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output and "Traceback" not in result.output


def test_engine_not_installed(folder, monkeypatch):
    from macprof import engines

    monkeypatch.setattr(engines, "is_installed", lambda name: False)
    p = folder / "models.toml"
    p.write_text(M)
    with pytest.raises(MacprofError, match=r"models\[0\] \(\"a\"\): key 'engine': 'llama.cpp' is not installed: pip install llama-cpp-python"):
        config.load(p)


def test_missing_config_file(tmp_path):
    result = CliRunner().invoke(main, ["run", "--config", str(tmp_path / "none.toml")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_bad_command_line_value(folder):
    p = folder / "models.toml"
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), "--reps", "0"])
    assert result.exit_code == 2 and "command line: key 'reps' must be a positive integer, 1 to 2^63 - 1, not 0" in result.output


@pytest.mark.parametrize("args,message", [
    (["--depth", "0,-1"], "command line: key 'depths' must be a non-empty list of distinct integers >= 0"),
    (["--batch", "1,x"], "expected an integer, got '1,x'"),
    (["--shape", "novel"], "command line: key 'shapes' must be a non-empty list of distinct shapes"),
    (["--prompt-tokens", "128,0"], "command line: key 'prompt_grid' must be a non-empty list of distinct positive"),
])
def test_bad_sweep_options(folder, args, message):
    p = folder / "models.toml"
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_an_unset_prefix_follows_the_prompt(folder):
    """--prompt-tokens 128 on the default config: the prefix is the defaults' share of it (448 of
    512), not 448, and that is the value the run log records."""
    from macprof.model.log import ModelSettings

    s = config.settings_for(None, {"prompt_tokens": 128})
    assert (s.prompt_tokens, s.prefix_tokens) == (128, 112)
    assert ModelSettings.from_json(config.settings_dict(s)).prefix_tokens == 112  # what facts.py writes
    assert config.settings_for(None, {}).prefix_tokens == 448 and config.settings_for(None, {"prompt_tokens": 2}).prefix_tokens == 1
    p = folder / "models.toml"
    p.write_text("[settings]\nprompt_tokens = 64\n" + M)
    assert config.load(p).models[0].settings.prefix_tokens == 56
    resumed = config.settings_from_dict({"prompt_tokens": 128, "prefix_tokens": 100})  # a journal's settings, set there
    assert config.merge(resumed, {"prompt_tokens": 128}).prefix_tokens == 100


@pytest.mark.parametrize("where", ["command line", "models.toml"])
def test_a_prefix_set_too_large_is_still_refused(folder, where):
    p = folder / "models.toml"
    p.write_text(M + ("prefix_tokens = 448\n" if where == "models.toml" else ""))
    args = ["--prompt-tokens", "128"] + (["--prefix-tokens", "448"] if where == "command line" else [])
    result = CliRunner().invoke(main, ["run", "--config", str(p), *args])
    assert result.exit_code == 2 and "prefix_tokens (448) must be smaller than prompt_tokens (128)" in result.output


def test_sweep_settings_from_toml(folder):
    p = folder / "models.toml"
    p.write_text("[settings]\nphases = [\"grid\", \"depth\", \"batch\"]\nprompt_grid = [64, 256]\n"
                 "depths = [0, 1024]\nbatches = [1, 4]\nshapes = [\"rag\"]\n" + M)
    s = config.load(p).models[0].settings
    assert (s.prompt_grid, s.depths, s.batches, s.shapes) == ((64, 256), (0, 1024), (1, 4), ("rag",))
    assert config.settings_from_dict(config.settings_dict(s)) == s


def test_help_imports_no_engine():
    import subprocess

    code = ("import sys; from click.testing import CliRunner; from macprof.cli import main; "
            "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
            "print(any(m in sys.modules for m in ('llama_cpp', 'mlx', 'mlx_lm', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- one declaration per setting (macprof/config/settings.py) ---------------------------------
def test_the_declarations_hold_together():
    """Each setting's phases are phases, a setting set by another's flag names one that has a
    flag, every flag of `run` is declared once and placed in --help's order."""
    from macprof.config import settings as settings_spec
    from macprof.config.settings import POSITIVE_INT, Spec, declaration_errors

    assert declaration_errors() == []
    with pytest.MonkeyPatch.context() as mp:  # not vacuous: a broken declaration is named
        mp.setitem(settings_spec.SPECS, "x", Spec(POSITIVE_INT, "", phases=("hot",), set_by="prompt_grid"))
        assert declaration_errors() == ["x: phases ('hot',) not all in " + str(settings_spec.PHASES),
                                        "x: set_by 'prompt_grid', a setting with no flag", "x: a number with no unit"]


def test_the_declarations_import_no_command_line_library():
    """A worker imports config, and with it the declarations: no click (nor an engine) comes along."""
    import subprocess

    code = "import sys, macprof.config; print(sorted(m for m in ('click', 'numpy', 'llama_cpp', 'mlx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_run_s_options_are_the_declared_ones_in_order():
    """`macprof run`'s options are exactly the declared flags (settings' and run options'), in
    the declared order: none written by hand beside them; --help lists them group by group
    (HELP_GROUPS), each group's flags together and in their declaration order."""
    from macprof.cli import run
    from macprof.config.settings import HELP_GROUPS, SPECS, RunArgs, ServerArgs, run_flags

    options = [p for p in run.params if isinstance(p, click.Option)]
    assert [p.name for p in options] == [param for param, _, _, _ in run_flags()]
    groups = [flag.group for _, flag, _, _ in run_flags()]
    assert [HELP_GROUPS.index(g) for g in groups] == sorted(HELP_GROUPS.index(g) for g in groups)
    declared = [f.metadata["flag"].name for cls in (RunArgs, ServerArgs) for f in dataclasses.fields(cls)]
    declared += [flag.name for s in SPECS.values() for flag in s.flags]
    for group in HELP_GROUPS:
        listed = [p.opts[0] for p, g in zip(options, groups) if g == group]
        assert listed and listed == [name for name in declared if name in listed], group
    assert [p.opts[0] for p in options][:5] == ["--engine", "--config", "--models", "--phases", "--preset"]


def test_an_undeclared_option_stops_the_command_rather_than_passing_as_another():
    """An option added to `run` without a declaration cannot reach the run as a server option
    (as `**extra` once let it): the command stops, in one line, naming it."""
    from macprof.cli.errors import Group
    from macprof.cli.options import run_options

    reached = []
    group = Group()

    @group.command()
    @click.option("--stray", help="declared nowhere")
    @run_options
    def cmd(**kwargs):
        reached.append(kwargs)

    result = CliRunner().invoke(group, ["cmd", "--stray", "1"])
    assert result.exit_code == 1 and not reached
    assert "stray declared neither as a setting nor as a run option" in result.output and result.output.count("\n") == 1


def test_run_receives_typed_groups(folder, monkeypatch):
    """The values of run's options arrive as RunArgs, ServerArgs and the settings they set."""
    from macprof.cli import serve as cli_serve

    seen = {}

    def stop(ctx, config_path, server, overrides, other, recorded):
        seen.update(config_path=config_path, server=server, overrides=overrides)
        raise MacprofError("stopped here")

    monkeypatch.setattr(cli_serve, "measured_models", stop)
    p = folder / "models.toml"
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), "--prompt-tokens", "64,128", "--slo", "ttft:2s",
                                       "--hosts", "2", "--text", str(p), "--model", "m"])
    assert result.exit_code == 2 and "stopped here" in result.output
    o = seen["overrides"]
    assert (o["prompt_tokens"], o["prompt_grid"], o["phases"]) == (64, [64, 128], ["grid"])
    assert o["slo_ttft"] == 2.0 and "slo_itl" not in o and o["text"] == str(p.resolve())
    assert o["distributed"] == {"hosts": ["127.0.0.1", "127.0.0.1"]} and o["reps"] is None
    assert seen["server"].served_model == "m" and not seen["server"].named and seen["config_path"] == p


def test_each_flag_sets_only_its_own_settings():
    """A flag's reader sets its setting, and those declared ``set_by`` it (--prompt-tokens:
    prompt_tokens and prompt_grid; --slo: slo_ttft and slo_itl; --preset: its values), nothing else."""
    from macprof.config.settings import PRESETS, SPECS, command_line_settings

    examples = {"ints": [1, 2], "rates": [0.5, 1.0], "int": 2, "float": 1.5, "switch": True, "file": __file__,
                "choice": None, "str": None}
    words = {"--phases": "warm", "--shape": "rag", "--hosts": "2", "--reference": "a", "--slo": "ttft:1s,itl:50ms",
             "--kv-type": "q8_0", "--backend": "ring", "--parallel": "pipeline", "--app-order": "random", "--draft": "ngram",
             "--speculative-impl": "both", "--preset": "llama-bench"}
    for name, s in SPECS.items():
        if not s.flags:
            continue
        values = {f.param: words.get(f.name, examples[f.kind]) for f in s.flags}
        out = command_line_settings(values)
        own = {name} | {n for n, other in SPECS.items() if other.set_by == name}
        own |= set(PRESETS[values["preset"]]) if name == "preset" else set()  # a preset sets its values
        assert out and set(out) <= own, (name, out)
        assert all(v is not None for v in out.values()), (name, out)


def _wrong_kind(check):
    """A value of the wrong kind for a check: a number for text, text for anything else."""
    return 5 if check.types is str else "x"


@pytest.mark.parametrize("key", sorted(__import__("macprof.config.settings").config.settings.TOML_KEYS))
def test_every_setting_models_toml_may_set_is_checked(folder, key):
    """models.toml's validation covers every declared setting: a value of the wrong kind is one
    line naming the file, the entry and the key, with the declaration's words."""
    from macprof.config.settings import SPECS

    bad = _wrong_kind(SPECS[key].check)
    p = folder / "models.toml"
    p.write_text(M + f"{key} = {bad!r}\n".replace("'", '"'))
    with pytest.raises(MacprofError) as err:
        config.load(p)
    assert str(err.value) == f"{p}: models[0] (\"a\"): key '{key}' must be {SPECS[key].check.what}, not {bad!r}"


def test_a_models_toml_entry_knows_exactly_the_settings_declared_for_it():
    """An entry's setting keys are those declared ``toml``: one declared otherwise is an unknown key there."""
    from macprof.config.settings import SPECS, TOML_KEYS

    assert {k for k in config._MODEL_KEYS if k in SPECS} == TOML_KEYS == {k for k, s in SPECS.items() if s.toml}


# a bad value for each setting's flag, by the kind of flag (a switch has none); a text flag's own
_BAD_BY_KIND = {"int": "-1", "float": "-1", "ints": "-1", "rates": "0", "choice": "bogus", "file": "/no/such/text.txt"}
_BAD_TEXT = {"--phases": "hot", "--shape": "novel", "--hosts": "-oProxyCommand=x", "--reference": " ", "--slo": "e2e:1s", "--draft": " "}


def _setting_flag_cases():
    from macprof.config.settings import SPECS

    cases = []
    for name, s in SPECS.items():
        for f in s.flags:
            if f.kind != "switch":
                cases.append((f.name, _BAD_TEXT[f.name] if f.kind == "str" else _BAD_BY_KIND[f.kind], name))
    return cases


@pytest.mark.parametrize("flag,value,name", _setting_flag_cases(), ids=[c[0] for c in _setting_flag_cases()])
def test_a_bad_value_for_any_setting_s_flag_exits_2(folder, flag, value, name):
    """Every declared flag refuses a bad value with exit 2 and no traceback: click's message
    for what click reads, else one line naming the option or the setting."""
    p = folder / "models.toml"
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), "--log", str(folder / "run.json"), flag, value])
    assert not (folder / "run.json").exists(), "a bad value started a run"
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert flag in result.output or name in result.output, result.output
    if "Usage:" not in result.output:  # not click's own message: the project's one line
        assert result.output.count("\n") == 1 and result.output.startswith("macprof: error: ")


# -- issue 37 (rows 8 and 13, class 4): every number is bounded where it is declared ----------
def _numeric_settings():
    """(setting, is a list, integer?) of every setting whose check holds numbers."""
    from macprof.config.settings import SPECS

    out = []
    for name, s in SPECS.items():
        node = s.check.schema.get("items", s.check.schema)
        if node.get("type") in ("integer", "number"):
            out.append((name, "items" in s.check.schema, node["type"] == "integer"))
    return out


_OUT_OF_RANGE = {"integer": [99999999999999999999, 2 ** 63, -(2 ** 63) - 1],
                 "number": [float("inf"), float("-inf"), float("nan"), 10 ** 400]}


@pytest.mark.parametrize("name,listed,integer", _numeric_settings(), ids=[c[0] for c in _numeric_settings()])
def test_every_number_setting_refuses_what_a_log_cannot_hold(folder, name, listed, integer):
    """An integer past 64 bits, an infinite or NaN float: refused in models.toml in one line
    naming the file, the entry and the key (``--seed 99999999999999999999`` made a log `show`
    refuses, ``--temperature inf`` a worker's TypeError and no log)."""
    from macprof.config.settings import SPECS

    for bad in _OUT_OF_RANGE["integer" if integer else "number"]:
        value = [bad] if listed else bad
        with pytest.raises(MacprofError) as err:
            config.check_value("models.toml: models[0]", name, value)
        assert str(err.value).startswith(f"models.toml: models[0]: key '{name}' must be ") and "\n" not in str(err.value)
        assert SPECS[name].check.bounds and SPECS[name].check.bounds in str(err.value)
    p = folder / "models.toml"
    text = {float("inf"): "inf", float("nan"): "nan"}
    bad = _OUT_OF_RANGE["integer" if integer else "number"][0]
    shown = text.get(bad, repr(bad))
    p.write_text(M + f"{name} = {'[' + shown + ']' if listed else shown}\n")
    result = CliRunner().invoke(main, ["run", "--config", str(p)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"key '{name}' must be" in result.output


@pytest.mark.parametrize("flag,value,key", [
    ("--temperature", "inf", "temperature"), ("--temperature", "nan", "temperature"),
    ("--temperature", "1e-320", "temperature"), ("--temperature", "1000", "temperature"),
    ("--timeout", "inf", "timeout"), ("--timeout", "nan", "timeout"), ("--timeout", "1e9", "timeout"),
    ("--delay", "inf", "delay"), ("--load-seconds", "inf", "load_seconds"), ("--rate", "inf", "rates"),
    ("--slo", "ttft:1e400s", "slo_ttft"), ("--seed", "99999999999999999999", "seed"),
    ("--reps", "18446744073709551616", "reps"), ("--prompt-tokens", "99999999999999999999", "prompt_tokens"),
    ("--depth", "0,99999999999999999999", "depths"), ("--draft-tokens", "100000", "draft_tokens"),
])
def test_an_out_of_range_option_is_one_line(folder, flag, value, key):
    """Issue 37 row 8: the values that were accepted and left no log (or one `show` refuses)
    are refused before anything runs, in one line naming the setting and its range."""
    p = folder / "models.toml"
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), "--log", str(folder / "run.json"), flag, value])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"macprof: error: command line: key '{key}' must be ")
    assert not (folder / "run.json").exists()


def test_every_number_option_says_its_range_in_its_help():
    """The range a check holds is in the flag's help, from the same declaration (and in the schema)."""
    from macprof.config.settings import SPECS, run_flags

    helps = {flag.name: help for _, flag, help, _ in run_flags()}
    for name, _, _ in _numeric_settings():
        for flag in SPECS[name].flags:
            bounds = SPECS[name].check.bounds
            assert bounds in helps[flag.name] or flag.help and "at most" in flag.help, (flag.name, helps[flag.name])
    assert "(0 (greedy), or 0.001 to 100)" in helps["--temperature"] and "(0 to 2^63 - 1)" in helps["--seed"]
    assert "more than 0, at most 86400 s" in helps["--timeout"] and "each 1 to 64" in helps["--draft-tokens"]


@pytest.mark.parametrize("gen, ks, message", [
    (9, "8", "draft_tokens 8 is more than a round can draft with gen_tokens 9 (at most gen_tokens - 2 = 7"),
    (128, "4,100", "key 'draft_tokens' must be a non-empty list of distinct positive integers, each 1 to 64"),
    (2, "1", "gen_tokens 2 leaves no token to draft"),
])
def test_draft_tokens_past_a_round_s_room_are_refused(folder, gen, ks, message):
    """Issue 37 row 13: ``--draft-tokens 100000`` was accepted (the case labelled k100000,
    predicted at it and the context sized for it, while no round drafted more than 7): k is at
    most what a round can draft, gen_tokens - 2, and 64; in models.toml as on the command line."""
    p = folder / "models.toml"
    p.write_text(M + f"gen_tokens = {gen}\ndraft_tokens = [{ks}]\nphases = [\"speculative\"]\ndraft = \"ngram\"\n")
    with pytest.raises(MacprofError, match=re.escape(message)):
        config.load(p)
    p.write_text(M)
    result = CliRunner().invoke(main, ["run", "--config", str(p), "--phases", "speculative", "--draft", "ngram",
                                       "--gen-tokens", str(gen), "--draft-tokens", ks])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and message in result.output, result.output
    assert config.settings_for(None, {"phases": ["speculative"], "gen_tokens": 9, "draft_tokens": [7]}).draft_tokens == [7]


@pytest.mark.parametrize("args, message", [
    (["--path", "speculative", "--draft", "ngram", "--draft-tokens", "100000"], "not in the range 1<=x<=64"),
    (["--path", "speculative", "--draft", "ngram", "--draft-tokens", "8", "--gen-tokens", "8"],
     "overhead: --draft-tokens 8 is more than a round can draft with --gen-tokens 8"),
    (["--pairs", "99999999999999999999"], "not in the range 1<=x<=9223372036854775807"),
])
def test_overhead_options_are_bounded_too(args, message):
    """The benchmark's own options (no setting) are bounded by the same constants."""
    result = CliRunner().invoke(main, ["overhead", "demo:tiny/q8_0", *args])
    assert result.exit_code == 2 and message in result.output, result.output
