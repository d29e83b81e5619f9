"""The parent's side of a phase: what the orchestrator does for a phase around its workers,
declared by the phase itself (macprof/phases.py ``parent``: "module:Class", a ``Parent``), so
that run/orchestrator.py, run/job.py, the phase context and run/resume.py name no phase.

- once per run (the class's constructor, through ``Parents``): the checks that stop a run in one
  line before any worker waits, each input read once (a task file, a reference that is no model;
  a file two phases read, a --chat-template, through the run's one ``Reads``);
  ``order``: the order the models run in (a reference first);
- once per model (``prepare``): what the phase's workers will need, resolved in the parent (a
  draft model's files); its record (``plan_type``) is journaled in the model's ``plan`` event, so
  a resumed run reads it back instead of preparing again; ``PhaseRefused`` refuses the phase for
  that model alone, in one line, and the model's other phases go on. ``inputs``: the files the
  phase reads besides the model's own, each with its size and sha256 (the model_start's
  ``identity.inputs``: --resume refuses a run whose inputs changed);
- per trial of a phase that runs a fresh worker per trial (registry ``trials``): ``before_trial``;
- per worker (``job``): what the worker's ``ctx.prepared`` is (the registry line's ``prepared``
  type, decoded in the worker);
- per item a timeout or a crash cut (``cut``, where ``cuts``): the parent's record of it, after
  which a new worker goes on with the phase; ``budget``: the workers such cuts may take;
- at the run's end (``close``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, Sequence, TypeVar

from macprof.errors import MacprofError
from macprof.phases import REGISTRY, load

if TYPE_CHECKING:
    from macprof.config import ModelSpec, Settings
    from macprof.model import events as ev

P = TypeVar("P")  # what ``prepare`` gives (a Record, journaled), or None
J = TypeVar("J")  # what each worker of the phase gets (its ctx.prepared)
T = TypeVar("T")


class Reads:
    """The files the run's parents read on the user's word, each read once per run however many
    phases and models read it (the conversation and the tasks both render through a
    --chat-template): what every worker is given and the model's inputs record is that one read."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, str], Any] = {}

    def once(self, role: str, path: str, read: Callable[[str], T]) -> T:
        """``read(path)`` the first time ``role``'s ``path`` is asked for, what it gave after that."""
        if (role, path) not in self._read:
            self._read[role, path] = read(path)
        return self._read[role, path]


class PhaseRefused(MacprofError):
    """``prepare``'s refusal of its phase for one model, in one line: the model's other phases go on."""


class Host(Protocol):
    """What a parent may use of the run while it makes a worker's job."""

    @property
    def events(self) -> Sequence[ev.Event]: ...  # the journal so far

    def note(self, line: str) -> None: ...  # a line of the progress display

    def run_worker(self, model: ModelSpec, phases: list[str]) -> None: ...  # a worker, before this one


class Parent(Generic[P, J]):
    """A phase's parent side; each default does nothing for its phase (a subclass overrides what
    its phase needs)."""

    plan_type: type | None = None  # P's record type, where the phase prepares (its JSON is journaled)
    cuts: bool = False  # the phase goes on past an item a timeout or a crash cut (``cut`` records it)

    def __init__(self, models: Sequence[ModelSpec], journal_path: Path, reads: Reads) -> None:
        self.models = tuple(models)
        self.journal_path = journal_path
        self.reads = reads  # the run's, shared by every parent

    def order(self, models: list[ModelSpec]) -> list[ModelSpec]:
        return models

    def prepare(self, model: ModelSpec) -> P | None:
        return None

    def inputs(self, model: ModelSpec, prepared: P | None) -> list[dict]:
        return []

    def before_trial(self, model: ModelSpec, trial: int) -> tuple[ev.Event | None, str]:
        """The event to journal before a trial's worker (None: none) and what the progress line says of it."""
        return None, ""

    def job(self, model: ModelSpec, prepared: P | None, host: Host) -> J | None:
        return prepared  # type: ignore[return-value]  # P is J unless the subclass says otherwise

    def cut(self, settings: Settings, prepared: P | None, failure: ev.Failure, request: ev.RequestStart,
            t_end: int | None) -> ev.Event | None:
        return None

    def budget(self, model: ModelSpec, prepared: P | None) -> int:
        return 0

    def close(self, complete: bool) -> None:
        """The run ended (``complete``: every model measured)."""


def file_input(role: str, path: Path) -> dict:
    """One of ``inputs``' entries: the file's role, path, size and sha256 (cached as a model
    file's is); OSError or MacprofError where it cannot be read."""
    from macprof.files.fileid import cached_sha256
    from macprof.files.filekind import regular_stat

    return {"role": role, "path": str(path), "bytes": regular_stat(path).st_size, "sha256": cached_sha256(path)}


class Parents:
    """The parent sides of the phases some model of the run asks for, one each, made in registry
    order (a constructor's refusal stops the run before any worker starts); and what each
    prepared for each model, prepared once."""

    def __init__(self, models: Sequence[ModelSpec], journal_path: Path) -> None:
        self.models = tuple(models)
        asked = {name for m in self.models for name in m.settings.phases}
        reads = Reads()
        self.sides: dict[str, Parent] = {name: load(p.parent)(self.models, journal_path, reads)
                                         for name, p in REGISTRY.items() if p.parent and name in asked}
        self._fresh: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}

    def of(self, phase: str) -> Parent | None:
        return self.sides.get(phase)

    def order(self) -> list[ModelSpec]:
        """The run order: each parent's ``order`` in turn, in registry order."""
        models = list(self.models)
        for side in self.sides.values():
            models = side.order(models)
        return models

    def _preparing(self, model: ModelSpec) -> list[tuple[str, Parent]]:
        return [(name, side) for name, side in self.sides.items()
                if name in model.settings.phases and side.plan_type is not None]

    def prepares(self, model: ModelSpec) -> bool:
        return bool(self._preparing(model))

    def prepare(self, model: ModelSpec) -> tuple[dict[str, Any], dict[str, str]]:
        """({phase: what its parent prepared}, {phase: why it refused the phase}) for ``model``,
        prepared once per run (a second call gives the first's)."""
        if model.name not in self._fresh:
            prepared: dict[str, Any] = {}
            refused: dict[str, str] = {}
            for name, side in self._preparing(model):
                try:
                    prepared[name] = side.prepare(model)
                except PhaseRefused as exc:
                    refused[name] = str(exc)
            self._fresh[model.name] = (prepared, refused)
        return self._fresh[model.name]

    def journaled(self, model: ModelSpec, recorded: dict[str, dict] | None) -> dict[str, Any]:
        """What was prepared for ``model``, from its plan's ``recorded`` JSON (a phase absent there
        was refused, and that refusal journaled); a journal from before the plan recorded it
        (``recorded`` None) is prepared again."""
        if recorded is None:
            return self.prepare(model)[0]
        return {name: side.plan_type.from_json(recorded[name], f"plan: {name}")  # type: ignore[union-attr]
                for name, side in self._preparing(model) if name in recorded}

    def inputs(self, model: ModelSpec, prepared: dict[str, Any]) -> list[dict]:
        """Every file ``model``'s phases read besides its own (``Parent.inputs``), in registry order,
        each once (the conversation and the tasks both render through a --chat-template)."""
        files = [f for name, side in self.sides.items() if name in model.settings.phases
                 for f in side.inputs(model, prepared.get(name))]
        first: dict[tuple[str, str], dict] = {}
        for f in files:
            first.setdefault((f["role"], f["path"]), f)
        return list(first.values())

    def close(self, complete: bool) -> None:
        for side in self.sides.values():
            side.close(complete)


def plan_json(prepared: dict[str, Any]) -> dict[str, dict]:
    """``prepared`` as the plan event journals it: each record's JSON."""
    return {name: value.to_json() for name, value in prepared.items() if value is not None}
