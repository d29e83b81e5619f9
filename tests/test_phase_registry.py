"""A phase is one object in one registry (issue #22, item 3): macprof/phases.py declares each
phase's protocol, builder, planner, request count and context; everything else that lists the
phases is derived from it, and what still names them by hand is held to it here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macprof import cases, config
from macprof.phases import DEFAULTS, NAMES, REGISTRY, SWEEPS, cases_of, load

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "runlogs" / "tiny-a.json"
SCHEMA = Path(__file__).resolve().parent.parent / "macprof" / "store" / "schema" / "runlog.schema.json"


@pytest.mark.parametrize("name", NAMES)
def test_every_phase_resolves_to_its_code(name):
    phase = REGISTRY[name]
    assert callable(load(phase.protocol)) and callable(load(phase.builder))
    if phase.planner:
        assert isinstance(load(phase.planner)(config.Settings(phases=(name,))), list)
    assert phase.sweep == (name in SWEEPS)
    if phase.figures:
        assert callable(load(phase.figures))
    if phase.report:
        from macprof.render.report import PhaseReport

        assert isinstance(load(phase.report), PhaseReport)
    if phase.unbuild:  # how `macprof verify` reads its record back as events
        assert callable(load(phase.unbuild))
    _check_parent_side(phase)


def _check_parent_side(phase) -> None:
    """What the parent does for the phase resolves: its Parent, the type its workers get (only
    with a parent), its events (each an Event, of a kind of its own), its record, its reader."""
    from macprof.model.event_base import Event
    from macprof.model.events import CORE, EVENTS
    from macprof.model.records import Record
    from macprof.run.phases.api import Parent

    if phase.parent:
        side = load(phase.parent)
        assert issubclass(side, Parent)
        assert side.plan_type is None or issubclass(side.plan_type, Record)  # journaled as a record's JSON
    assert phase.prepared is None or (phase.parent and isinstance(load(phase.prepared), type))
    if phase.events:
        events = load(phase.events)
        assert events and all(issubclass(e, Event) and EVENTS[e.KIND] is e and e not in CORE for e in events)
    if phase.record:
        from macprof.model.log import Phases

        assert phase.name in Phases.__struct_fields__ and issubclass(load(phase.record), Record)
    if phase.resume:
        assert callable(load(phase.resume))
    assert phase.replays in (None, "ok", "all") and (phase.trials is None or phase.trials(config.Settings()) >= 1)


def test_a_phase_s_worker_part_is_what_its_parent_gives():
    """Each parent's ``job`` gives its workers the type the registry line names (the worker
    decodes it so): the draft, the task set, the quality reference."""
    import msgspec

    from macprof.config import ModelSpec
    from macprof.run.phases.api import Parents

    s = config.Settings(phases=("speculative", "tasks", "quality"), draft="ngram")
    model = ModelSpec(name="m", engine="fake", path=Path("/nonexistent.gguf"), quant=None, settings=s)
    parents = Parents((model,), Path("/nonexistent.journal.jsonl"))
    prepared, refused = parents.prepare(model)
    assert refused == {} and sorted(prepared) == ["speculative", "tasks"]

    class Host:
        events: list = []

        def note(self, line):
            pass

        def run_worker(self, model, phases):
            raise AssertionError("no worker runs here")

    for name in s.phases:
        part = parents.of(name).job(model, prepared.get(name), Host())
        kind = load(REGISTRY[name].prepared)
        assert isinstance(msgspec.json.decode(msgspec.json.encode(part), type=kind), kind)


def test_what_lists_the_phases_is_derived_from_the_registry():
    from macprof.config.settings import DEFAULT_PHASES, PHASES
    from macprof.run.phases import PHASES as PROTOCOLS

    assert PHASES == NAMES and DEFAULT_PHASES == DEFAULTS == config.Settings().phases
    assert cases.SWEEP_PHASES == SWEEPS and list(PROTOCOLS) == list(NAMES)


def test_the_log_s_phase_record_and_the_schema_name_every_phase_in_order():
    """The Phases record is still written out (for the type checker) for every shipped phase, and
    none of them also declares ``record`` (a phase added with ``record`` gets its field at import:
    tests/test_extra_phase.py); held to the registry, so a phase added with neither fails. The schema is generated (its failure.phase words are
    the registry's, model/vocab.py), and the checked-in file is held to it by
    tests/test_model_schema.py: the drift that lost "concurrency" before cannot recur."""
    from macprof.model.log import Phases
    from macprof.model.records import record_fields

    assert [f.name for f in record_fields(Phases)] == list(NAMES)
    assert not any(p.record for p in REGISTRY.values())
    schema = json.loads(SCHEMA.read_text())
    (words,) = [arm["enum"] for arm in schema["$defs"]["Failure"]["properties"]["phase"]["anyOf"] if "enum" in arm]
    assert sorted(words) == sorted(NAMES)
    assert list(schema["$defs"]["Phases"]["properties"]) == list(NAMES)


def test_the_request_count_is_each_phase_s_own_over_its_cases():
    from macprof.run.phases import planned_requests

    s = config.Settings(phases=("cold", "warm", "prefix", "depth", "concurrency"), reps=3, cold_trials=2,
                        depths=(0, 16, 64), concurrency=(1, 2))
    levels = cases_of("concurrency", s)
    assert planned_requests(s) == 2 * 2 + (3 + 1) + 2 * (3 + 1) + 3 * (3 + 1) + sum(c["requests"] for c in levels)


def test_a_phase_s_context_is_its_longest_request():
    s = config.Settings(phases=("warm", "quality", "grid"), prompt_tokens=100, gen_tokens=20, quality_ctx=512,
                        prompt_grid=(64, 256), gen_grid=(8,))
    grid = cases.plan(s)["grid"]
    assert REGISTRY["warm"].context(s, []) == 120 and REGISTRY["quality"].context(s, []) == 512
    assert REGISTRY["grid"].context(s, grid) == 256 + 8


def test_a_phase_s_report_reaches_compare_summary_and_show_through_the_registry(monkeypatch):
    """A phase's columns, fields, note, summary section and show lines come from its registry
    line alone: a phase added here with a report appears in every report, no renderer edited."""
    import dataclasses
    import sys
    import types

    from macprof import phases
    from macprof.analyse.compare import compare, rows_from
    from macprof.render.compare import comparison
    from macprof.render.detail import render_detail
    from macprof.render.exporters import Column, cell
    from macprof.render.report import PhaseReport, Section
    from macprof.render.show import render_show
    from macprof.render.summary import render_summary
    from macprof.store import runlog

    extra = types.ModuleType("extra_phase_for_test")
    extra.figures = lambda m: {"has_extra": True, "extra_score": len(m.identity.name)}
    extra.REPORT = PhaseReport(present="has_extra", columns=(Column("extra score", cell("extra_score")),),
                               fields=("extra_score",), note="extra: the name's length",
                               section=lambda log: Section("Extra", None, tuple(m.identity.name for m in log.models)),
                               detail=lambda record: ["   extra phase line"])
    monkeypatch.setitem(sys.modules, "extra_phase_for_test", extra)
    warm = REGISTRY["warm"]
    monkeypatch.setitem(REGISTRY, "extra", dataclasses.replace(warm, name="extra", figures="extra_phase_for_test:figures",
                                                               report="extra_phase_for_test:REPORT"))
    monkeypatch.setattr(type(runlog.load(FIXTURE).models[0].phases), "extra", property(lambda self: self.warm),
                        raising=False)
    log = runlog.load(FIXTURE)
    rows = rows_from(log, "a")
    assert [r["extra_score"] for r in rows] == [len(m.identity.name) for m in log.models]
    table = comparison(compare(rows, baseline=None))
    assert "extra score" in [c.name for c in table.columns] and "extra_score" in table.fields
    assert "extra: the name's length" in table.notes
    assert "Extra:" in render_summary(log) and "extra phase line" in render_detail(log)
    assert "**Extra**" in render_show(log, "markdown")  # the markdown a user pastes has the section too
    assert phases.figures_of(log.models[0])["has_extra"] is True
