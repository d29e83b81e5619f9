"""Every setting declared once: the fields of ``Settings`` are the declarations. A field's
name, type and default are the dataclass's; its metadata (``setting(...)``) holds the rest:
the check a value must pass (with the "must be ..." text and the JSON Schema of what a log may
hold), the help, the unit, the phases it applies to, whether models.toml and the command line
may set it, its command-line flags and how their values read as settings, and how the run log
records it, its place in --help and what it is to `macprof share`. The options of `macprof run`
that are no setting are declared here too, as the fields of ``RunArgs`` and ``ServerArgs``.

Derived from these declarations: the click options of `macprof run` and another command's
options of the same flags (macprof/cli/options.py), models.toml's validation (``check_value``,
macprof/config/__init__.py), the settings the command line sets (``command_line_settings``), the
phases sweep and server options ask for alone (``implied_phases``), the run log's record of a
model's settings (model/log.py ModelSettings) and its settings object of the JSON Schema
(``settings_schema``; tests/test_model_schema.py holds the checked-in schema to it).

Nothing here imports click, an engine adapter or numpy: a worker imports this module with macprof/config/__init__.py.
"""

from __future__ import annotations

import re
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Literal

from macprof.cases import SHAPES
import macprof.phases
from macprof.config.dist import BACKENDS, LINK_GBS_MAX, PARALLEL, Distributed, finite
from macprof.config.dist import from_cli as _distributed_from_cli
from macprof.config.dist import partial as _distributed_table
from macprof.engines import APIS
from macprof.errors import MacprofError
from macprof.measure.words import KV_TYPES

PHASES = macprof.phases.NAMES  # every phase, in run order, as macprof/phases.py declares them
DEFAULT_PHASES = macprof.phases.DEFAULTS
MODEL_ENGINES = ("llama.cpp", "mlx", "fake")  # engines a MODEL argument may name (openai: --endpoint)
# phases a server can run when none are asked for: a cold start is --serve's start-up, and
# recorded as such (a running server's model cannot be unloaded over its API)
ENDPOINT_PHASES = ("warm", "prefix")


# -- checks: what a valid value is, in Python, in words and in the run log's JSON Schema ----
# Every number is bounded where it is declared: an integer within 64 bits (what a run log holds:
# a larger --seed made a log `show` refuses), a float finite (--timeout inf left no log, a NaN
# passes every comparison) and within the setting's own documented range. The range is said in
# the error, in the flag's help (``setting_flags``) and in the schema.
INT_MAX = 2 ** 63 - 1  # a signed 64-bit integer
SECONDS_MAX = 86_400  # a day: the most of any duration setting (a request's timeout, a cool-down, a level, an SLO)
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.001, 100  # below, logits / T overflow (1e-320: inf); above, every token alike
DRAFT_TOKENS_MAX = 64  # tokens drafted per round (llama.cpp's server drafts 16 at most by default, mlx-lm 2)
RATE_MAX = 10_000  # requests per second of an open-loop level


@dataclass(frozen=True)
class Check:
    types: type | tuple[type, ...]  # what models.toml (or the command line) may give; a list is stored as a tuple
    test: Callable[[Any], bool]
    what: str  # "... must be WHAT, not VALUE"
    schema: dict  # the JSON Schema of a valid value (a log also holds the default: null, or an empty list)
    choices: tuple[str, ...] = ()  # a value (or each item) is one of these
    finish: Callable[[str, Any], Any] | None = None  # the checked value as merged (a distributed table)
    bounds: str = ""  # a number's range in words, said in the flag's help


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _most(maximum: float) -> str:
    return "2^63 - 1" if maximum == INT_MAX else f"{maximum:g}"


def _int_at_least(minimum: int, what: str, maximum: int = INT_MAX) -> Check:
    bounds = f"{minimum} to {_most(maximum)}"
    return Check(int, lambda v: minimum <= v <= maximum, f"{what}, {bounds}",
                 {"type": "integer", "minimum": minimum, "maximum": maximum}, bounds=bounds)


def _number(what: str, minimum: float = 0, exclusive: bool = True, maximum: float = SECONDS_MAX) -> Check:
    """A finite number above ``minimum`` (or from it), at most ``maximum``."""
    bound = "exclusiveMinimum" if exclusive else "minimum"
    bounds = f"more than {minimum:g}, at most {_most(maximum)}" if exclusive else f"{minimum:g} to {_most(maximum)}"
    return Check((int, float), lambda v: finite(v) and (v > minimum if exclusive else v >= minimum) and v <= maximum,
                 f"{what}, {bounds}", {"type": "number", bound: minimum, "maximum": maximum}, bounds=bounds)


def _one_of(choices: tuple[str, ...]) -> Check:
    return Check(str, lambda v: v in choices, f"one of {', '.join(choices)}", {"enum": list(choices)}, choices)


def _distinct(items: list, test: Callable[[Any], bool]) -> bool:
    return bool(items) and all(test(x) for x in items) and len(set(items)) == len(items)


def _names(choices: tuple[str, ...], what: str) -> Check:
    return Check(list, lambda v: _distinct(v, lambda x: x in choices), f"a non-empty list of distinct {what} from "
                 f"{', '.join(choices)}", {"type": "array", "items": {"enum": list(choices)}}, choices)


def _ints(minimum: int, maximum: int = INT_MAX) -> Check:
    what = "positive integers" if minimum == 1 else f"integers >= {minimum}"
    bounds = f"each {minimum} to {_most(maximum)}"
    return Check(list, lambda v: _distinct(v, lambda x: _is_int(x) and minimum <= x <= maximum),
                 f"a non-empty list of distinct {what}, {bounds}",
                 {"type": "array", "items": {"type": "integer", "minimum": minimum, "maximum": maximum}}, bounds=bounds)


POSITIVE_INT = _int_at_least(1, "a positive integer")
SECONDS = _number("a number of seconds")
TEMPERATURE = Check(
    (int, float), lambda v: v == 0 or finite(v) and TEMPERATURE_MIN <= v <= TEMPERATURE_MAX,
    f"a temperature, 0 (greedy), or {TEMPERATURE_MIN:g} to {TEMPERATURE_MAX:g}",
    {"type": "number", "minimum": 0, "maximum": TEMPERATURE_MAX},
    bounds=f"0 (greedy), or {TEMPERATURE_MIN:g} to {TEMPERATURE_MAX:g}")
RATES = Check(list, lambda v: bool(v) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and finite(x)
                                              and 0 < x <= RATE_MAX for x in v),
              f"a non-empty list of requests per second, each more than 0, at most {_most(RATE_MAX)}",
              {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "maximum": RATE_MAX}},
              bounds=f"each more than 0, at most {_most(RATE_MAX)}")
FLAG = Check(bool, lambda v: True, "true or false", {"type": "boolean"})
_TEXT = {"type": "string"}
_DISTRIBUTED = Check((dict, Distributed), lambda v: True, "a table", {  # checked key by key in config/dist.py
    "type": "object", "required": ["hosts"],
    "properties": {"hosts": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                   "backend": {"enum": list(BACKENDS)}, "parallel": {"enum": list(PARALLEL)},
                   "link_gbs": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": LINK_GBS_MAX}}},
    finish=_distributed_table)


# -- command-line flags ---------------------------------------------------------------------
Kind = Literal["str", "int", "float", "ints", "rates", "choice", "file", "path", "switch", "flag", "pair", "many"]


@dataclass(frozen=True)
class Flag:
    """One click option. ``kind`` says how click reads it (macprof/cli/options.py): str, int, float;
    ints / rates (comma-separated); choice (of ``choices``, or the setting's check's); file (an
    existing file), path; switch (--x/--no-x, None when not given); flag (is_flag); pair
    (two values); many (repeatable)."""

    decl: str  # "--prompt-tokens", or "--drop-cache/--no-drop-cache"
    kind: Kind = "str"
    dest: str | None = None  # click's parameter name [the flag's: --prompt-tokens, prompt_tokens; a run option's: its field]
    help: str | None = None  # [the setting's help]
    choices: tuple[str, ...] = ()
    default: Any = None
    show_default: bool = False
    metavar: str | None = None
    group: str | None = None  # a run option's place in --help (HELP_GROUPS); a setting's flags take the setting's

    @property
    def name(self) -> str:
        return self.decl.split("/")[0]

    @property
    def param(self) -> str:
        """click's parameter name: ``dest``, else the flag's (--prompt-tokens: prompt_tokens)."""
        return self.dest or self.name.lstrip("-").replace("-", "_")


Logged = Literal["required", "always", "added"]


@dataclass(frozen=True)
class Spec:
    """What a Settings field declares beside its name, type and default."""

    check: Check
    help: str  # the flag's help (str.format fields: HELP_FIELDS, each setting's default...), or what it is
    unit: str | None = None
    phases: tuple[str, ...] = ()  # the phases it applies to; () for every phase
    selects: bool = False  # given on the command line without --phases, it asks for its phases alone
    toml: bool = True  # models.toml may set it ([settings], a model, its platform table)
    flags: tuple[Flag, ...] = ()  # the command-line flags that set it
    read: Callable[..., dict] | None = None  # the flags' values (in order) -> settings [{name: value}]
    set_by: str | None = None  # set by that setting's flags (--prompt-tokens sets prompt_grid)
    logged: Logged = "added"  # required by the log's schema; always written; or absent from older logs
    # its flags' place in --help (HELP_GROUPS) [the first of its phases]
    group: str | None = None
    # what a string value is to `macprof share` (a word of model/kind.py, which this layer does not
    # import; tests/test_share_kinds.py holds it to them) [a word of its choices: vocabulary; a file: path]
    kind: str | None = None

    @property
    def help_group(self) -> str | None:
        return self.group or (self.phases[0] if self.phases else None)


def setting(default: Any, check: Check, help: str, **spec: Any) -> Any:
    """A Settings field: its default, and the rest of its declaration as the field's metadata.
    Typed Any, as dataclasses.field is, so that the field keeps its own annotation."""
    return field(default=default, metadata={"spec": Spec(check, help, **spec)})


def _words(name: str) -> Callable[[str | None], dict]:
    """A comma-separated list of words (--phases, --shape)."""
    return lambda v: {name: [x.strip() for x in v.split(",") if x.strip()] if v else None}


def _levels(name: str) -> Callable[[list | None], dict]:
    """A list of integers or numbers; an empty one is not given (--depth "")."""
    return lambda v: {name: v or None}


def _grid(scalar: str, grid: str) -> Callable[[list | None], dict]:
    """A list of lengths: its first is the length every other phase uses; two or more are a grid."""
    return lambda v: {scalar: v[0] if v else None, grid: v if v and len(v) > 1 else None}


def parse_slo(text: str) -> dict:
    """``ttft:1s,itl:100ms`` -> {"slo_ttft": 1.0, "slo_itl": 0.1}; a bare number is seconds."""
    out = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"(ttft|itl)\s*[:=]\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ms|s)?", part, re.IGNORECASE)
        if not m:
            raise MacprofError(f"--slo: {part!r} is not ttft:DURATION or itl:DURATION (e.g. ttft:1s,itl:100ms)")
        value = float(m.group(2)) / (1000.0 if (m.group(3) or "s").lower() == "ms" else 1.0)
        if value <= 0:
            raise MacprofError(f"--slo: {part!r}: the limit must be positive")
        out[f"slo_{m.group(1).lower()}"] = value
    return out


_GRID = ("grid",)
_QUALITY = ("quality",)
_LOAD = ("concurrency",)
_CHAT = ("conversation",)
APP_ORDERS = ("round-robin", "random")
_TASKS = ("tasks",)
_SPEC = ("speculative",)
SPECULATIVE_IMPLS = ("macprof", "native", "both")
# Named sets of setting values (`--preset NAME`): the command line's flags given beside it win.
# llama-bench: llama.cpp's Apple Silicon discussion's protocol (`llama-bench -p 512 -n 128`): its
# pp512 and tg128 tests apart, at depth 0, 5 repetitions each (the bench phase). Threads, flash
# attention and GPU offload stay the engine's defaults, which are llama-bench's own (threads: the
# fastest cores; flash attention: auto; every layer offloaded), and the log records each as resolved.
PRESETS: dict[str, dict[str, Any]] = {
    "llama-bench": {"phases": ["bench"], "prompt_tokens": 512, "gen_tokens": 128, "reps": 5},
}


@dataclass(frozen=True)
class Settings:
    """One model's settings. Field order is the run log's key order (ModelSettings)."""

    phases: tuple[str, ...] = setting(
        DEFAULT_PHASES, _names(PHASES, "phases"), logged="required", group="phases", flags=(Flag("--phases"),), read=_words("phases"),
        help="Comma-separated phases: {phase_names} [{phases}; with sweep options, just the sweeps].")
    prompt_tokens: int = setting(
        512, POSITIVE_INT, "Prompt length in tokens [{prompt_tokens}]; a list (128,512,2048) makes a grid with --gen-tokens.",
        unit="tokens", logged="required", group="requests", flags=(Flag("--prompt-tokens", "ints"),), read=_grid("prompt_tokens", "prompt_grid"))
    gen_tokens: int = setting(
        128, POSITIVE_INT, "Generated tokens per request, EOS ignored [{gen_tokens}] (a conversation's reply ends at EOS or here); "
        "a list (16,256) makes a grid.",
        unit="tokens", logged="required", group="requests", flags=(Flag("--gen-tokens", "ints"),), read=_grid("gen_tokens", "gen_grid"))
    prefix_tokens: int = setting(
        448, POSITIVE_INT, "Shared prefix length for the prefix phase [{prefix_tokens}; unset, "
        "{prefix_tokens}/{prompt_tokens} of the prompt length].",
        unit="tokens", phases=("prefix",), logged="required", flags=(Flag("--prefix-tokens", "int"),))
    reps: int = setting(5, POSITIVE_INT, "Measured requests per phase (per case in a sweep) [{reps}].",
                        unit="requests", logged="required", group="requests", flags=(Flag("--reps", "int"),))
    cold_trials: int = setting(3, POSITIVE_INT, "Fresh-process cold starts per model [{cold_trials}].", unit="trials",
                               phases=("cold",), logged="required", flags=(Flag("--cold-trials", "int"),))
    threads: int | None = setting(None, POSITIVE_INT, "Engine threads [engine default: physical cores for llama.cpp].",
                                  unit="threads", logged="always", group="engine", flags=(Flag("--threads", "int"),))
    timeout: float = setting(300.0, SECONDS, "Per-request timeout in seconds [{timeout}].", unit="s", logged="required",
                             group="requests", flags=(Flag("--timeout", "float"),))
    delay: float = setting(0.0, _number("a number of seconds", exclusive=False),
                           "Cool-down seconds before each trial [{delay}].", unit="s", logged="always",
                           group="requests", flags=(Flag("--delay", "float"),))
    drop_cache: bool = setting(
        False, FLAG, "Evict the model's files from the page cache before each cold trial (where the OS allows).",
        phases=("cold",), logged="always", flags=(Flag("--drop-cache/--no-drop-cache", "switch"),))
    force: bool = setting(False, FLAG, "Load a model even when it plainly cannot fit in memory.", logged="always",
                          group="engine", flags=(Flag("--force/--no-force", "switch"),))
    # sweeps (macprof/cases.py): grid of lengths, named shapes, KV depths, batch sizes
    prompt_grid: tuple[int, ...] = setting((), _ints(1), "The grid's prompt lengths (--prompt-tokens with two or more).",
                                           unit="tokens", phases=_GRID, selects=True, set_by="prompt_tokens")
    gen_grid: tuple[int, ...] = setting((), _ints(1), "The grid's generated lengths (--gen-tokens with two or more).",
                                        unit="tokens", phases=_GRID, selects=True, set_by="gen_tokens")
    shapes: tuple[str, ...] = setting(
        (), _names(tuple(SHAPES), "shapes"), "Named workload shapes for the grid: {shape_names} (comma-separated).",
        phases=_GRID, selects=True, flags=(Flag("--shape"),), read=_words("shapes"))
    depths: tuple[int, ...] = setting(
        (), _ints(0), "KV-cache depths: decode after the cache already holds d tokens, e.g. 0,1024,4096.", unit="tokens",
        phases=("depth",), selects=True, flags=(Flag("--depth", "ints"),), read=_levels("depths"))
    batches: tuple[int, ...] = setting(
        (), _ints(1), "Batch sizes decoded together, e.g. 1,2,4,8.", unit="sequences", phases=("batch",), selects=True,
        flags=(Flag("--batch", "ints"),), read=_levels("batches"))
    kv_type: str = setting(
        "f16", _one_of(KV_TYPES), "K/V cache type: llama.cpp type_k/type_v (with flash attention), MLX kv_bits 8/4 "
        "[{kv_type}].", group="engine", flags=(Flag("--kv-type", "choice"),))
    # sharded over an MLX distributed group (macprof/config/dist.py)
    distributed: Distributed | None = setting(
        None, _DISTRIBUTED, "The MLX distributed group each model is sharded over: hosts, backend, parallel, link_gbs.",
        read=lambda *values: {"distributed": _distributed_from_cli(*values)}, group="distributed", flags=(
            Flag("--hosts", help="Shard each model over an MLX distributed group launched by mlx.launch: one host per "
                                 "rank, comma-separated (127.0.0.1,127.0.0.1: two local ranks), or N for N local ranks."),
            Flag("--backend", "choice", choices=BACKENDS, help="MLX distributed backend [{backend}]."),
            Flag("--parallel", "choice", choices=PARALLEL, help="tensor or pipeline parallel [{parallel}]."),
            Flag("--link-gbs", "float", help="The link's bandwidth for the group's prediction, GB/s "
                                             "[the communication pass's measured time] (more than 0, at most "
                                             f"{LINK_GBS_MAX:g}).")))
    # the quality phase (run/phases/quality.py): tokens scored, in chunks of quality_ctx; the
    # reference model's name (None: the run's highest-precision model); the text (None: the shipped one)
    quality_tokens: int = setting(2048, POSITIVE_INT, "quality: tokens scored, in whole chunks [{quality_tokens}].",
                                  unit="tokens", phases=_QUALITY, flags=(Flag("--quality-tokens", "int"),))
    quality_ctx: int = setting(
        512, Check(int, lambda v: 4 <= v <= INT_MAX and v % 2 == 0, f"an even integer, 4 to {_most(INT_MAX)}",
                   {"type": "integer", "minimum": 4, "maximum": INT_MAX}, bounds=f"4 to {_most(INT_MAX)}"),
        "quality: chunk length; its second half is scored [{quality_ctx}].", unit="tokens", phases=_QUALITY,
        flags=(Flag("--quality-ctx", "int"),))
    reference: str | None = setting(
        None, Check(str, lambda v: bool(v.strip()), "a model name", _TEXT),
        "quality: the model the others are compared with [the highest-precision one].", phases=_QUALITY,
        kind="model name", flags=(Flag("--reference"),))
    text: str | None = setting(
        None, Check(str, lambda v: bool(v.strip()), "the path of a UTF-8 text file", _TEXT),
        "quality: a UTF-8 text file to score [the text shipped with macprof].", phases=_QUALITY,
        flags=(Flag("--text", "file"),), read=lambda v: {"text": str(Path(v).resolve()) if v else None})
    # the speculative phase (run/phases/speculative.py): the draft (a model reference, resolved by
    # the parent as MODEL is, or ngram: prompt lookup), the draft lengths swept, the n-gram size
    draft: str | None = setting(
        None, Check(str, lambda v: bool(v.strip()), "a model reference (as MODEL takes) or ngram", _TEXT),
        "speculative: the draft model (any reference MODEL takes) or ngram (prompt lookup).", phases=_SPEC,
        kind="model reference", flags=(Flag("--draft"),))
    draft_tokens: tuple[int, ...] = setting(
        (1, 2, 4, 8), _ints(1, DRAFT_TOKENS_MAX), "speculative: tokens drafted per round, each less than "
        "--gen-tokens - 1 (a round drafts no more: the first token is the prefill's, every round ends with the "
        "target's own); a list is a sweep [{draft_tokens}].",
        unit="tokens", phases=_SPEC, flags=(Flag("--draft-tokens", "ints"),), read=_levels("draft_tokens"))
    ngram: int = setting(2, POSITIVE_INT, "speculative with --draft ngram: the longest n-gram looked up [{ngram}].",
                         unit="tokens", phases=_SPEC, flags=(Flag("--ngram", "int"),))
    # whose speculative decoding: macprof's loop, the engine's own (mlx-lm's draft model,
    # llama-cpp-python's prompt lookup; refused with the engine's reason elsewhere), or both side by side
    speculative_impl: str = setting(
        "macprof", _one_of(SPECULATIVE_IMPLS), "speculative: macprof's loop, the engine's own (native: mlx-lm's "
        "draft model, llama-cpp-python's prompt lookup) or both, alternated on the same prompts [{speculative_impl}].",
        phases=_SPEC, flags=(Flag("--speculative-impl", "choice"),))
    # the concurrency phase against a server (macprof/run/phases/serving.py): closed-loop client
    # counts, open-loop arrival rates (requests/s), requests and seconds per level (0: automatic),
    # and the SLOs goodput is judged by (seconds; None: not judged)
    concurrency: tuple[int, ...] = setting(
        (), _ints(1), "Closed-loop levels against a server: concurrent clients, e.g. 1,2,4,8.", unit="clients",
        phases=_LOAD, selects=True, flags=(Flag("--concurrency", "ints"),), read=_levels("concurrency"))
    rates: tuple[float, ...] = setting(
        (), RATES, "Open-loop levels: seeded Poisson arrivals, requests/s.", unit="requests/s", phases=_LOAD, selects=True,
        flags=(Flag("--rate", "rates"),), read=_levels("rates"))
    load_requests: int = setting(0, _int_at_least(0, "an integer (0: automatic)"),
                                 "Requests per concurrency level [2 x level, at least --reps].", unit="requests",
                                 phases=_LOAD, flags=(Flag("--load-requests", "int"),))
    load_seconds: float = setting(120.0, SECONDS, "Time limit per concurrency level [{load_seconds}].", unit="s",
                                  phases=_LOAD, flags=(Flag("--load-seconds", "float"),))
    slo_ttft: float | None = setting(
        None, SECONDS, "Goodput limits for the concurrency phase, e.g. ttft:1s,itl:100ms.", unit="s", phases=_LOAD,
        flags=(Flag("--slo"),), read=lambda v: parse_slo(v) if v else {})
    slo_itl: float | None = setting(None, SECONDS, "The goodput limit on inter-token latency (--slo itl:...).", unit="s",
                                    phases=_LOAD, set_by="slo_ttft")
    # the conversation phase (run/phases/conversation.py): seeded dialogues rendered through the
    # chat template, the cache as the previous turn left it; an agent's tool results between turns;
    # several apps (system prompts) taking turns on one engine
    turns: int = setting(10, POSITIVE_INT, "conversation: turns per conversation [{turns}].", unit="turns",
                         phases=_CHAT, selects=True, flags=(Flag("--turns", "int"),))
    turn_tokens: int = setting(64, POSITIVE_INT, "conversation: tokens of each user message [{turn_tokens}].",
                               unit="tokens", phases=_CHAT, flags=(Flag("--turn-tokens", "int"),))
    system_tokens: int = setting(128, POSITIVE_INT, "conversation: tokens of each app's system prompt [{system_tokens}].",
                                 unit="tokens", phases=_CHAT, flags=(Flag("--system-tokens", "int"),))
    tool_tokens: int = setting(
        0, _int_at_least(0, "an integer (0: a chat, no tool results)"),
        "conversation: an agent's tool result of this many tokens after each reply [{tool_tokens}: a chat].",
        unit="tokens", phases=_CHAT, flags=(Flag("--tool-tokens", "int"),))
    apps: int = setting(1, POSITIVE_INT, "conversation: apps taking turns on the engine, each its own system prompt "
                                         "and conversation [{apps}].", unit="apps", phases=_CHAT,
                        flags=(Flag("--apps", "int"),))
    app_order: str = setting("round-robin", _one_of(APP_ORDERS), "conversation: the order apps take turns in "
                                                                 "({app_orders}) [{app_order}].",
                             phases=_CHAT, flags=(Flag("--app-order", "choice"),))
    serve_slots: int = setting(1, POSITIVE_INT, "conversation: with --serve mlx, the conversations mlx_lm.server's "
                                                "prompt cache holds (its --prompt-cache-size) [{serve_slots}].",
                               unit="conversations", phases=_CHAT, flags=(Flag("--serve-slots", "int"),))
    chat_template: str | None = setting(
        None, Check(str, lambda v: bool(v.strip()), "the path of a Jinja2 chat template file", _TEXT),
        "conversation, tasks: a Jinja2 chat template file [the model's own; macprof's fallback form where it has "
        "none]; refused where a server applies its own (tasks through a server, --api chat).",
        phases=_CHAT + _TASKS, flags=(Flag("--chat-template", "file"),),
        read=lambda v: {"chat_template": str(Path(v).resolve()) if v else None})
    # the tasks phase (run/phases/tasks.py; the task file: docs/tasks.md): right answers, EOS ends a reply
    tasks: str | None = setting(
        None, Check(str, lambda v: bool(v.strip()), "the path of a JSONL task file", _TEXT),
        "tasks: a JSONL task file (docs/tasks.md) [the task set shipped with macprof].", phases=_TASKS,
        flags=(Flag("--tasks", "file"),), read=lambda v: {"tasks": str(Path(v).resolve()) if v else None})
    attempts: int = setting(1, POSITIVE_INT, "tasks: attempts per task; a failed one is retried with the checker's "
                            "message as the next user turn [{attempts}].", unit="attempts", phases=_TASKS,
                            flags=(Flag("--attempts", "int"),))
    temperature: float = setting(0.0, TEMPERATURE,
                                 "tasks: sampling temperature of the retries, the first attempt staying greedy (0: "
                                 "greedy, every attempt) [{temperature}].",
                                 unit="logit scale", phases=_TASKS, flags=(Flag("--temperature", "float"),))
    seed: int = setting(0, _int_at_least(0, "an integer"), "tasks: the sampled retries' seed: each retry's own "
                        "is derived from it, the task and the attempt, and logged [{seed}].",
                        unit="seed", phases=_TASKS, flags=(Flag("--seed", "int"),))
    # the preset the command line named (its values are set as if given, PRESETS), for the log
    preset: str | None = setting(
        None, _one_of(tuple(PRESETS)), "A named set of settings, each overridden by its own flag given beside it: "
        "{presets}.", toml=False, group="phases", flags=(Flag("--preset", "choice"),))


def spec(f: Field) -> Spec:
    return f.metadata["spec"]


SPECS: dict[str, Spec] = {f.name: spec(f) for f in fields(Settings)}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Settings)}
TOML_KEYS = frozenset(name for name, s in SPECS.items() if s.toml)
TUPLE_KEYS = frozenset(name for name, s in SPECS.items() if s.check.types is list)


def check_value(where: str, key: str, value: Any) -> Any:
    """``value`` for the setting ``key``, as stored (a list as a tuple), or one line naming
    ``where`` and the key: "key 'reps' must be a positive integer, not 0"."""
    check = SPECS[key].check
    ok = not (isinstance(value, bool) and check.types is not bool) and isinstance(value, check.types) and check.test(value)
    if not ok:
        raise MacprofError(f"{where}: key '{key}' must be {check.what}, not {value!r}")
    if check.finish is not None:
        return check.finish(where, value)
    return tuple(value) if key in TUPLE_KEYS else value


# -- the command line -----------------------------------------------------------------------
def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


HELP_FIELDS = {**{name: _shown(v) for name, v in DEFAULTS.items()}, "phase_names": ",".join(PHASES),
               "presets": "; ".join(f"{name} ({', '.join(f'{k} {_shown(tuple(v) if isinstance(v, list) else v)}' for k, v in values.items())})"
                                    for name, values in PRESETS.items()),
               "shape_names": ", ".join(SHAPES), "backend": Distributed.backend, "parallel": Distributed.parallel,
               "app_orders": ", ".join(APP_ORDERS)}


def setting_flags() -> list[tuple[str, Flag, str, tuple[str, ...]]]:
    """(click parameter, flag, help, choices) of every setting's flag, in declaration order; a
    number's help ends with its range, from its check."""
    out = []
    for s in SPECS.values():
        for flag in s.flags:
            flag = replace(flag, group=flag.group or s.help_group)
            text = flag_help(s, flag)
            if s.check.bounds and not flag.help:
                text = f"{text.rstrip('.')} ({s.check.bounds}{' ' + s.unit if s.unit in UNITS_SAID else ''})."
            out.append((flag.param, flag, text, flag_choices(s, flag)))
    return out


def flag_help(s: Spec, flag: Flag) -> str:
    """A setting's flag's help, its defaults filled in (without its range)."""
    return (flag.help or s.help).format(**HELP_FIELDS)


def flag_choices(s: Spec, flag: Flag) -> tuple[str, ...]:
    return flag.choices or (s.check.choices if flag.kind == "choice" else ())


UNITS_SAID = ("s", "tokens")  # units a range in the help names (a range of "attempts" reads as well without)


def command_line_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings the command line's flags set (None: not given), read from their values by
    click parameter name. A setting whose flags are not all in ``values`` is left out."""
    out: dict[str, Any] = {}
    for name, s in SPECS.items():
        if s.flags and all(f.param in values for f in s.flags):
            given = [values[f.param] for f in s.flags]
            out.update(s.read(*given) if s.read else {name: given[0]})
    for key, value in PRESETS.get(out.get("preset") or "", {}).items():
        if out.get(key) is None:  # a flag given beside the preset wins
            out[key] = value
    return out


def implied_phases(given: dict[str, Any], phases_given: bool, serving: bool, resumed: bool) -> list[str] | None:
    """The phases options given without --phases ask for, or None. Sweep options run only the
    sweeps they ask for, as llama-bench runs only its tests (--turns: only the conversation); a server's load levels run only the
    concurrency phase, and a server alone warm and prefix; a bare --resume of a server run
    (``resumed``) keeps the phases its journal records."""
    if phases_given:
        return None
    asked = list(dict.fromkeys(p for name, s in SPECS.items() if s.selects and given.get(name) for p in s.phases))
    if not resumed and "concurrency" in asked:
        return ["concurrency"]
    if not resumed and serving:
        return list(ENDPOINT_PHASES)
    return asked or None


# -- the options of `macprof run` that are no setting ------------------------------------------
def run_option(value: Any, decl: str, help: str, kind: Kind = "str", **flag: Any) -> Any:
    """A RunArgs / ServerArgs field: its value when not given, and its flag as the metadata (a
    ServerArgs flag's place in --help is the server's)."""
    return field(default=value, metadata={"flag": Flag(decl, kind, help=help, **{"group": "server", **flag})})


@dataclass(frozen=True)
class RunArgs:
    """What to measure and where the log goes."""

    engine: str | None = run_option(None, "--engine", "Engine for the MODEL arguments [from the format: GGUF -> "
                                    "llama.cpp, MLX directory -> mlx].", "choice", choices=MODEL_ENGINES, group="models")
    config_path: Path = run_option(Path("models.toml"), "--config", "models.toml listing the models to measure (with MODEL "
                                   "arguments: only its [settings], when given).", "path", default="models.toml",
                                   show_default=True, group="models")
    names: tuple[str, ...] = run_option((), "--models", "Only these model names (repeat or comma-separate).", "many",
                                        group="models")
    log_path: Path | None = run_option(None, "--log", "Run log path [runs/<UTC time>-<host id>.json].", "path",
                                       group="output")
    resume: Path | None = run_option(None, "--resume", "Continue an interrupted run from its journal (what it measured is "
                                     "kept; same config and options).", "file", group="output")
    force_overwrite: bool = run_option(False, "--force-overwrite", "Replace a run log (and its journal) already at --log.",
                                       "flag", group="output")

    @property
    def model_names(self) -> list[str]:
        return [n.strip() for name in self.names for n in name.split(",") if n.strip()]


@dataclass(frozen=True)
class ServerArgs:
    """A local server measured as a model (macprof/cli/serve.py)."""

    endpoint: str | None = run_option(None, "--endpoint", "A running local server to measure as a model: its OpenAI base "
                                      "URL, e.g. http://127.0.0.1:8080/v1 (Ollama: http://127.0.0.1:11434 with --api ollama).")
    served_model: str | None = run_option(None, "--model", "With --endpoint: the model name to request [the first it lists].")
    api: str | None = run_option(None, "--api", "With --endpoint: the server's API [completions].", "choice",
                                 choices=APIS)
    serve: tuple[str, str] | None = run_option(None, "--serve", "Start mlx_lm.server, llama-cpp-python's server or llama.cpp's "
                                               "llama-server (from PATH) on MODEL on a free loopback port, measure it, stop "
                                               "it.", "pair", metavar="mlx|llama.cpp|llama-server MODEL")
    in_process: bool = run_option(False, "--in-process", "With --serve: also measure the same model in-process, for the "
                                  "server's overhead per token.", "flag")

    @property
    def named(self) -> bool:
        """Whether a server is measured (--endpoint or --serve)."""
        return bool(self.endpoint or self.serve)


def flag_of(cls: type, name: str) -> Flag:
    """The flag of a RunArgs / ServerArgs field (its name, for a message)."""
    return next(f.metadata["flag"] for f in fields(cls) if f.name == name)


# The groups `macprof run --help` lists its options in, in this order; within a group, the
# options keep their declaration order (a setting's group: its own, else its first phase's).
HELP_GROUPS = ("models", "phases", "requests", "grid", "depth", "batch", "prefix", "cold", "engine", "output",
               "distributed", "speculative", "quality", "server", "concurrency", "conversation", "tasks")


def run_flags() -> list[tuple[str, Flag, str, tuple[str, ...]]]:
    """(dest, flag, help, choices) of every option of `macprof run`, in the order --help lists
    them: by HELP_GROUPS, then as declared (a flag in no group comes last, never missing:
    declaration_errors names it)."""
    declared = [(f.name, f.metadata["flag"], f.metadata["flag"].help, f.metadata["flag"].choices)
                for cls in (RunArgs, ServerArgs) for f in fields(cls)] + setting_flags()
    rank = {name: i for i, name in enumerate(HELP_GROUPS)}
    return sorted(declared, key=lambda d: rank.get(d[1].group or "", len(rank)))  # sorted is stable: declaration order


def run_groups(values: dict[str, Any]) -> tuple[RunArgs, ServerArgs, dict[str, Any]]:
    """click's values of `macprof run`'s options -> the typed groups and the settings they set.
    A value that no declaration claims is refused: it cannot fall into a group unseen."""
    groups = []
    claimed: set[str] = set()
    for cls in (RunArgs, ServerArgs):
        names = [f.name for f in fields(cls)]
        claimed.update(names)
        groups.append(cls(**{n: values[n] for n in names if n in values}))
    settings_dests = {flag.param for _, flag, _, _ in setting_flags()}
    unclaimed = sorted(set(values) - claimed - settings_dests)
    if unclaimed:
        raise TypeError(f"macprof run: option(s) {', '.join(unclaimed)} declared neither as a setting nor as a run option "
                        f"(macprof/config/settings.py)")
    run, server = groups
    assert isinstance(run, RunArgs) and isinstance(server, ServerArgs)
    return run, server, command_line_settings({k: v for k, v in values.items() if k in settings_dests})


# -- the run log's JSON Schema ------------------------------------------------------------------
def _nullable(node: dict) -> dict:
    node = dict(node)
    if "type" in node:
        kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
        node["type"] = [*kinds, "null"] if "null" not in kinds else kinds
    else:
        node["enum"] = [*node["enum"], None]
    return node


def settings_schema() -> dict:
    """The JSON Schema of a model's settings in the run log: each declared setting, nullable
    where its default is None; required where the declaration says every log has it."""
    props = {}
    for f in fields(Settings):
        node = spec(f).check.schema
        props[f.name] = _nullable(node) if f.default is None else dict(node)
    return {"type": "object", "required": [n for n, s in SPECS.items() if s.logged == "required"], "properties": props}


def declaration_errors() -> list[str]:
    """What the declarations must hold of themselves (tests/test_config.py asserts there is nothing)."""
    out = [f"{name}: phases {s.phases} not all in {PHASES}" for name, s in SPECS.items() if not set(s.phases) <= set(PHASES)]
    out += [f"{name}: set_by {s.set_by!r}, a setting with no flag" for name, s in SPECS.items()
            if s.set_by is not None and not (s.set_by in SPECS and SPECS[s.set_by].flags)]
    out += [f"{name}: both flags and set_by" for name, s in SPECS.items() if s.flags and s.set_by]
    out += [f"{name}: selects, but applies to no phase" for name, s in SPECS.items() if s.selects and not s.phases]
    out += [f"{name}: several flags and no read" for name, s in SPECS.items() if len(s.flags) > 1 and s.read is None]
    # a count or a duration without its unit reads two ways (seconds or ms? tokens or requests?)
    out += [f"{name}: a number with no unit" for name, s in SPECS.items()
            if s.unit is None and {s.check.schema.get("type"), s.check.schema.get("items", {}).get("type")} & {"integer", "number"}]
    params = [d for d, _, _, _ in run_flags()]
    out += [f"click parameter {p!r} declared twice" for p in sorted({p for p in params if params.count(p) > 1})]
    names = [flag.name for _, flag, _, _ in run_flags()]
    out += [f"flag {n} declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    out += [f"{flag.name}: in no group of HELP_GROUPS ({flag.group})" for _, flag, _, _ in run_flags()
            if flag.group not in HELP_GROUPS]
    return out
