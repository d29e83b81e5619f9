"""Every fact declared once, the rest derived (issue 39, item 4): each check here fails on a new
twin, naming it, rather than a test holding two copies equal.

- records: no two records (events included) declare the same fields apart, five or more and most
  of the smaller's, unless one is made from the other (a base; Journals, model/records.py), or
  the pair is ALLOWED here with the reason they only look alike;
- settings: no class written in macprof's sources (its stubs included) declares five settings or
  more as its fields but ``Settings`` itself (the log's record is derived from it: model/log.py,
  and so is the stub mypy reads of it: model/settings_stub.py);
- options: a command's option whose flag is one `run` declares is made from that declaration
  (cli/options.py declared_option), each difference an override with its reason, unless the
  flag means something else there (OTHER_MEANING, with the reason);
- words: no list of words is declared in two modules.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
from pathlib import Path

import importlib
import itertools
import pkgutil

import click

import macprof
from macprof.config.settings import SPECS, RunArgs, ServerArgs, run_flags
from macprof.model.records import Record, derived_from

SOURCES = Path(__file__).resolve().parent.parent / "macprof"
SETTINGS = Path("config/settings.py")
# what mypy reads of the log's settings: generated from the declarations (model/settings_stub.py), held to
# the generator's output by tests/test_model_schema.py, so a copy written by hand cannot hide there
SETTINGS_STUB = Path("model/logged_settings.pyi")

# (command, flag) -> why that command's flag is not the declared one
OTHER_MEANING = {
    ("estimate", "--hosts"): "the number of machines a prediction shares the model over, not the hosts to run on",
    ("bandwidth", "--threads"): "the bandwidth probe's CPU threads, not an engine's",
    ("bandwidth", "--reps"): "the bandwidth probe's repetitions, not measured requests",
    ("models", "--force-overwrite"): "replaces the models.toml --write names, not a run log",
    ("doctor", "--model"): "a model reference whose files doctor checks, not a served model's name",
}


# (the class declaring some fields, the other class declaring them too) -> why they are no twins
ALLOWED = {
    ("macprof.model.conversation.AppStop", "macprof.model.conversation.Turn"):
        "a stop is the turn that did not complete: its app and turn, and whatever of its prompt and requests there was, "
        "each optional (a turn whose template raised has none); a measured turn has all of them",
    ("macprof.model.events.PhaseStart", "macprof.model.events.PhaseEnd"):
        "a phase's two boundaries: each reads the same figures at its own moment",
    ("macprof.model.phases.Failure", "macprof.model.events._RequestHead"):
        "a failure names the request it cut by that request's own fields",
    ("macprof.model.phases.Request", "macprof.model.events._RequestHead"):
        "an item's head names any item a phase announces (a request, a task attempt, a turn's prompt: kind 'task' is "
        "no request's), the key a resume matches; a log's request keeps its own among its figures",
    ("macprof.model.phases.ColdTrial", "macprof.model.phases.ColdSummary"):
        "the summary of each of the trials' spans, under the span's name",
    ("macprof.model.phases.Request", "macprof.model.phases.Metrics"):
        "the summary of each of the requests' figures, under the figure's name",
    ("macprof.model.phases.Summary", "macprof.model.quality.KldSummary"):
        "KLD's own statistics (a mean with its standard error and interval), not a Summary's percentiles",
    ("macprof.model.phases.WarmPhase", "macprof.model.phases.PrefixPhase"):
        "two phases' records, each with its own requests' layout and key order, sharing the parts every phase has",
    ("macprof.model.phases.WarmPhase", "macprof.model.phases.Sweep"):
        "two phases' records, each with its own requests' layout and key order, sharing the parts every phase has",
    ("macprof.model.phases.PrefixPhase", "macprof.model.phases.Sweep"):
        "two phases' records, each with its own requests' layout and key order, sharing the parts every phase has",
    ("macprof.model.log.RunLog", "macprof.model.events.RunStart"):
        "the run's start: its memory is the start's reading and its models the settings asked, where the log's are "
        "the run's readings and results",
    ("macprof.model.log.ModelResult", "macprof.model.events.ModelStart"):
        "the model's start: its memory is the system's before the load, where the log's is the model's own",
}
BASE = {"model", "worker", "seq", "event"}  # every event's (model/event_base.py) and its tag


def _records() -> list[type]:
    for m in pkgutil.walk_packages(macprof.__path__, "macprof."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    found, todo = [], [Record]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted({c for c in found if c.__module__.startswith("macprof.")}, key=lambda c: (c.__module__, c.__qualname__))


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _twins(classes: list[type]) -> dict[tuple[str, str], list[str]]:
    """(declaring class, the other declaring class) -> the fields both declare, for each pair of
    records sharing five fields or more, most of the smaller's, declared apart."""
    fields = {c: [f for f in c.__struct_fields__ if f not in BASE] for c in classes}
    out: dict[tuple[str, str], list[str]] = {}
    for a, b in itertools.combinations(classes, 2):
        apart: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
        for name in set(fields[a]) & set(fields[b]):
            x, y = derived_from(a, name), derived_from(b, name)
            if x is not y:
                apart[tuple(sorted((_name(x), _name(y))))].append(name)  # type: ignore[index]
        smaller = min(len(fields[a]), len(fields[b]))
        for key, names in apart.items():
            if len(names) >= 5 and len(names) >= 0.6 * smaller:
                out[key] = sorted(set(out.get(key, [])) | set(names))
    return out


def test_no_two_records_declare_the_same_fields_apart():
    allowed = {tuple(sorted(k)) for k in ALLOWED}
    found = {k: v for k, v in _twins(_records()).items() if k not in allowed}
    assert found == {}, "\n".join(f"{a} and {b} both declare {', '.join(v)}" for (a, b), v in found.items())
    stale = sorted(allowed - set(_twins(_records())))
    assert stale == [], f"ALLOWED names pairs that are no longer alike: {stale}"


def test_the_records_check_finds_a_twin():
    """Not vacuous: an event that repeats its record's fields, as task_attempt once did, is named;
    one made from it (Journals) is not."""
    from macprof.model.event_base import Event
    from macprof.model.records import Journals
    from macprof.model.tasks import TaskAttempt

    class Repeats(Event):
        KIND = "test_repeats"
        phase: str = ""
        task: str = ""
        attempt: int = 1
        status: str = "ok"
        error: str | None = None
        t0: int | None = None

    class Derived(Event, Journals[TaskAttempt]):
        KIND = "test_derived"
        phase: str = ""

    found = _twins([TaskAttempt, Repeats, Derived])
    assert list(found) == [("macprof.model.tasks.TaskAttempt", f"{__name__}.{Repeats.__qualname__}")]
    assert found[next(iter(found))] == ["attempt", "error", "status", "t0", "task"]
    assert Derived.of(TaskAttempt(task="t", attempt=2), phase="tasks").record() == TaskAttempt(task="t", attempt=2)


# -- settings ------------------------------------------------------------------------------------
def _fields_declared(source: str) -> dict[str, list[str]]:
    """Per class written in ``source``: the names its body declares as fields (annotations)."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            out[node.name] = [n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
                              and isinstance(n.target, ast.Name)]
    return out


def _settings_repeated(sources: dict[Path, str]) -> list[str]:
    names = set(SPECS)
    return [f"{path}: class {cls} declares {len(set(fields) & names)} settings as its fields"
            for path, source in sources.items() for cls, fields in _fields_declared(source).items()
            if len(set(fields) & names) >= 5 and (path, cls) not in ((SETTINGS, "Settings"), (SETTINGS_STUB, "ModelSettings"))]


def _sources() -> dict[Path, str]:
    """macprof's modules and its type stubs."""
    return {p.relative_to(SOURCES): p.read_text(encoding="utf-8")
            for p in sorted([*SOURCES.rglob("*.py"), *SOURCES.rglob("*.pyi")])}


def test_no_class_repeats_the_settings():
    assert _settings_repeated(_sources()) == []


def test_the_settings_check_finds_a_copy():
    """Not vacuous: the hand-written record the log's settings once were is named."""
    copy = "class ModelSettings(Record):\n" + "".join(f"    {name}: int | None = None\n" for name in list(SPECS)[:6])
    assert _settings_repeated({Path("model/log.py"): copy}) == [
        "model/log.py: class ModelSettings declares 6 settings as its fields"]


# -- options -------------------------------------------------------------------------------------
def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def _declared_flags() -> dict[str, str]:
    """Every flag `run` declares -> the setting or run option declaring it."""
    out = {f.metadata["flag"].name: f.name for cls in (RunArgs, ServerArgs) for f in dataclasses.fields(cls)}
    out.update({flag.name: name for name, s in SPECS.items() for flag in s.flags})
    assert set(out) == {flag.name for _, flag, _, _ in run_flags()}
    return out


def _as_declared(option: click.Option, name: str, flag: str) -> list[str]:
    """Where ``option`` differs from the option its declaration makes, beyond its overrides."""
    from macprof.cli.options import declared_option

    fresh = declared_option(name, flag, option.name)(lambda **kw: None).__click_params__[0]  # type: ignore[attr-defined]
    out = []
    # a kind overridden decides how the default reads (a list setting read as one value: its one default)
    skip = set(option.overrides) | ({"default"} if "kind" in option.overrides else set())
    for what in ("help", "default", "show_default", "multiple", "nargs", "is_flag", "metavar"):
        if what not in skip and getattr(option, what) != getattr(fresh, what):
            out.append(f"{what} {getattr(option, what)!r}, declared {getattr(fresh, what)!r}")
    if not {"kind", "choices"} & set(option.overrides) and option.type.to_info_dict() != fresh.type.to_info_dict():
        out.append(f"type {option.type.to_info_dict()}, declared {fresh.type.to_info_dict()}")
    return out


def _hand_written(main: click.Group) -> list[str]:
    from macprof.cli.options import DeclaredOption

    declared = _declared_flags()
    out = []
    for command, cmd in _commands(main):
        if command == "run":  # made from the declarations whole (test_config.py holds it to them)
            continue
        for option in (p for p in cmd.params if isinstance(p, click.Option)):
            flag = next((o for o in option.opts if o in declared), None)
            if flag is None or (command, flag) in OTHER_MEANING:
                continue
            if not isinstance(option, DeclaredOption) or option.declared != declared[flag]:
                out.append(f"{command} {flag}: written by hand, not from the declaration of {declared[flag]}")
            elif option.overrides and not option.why:
                out.append(f"{command} {flag}: overrides {', '.join(option.overrides)} with no reason")
            else:
                out += [f"{command} {flag}: {line}" for line in _as_declared(option, declared[flag], flag)]
    return out


def test_every_command_s_option_of_a_declared_flag_is_the_declaration_s():
    from macprof.cli import main

    assert _hand_written(main) == []
    stale = [f"{command} {flag}" for command, flag in OTHER_MEANING
             if not any(flag in p.opts for c, cmd in _commands(main) if c == command for p in cmd.params)]
    assert stale == []


def test_the_options_check_finds_one_written_by_hand():
    """Not vacuous: `overhead --api` written by hand as it once was, and an override without its
    reason, are named."""
    from macprof.cli.errors import Group
    from macprof.cli.options import DeclaredOption, declared_option

    group = Group()

    @group.command()
    @click.option("--api", type=click.Choice(["completions", "chat"]), default="completions", show_default=True)
    @declared_option("gen_tokens", kind="int", why="one length")
    def overhead(**kw):
        pass

    @group.command()
    @declared_option("reps")
    def other(**kw):
        pass

    reps = other.params[0]
    assert isinstance(reps, DeclaredOption)
    reps.overrides = ("default",)
    assert _hand_written(group) == ["overhead --api: written by hand, not from the declaration of api",
                                    "other --reps: overrides default with no reason"]
    reps.why, reps.help = "a reason", "another help"
    assert _hand_written(group)[1:] == ["other --reps: help 'another help', declared 'Measured requests per phase "
                                        "(per case in a sweep) [5].'"]


# -- words ---------------------------------------------------------------------------------------
def _word_lists(sources: dict[Path, str]) -> list[str]:
    """Lists (tuples, sets) of two or more words assigned at a module's top level, declared with
    the same words in two modules or more."""
    seen = collections.defaultdict(list)
    for path, source in sources.items():
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if (isinstance(value, (ast.Tuple, ast.List, ast.Set)) and len(value.elts) >= 2
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)):
                words = frozenset(e.value for e in value.elts)  # type: ignore[attr-defined]
                seen[words] += [f"{path}:{ast.unparse(t)}" for t in targets]
    return [" and ".join(where) for where in seen.values() if len({w.split(":")[0] for w in where}) > 1]


def test_no_word_list_is_declared_twice():
    assert _word_lists(_sources()) == []


def test_the_words_check_finds_a_copy():
    """Not vacuous: the K/V cache types declared again beside the kvmodel's, as they once were."""
    sources = {Path("measure/kvmodel.py"): 'KV_TYPES = ("f16", "q8_0", "q4_0")\n',
               SETTINGS: 'KV_TYPES = ("f16", "q8_0", "q4_0")  # llama.cpp type_k / type_v\nOTHER = ("a", "b")\n'}
    assert _word_lists(sources) == ["measure/kvmodel.py:KV_TYPES and config/settings.py:KV_TYPES"]


def test_an_option_read_as_one_value_defaults_to_its_setting_s_default():
    """Another command's option of a setting it reads as one value (overhead's --gen-tokens, a
    list in `run`) takes the setting's declared default where it overrides none: `macprof
    overhead` with no --gen-tokens once ran with None ("unsupported operand ... NoneType")."""
    from macprof.cli import main
    from macprof.cli.options import DeclaredOption
    from macprof.config import settings as spec

    checked = 0
    for command in main.commands.values():
        for p in getattr(command, "params", ()):
            if not isinstance(p, DeclaredOption) or p.declared not in spec.SPECS or "default" in p.overrides:
                continue
            want = spec.DEFAULTS[p.declared]
            if want is None or isinstance(want, tuple):  # none declared, or a list the command parses itself
                continue
            assert p.default == want, f"{command.name} {p.opts[0]}: default {p.default!r}, declared {want!r}"
            checked += 1
    assert checked >= 4  # overhead's --gen-tokens, --reps, --ngram; estimate's and inspect's --kv-type
