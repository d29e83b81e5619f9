"""The phases, each declared once. A phase is one ``Phase`` here: its name (what `--phases`
and models.toml's `phases` take, in this order), where its protocol runs in the worker, where
its record is built from the model's events, how its cases are planned, how many request
events it emits (the progress bar's count) and how much context a request of it needs. The
rest is derived: config/settings.py's PHASES, cases.py's SWEEP_PHASES and plan,
run/phases/__init__.py's protocols and request count, the orchestrator's context, and
analyse/build.py's phase records.

Each stage's code is named by its import path ("module:function") and imported where it is
used, so this module imports no stage: the worker loads only protocols, `macprof show` only
builders, and `macprof --help` nothing of either.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Phase:
    name: str
    protocol: str  # "module:function": run in the worker with a run.phases.PhaseContext
    builder: str  # "module:function": the phase's record from an analyse.build.PhaseEvents and its name
    # its cases from the settings (sweeps; the concurrency levels), "module:function", or None
    planner: str | None = None
    requests: Callable[[Any, list[dict]], int] = lambda s, cases: 0  # (settings, its cases) -> request events
    context: Callable[[Any, list[dict]], int] = lambda s, cases: s.prompt_tokens + s.gen_tokens  # one sequence's
    sweep: bool = False  # its cases are journaled in the plan, each its own case record (grid, depth, batch)
    default: bool = False  # measured when no phases are asked for
    # what it adds to the reports, each "module:name", None where it adds nothing of its own:
    # its figures of a model's compare row ((ModelResult) -> dict, in analyse/; figures_of merges
    # them) and its render.report.PhaseReport (compare columns, summary section, show's lines, plot's panel)
    figures: str | None = None
    report: str | None = None
    # what the parent does for it (run/phases/api.py): "module:Class", a Parent made once per run
    # that asks for the phase; it prepares each model once (journaled in the plan), gives each of
    # the phase's workers its part of the job and records an item a timeout or a crash cut
    parent: str | None = None
    prepared: str | None = None  # "module:Type": what its workers' ctx.prepared is (its Parent.job's result)
    events: str | None = None  # "module:NAME": a tuple of its own journal events (model/events.py EVENTS has them)
    # "module:Record": its record in the log, where model/log.py Phases has no field written out for it
    record: str | None = None
    # "module:function": its own events read back by --resume ((ModelPast, event) -> whether it read it)
    resume: str | None = None
    trials: Callable[[Any], int] | None = None  # (settings) -> trials: a fresh worker each, before the other phases
    idle_baseline: bool = True  # the idle power wait before it (not before a cold trial: it would change "cold")
    # its requests' tokens handed back on --resume, for an output check the interruption left undone:
    # "ok" of the requests that succeeded, "all" of every one
    replays: str | None = None
    refusal: str | None = None  # why a server (--endpoint) cannot run it; None: it can
    # the "i/total" of a request line of the progress display ((settings, its case) -> total)
    line_total: Callable[[Any, str | None], int] = lambda s, case: s.reps
    progress_event: str = "request"  # the event that is one unit of its progress (the fault hook counts it)
    # "module:function": its record in a log read back as the events it was built from, for `macprof
    # verify` to build it again ((its record's JSON, the model's JSON, its name) -> events); None: a
    # sweep's cases, else its requests alone (analyse/unbuild.py reader)
    unbuild: str | None = None


# the tasks phase's context: a task whose prompt and max_tokens do not fit is refused alone, in one line
TASKS_CONTEXT = 2048


def _per_case(s, cases: list[dict]) -> int:
    return len(cases) * (s.reps + 1)  # a warm-up and reps per case


# what a chat template adds per message (role markers, separators) at most, in the estimate of a
# conversation's context; a turn that still does not fit is recorded and ends its conversation
TEMPLATE_TOKENS_PER_MESSAGE = 16


def _conversation_context(s) -> int:
    per_turn = s.turn_tokens + s.tool_tokens + s.gen_tokens + 3 * TEMPLATE_TOKENS_PER_MESSAGE
    return s.system_tokens + TEMPLATE_TOKENS_PER_MESSAGE + s.turns * per_turn + s.gen_tokens


def _longest_case(s, cases: list[dict]) -> int:
    return max((c["prompt_tokens"] + c["gen_tokens"] for c in cases), default=0)


def _concurrency_total(s, case: str | None) -> int:
    """A load level's own request count (macprof/run/phases/serving.py)."""
    return next((c["requests"] for c in load("macprof.run.phases.serving:load_cases")(s) if c["id"] == case), s.reps)


SERVER_COLD = ("cold: a server's model cannot be unloaded over its API; a cold start of a server is its start-up "
               "(--serve records when it answered)")
SERVER_DEPTH = "depth: a server's cache cannot be filled and cut back to a depth over its API"
UNBUILD = "macprof.analyse.unbuild:"  # where the shipped phases' records are read back as events (verify)

REGISTRY: dict[str, Phase] = {p.name: p for p in (
    # a fresh worker per trial, the page cache's residency recorded before it (cold_trial)
    Phase("cold", "macprof.run.phases.cold:run_cold", "macprof.analyse.build:build_cold_phase",
          requests=lambda s, cases: 2 * s.cold_trials, default=True,  # a first and a second request a trial
          parent="macprof.run.phases.cold:ColdParent", resume="macprof.run.phases.cold:resumed",
          trials=lambda s: s.cold_trials, idle_baseline=False,
          refusal=SERVER_COLD, line_total=lambda s, case: s.cold_trials, unbuild=f"{UNBUILD}cold_events"),
    Phase("warm", "macprof.run.phases.warm:run_warm", "macprof.analyse.build:build_warm_phase",
          requests=lambda s, cases: s.reps + 1, default=True),
    Phase("prefix", "macprof.run.phases.prefix:run_prefix", "macprof.analyse.build:build_prefix_phase",
          requests=lambda s, cases: 2 * (s.reps + 1), default=True, replays="all",  # a pair (reuse, no reuse) each
          unbuild=f"{UNBUILD}prefix_events"),
    Phase("grid", "macprof.run.phases.sweeps:run_grid", "macprof.analyse.build:build_sweep_phase",
          "macprof.cases:grid_cases", _per_case, _longest_case, sweep=True),
    Phase("depth", "macprof.run.phases.sweeps:run_depth", "macprof.analyse.build:build_sweep_phase",
          "macprof.cases:depth_cases", _per_case, _longest_case, sweep=True, refusal=SERVER_DEPTH),
    Phase("batch", "macprof.run.phases.sweeps:run_batch", "macprof.analyse.build:build_sweep_phase",
          "macprof.cases:batch_cases", _per_case, _longest_case, sweep=True, replays="ok"),  # a batch's: only a whole one
    # llama-bench's pp and tg tests, each from an empty cache (run/phases/bench.py)
    Phase("bench", "macprof.run.phases.bench:run_bench", "macprof.analyse.build:build_sweep_phase",
          "macprof.cases:bench_cases", _per_case, _longest_case, sweep=True),
    # scores chunks (quality_chunk events), no request; the reference model scores first and stores
    # its distributions for the others (run/reference.py, through the phase's parent)
    Phase("quality", "macprof.run.phases.quality:run_quality", "macprof.analyse.build:build_quality_phase",
          context=lambda s, cases: s.quality_ctx, figures="macprof.analyse.quality:quality_figures",
          report="macprof.render.quality:REPORT", parent="macprof.run.phases.quality:QualityParent",
          prepared="macprof.model.quality:QualityJob", events="macprof.model.phase_events:QUALITY_EVENTS",
          progress_event="quality_chunk", unbuild=f"{UNBUILD}quality_events"),
    # a plain request and one per draft length (and implementation: macprof's, the engine's own, or
    # both) for each prompt; a verify of k + 1 tokens past the plain context. The draft is resolved
    # once per model by the parent
    Phase("speculative", "macprof.run.phases.speculative:run_speculative",
          "macprof.analyse.speculative:build_speculative_phase",
          requests=lambda s, cases: (s.reps + 1) * (1 + len(s.draft_tokens) * (2 if s.speculative_impl == "both" else 1)),
          context=lambda s, cases: s.prompt_tokens + s.gen_tokens + max(s.draft_tokens, default=0) + 1,
          figures="macprof.analyse.speculative:figures", report="macprof.render.speculative:REPORT",
          parent="macprof.run.phases.speculative:DraftParent", prepared="macprof.model.speculative:DraftSpec",
          events="macprof.model.speculative:EVENTS", replays="ok", unbuild=f"{UNBUILD}speculative_events"),
    Phase("concurrency", "macprof.run.phases.serving:run_concurrency", "macprof.analyse.build:build_concurrency_phase",
          "macprof.run.phases.serving:load_cases", lambda s, cases: sum(c["requests"] for c in cases),
          events="macprof.model.phase_events:CONCURRENCY_EVENTS", line_total=_concurrency_total,
          unbuild=f"{UNBUILD}concurrency_events"),
    # a natural and an emptied request per turn of each app
    Phase("conversation", "macprof.run.phases.conversation:run_conversation",
          "macprof.analyse.conversation:build_conversation_phase", requests=lambda s, cases: 2 * s.apps * s.turns,
          context=lambda s, cases: _conversation_context(s), figures="macprof.analyse.conversation:figures",
          report="macprof.render.conversation:REPORT", parent="macprof.run.phases.conversation:ConversationParent",
          prepared="macprof.run.chat:TemplateFile", events="macprof.model.conversation:EVENTS", resume="macprof.run.phases.conversation:resumed",
          line_total=lambda s, case: s.turns, unbuild=f"{UNBUILD}conversation_events"),
    # right answers: one task_attempt per attempt, none of them a request event (an app's generation:
    # EOS ends it); the task file is read once per run, by the parent, which records an attempt cut
    Phase("tasks", "macprof.run.phases.tasks:run_tasks", "macprof.analyse.build:build_tasks_phase",
          context=lambda s, cases: TASKS_CONTEXT, figures="macprof.analyse.tasks:tasks_figures",
          report="macprof.render.tasks:REPORT", parent="macprof.run.phases.tasks:TasksParent",
          prepared="macprof.run.phases.tasks:TasksJob", events="macprof.model.tasks:EVENTS",
          resume="macprof.run.phases.tasks:resumed", unbuild=f"{UNBUILD}tasks_events"),
)}
NAMES = tuple(REGISTRY)
SWEEPS = tuple(p.name for p in REGISTRY.values() if p.sweep)
DEFAULTS = tuple(p.name for p in REGISTRY.values() if p.default)

_loaded: dict[str, Any] = {}


def load(path: str) -> Any:
    """The object a "module:name" path names (a function, or a render.report.PhaseReport),
    imported on first use."""
    if path not in _loaded:
        module, _, name = path.partition(":")
        _loaded[path] = getattr(importlib.import_module(module), name)
    return _loaded[path]


def figures_of(m) -> dict:
    """Every phase's figures of one model's compare row (a ModelResult), merged in run order."""
    out: dict = {}
    for p in REGISTRY.values():
        if p.figures:
            out.update(load(p.figures)(m))
    return out


def cases_of(name: str, s) -> list[dict]:
    """Phase ``name``'s cases under settings ``s`` ([] for a phase that plans none)."""
    planner = REGISTRY[name].planner
    return list(load(planner)(s)) if planner else []
