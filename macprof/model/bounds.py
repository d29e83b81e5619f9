"""What no figure of a run log can be, declared per record beside the model: a proportion
outside 0..1, a count below zero or above what bounds it (k right of n run, accepted of
drafted), a time that runs backwards (a request's stamps out of order, a negative span).
`macprof verify` names every such figure (store/verify.py); the renderers show one as
``INVALID``, never as a figure (``share_ok``, ``count_ok``).

A rule is per record class and field, so that a key means what its record says it means.
Decode above the published-bandwidth ceiling is not here: it is possible (a model that sits in
the chip's caches) and is flagged, not refused (store/verify.py).
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, NamedTuple

from macprof.model.conversation import ConversationSummary, Turn
from macprof.model.kinds import fields_of
from macprof.model.log import RunLog
from macprof.model.phases import Checks, ColdTrial, DepthFill, OutputCheck, Request, Residency, Summary
from macprof.model.quality import QualityChunk, QualityPhase
from macprof.model.records import Record
from macprof.model.serving import LoadLevelResult
from macprof.model.speculative import DraftMemory, Round, SpeculativeCase, SpeculativePhase
from macprof.model.tasks import Proportion, TaskAttempt, TasksSummary
from macprof.model.telemetry import TelemetryRaw, TelemetrySample

INVALID = "INVALID"  # what a renderer shows for an impossible figure


class AtMost(NamedTuple):
    """The field is a count of at most the record's ``other`` field (and not below zero)."""

    other: str


UNIT = "a proportion"  # 0..1; on a Summary field: each of its statistics
COUNT = "a count"  # not below zero
SPAN = "a time span"  # seconds, not below zero
STAMPS = "stamps"  # the record's stamps, in the order of the fields named, none before the one before it

BOUNDS: dict[type, dict[str, Any]] = {
    Request: {STAMPS: ("t0", "t_tokenized", "t_prefilled", "token_times"), "reused_tokens": AtMost("prompt_tokens"),
              "computed_prompt_tokens": COUNT, "cached_tokens_after": COUNT},
    TaskAttempt: {STAMPS: ("t0", "t_tokenized", "token_times", "t_end")},
    Round: {STAMPS: ("t_draft_start", "t_verify_start", "t_verify_end", "t_rewind_end"), "accepted": AtMost("drafted")},
    QualityChunk: {STAMPS: ("t_start", "t_end")},
    DepthFill: {STAMPS: ("t_start", "t_end"), "fill_s": SPAN},
    TelemetrySample: {STAMPS: ("t0", "t1"), "gpu_usage": UNIT},
    TelemetryRaw: {STAMPS: ("t_idle_start", "t_start", "t_end")},
    ColdTrial: {name: SPAN for name in ("interpreter_s", "harness_s", "import_s", "model_load_s", "tokenizer_load_s",
                                        "ready_s", "prompt_build_s", "time_to_first_token_s")},
    Residency: {"fraction": UNIT, "resident_bytes": COUNT},
    Proportion: {"value": UNIT, "ci_low": UNIT, "ci_high": UNIT, "k": AtMost("n")},
    TasksSummary: {"attempts_cut": AtMost("attempts_run"), "wall_s": SPAN, "time_per_correct_s": SPAN,
                   "mean_attempts_to_correct": COUNT},
    Checks: {"identical": AtMost("n"), "near_ties": AtMost("n"), "failed": AtMost("n"), "n": COUNT},
    OutputCheck: {"identical_fraction": UNIT, "first_divergence": COUNT},
    SpeculativeCase: {"acceptance": UNIT, "acceptance_per_token": UNIT, "accepted": AtMost("drafted"),
                      "drafted": COUNT, "rounds": COUNT},
    SpeculativePhase: {"draft_load_s": SPAN},
    DraftMemory: {"kv_cache_bytes": COUNT},
    Turn: {"reuse_rate": UNIT, "ideal_rate": UNIT, "reused_tokens": AtMost("prompt_tokens"),
           "expected_reuse": AtMost("prompt_tokens"), "ideal_reuse": AtMost("prompt_tokens"),
           "common_prefix": COUNT, "held_tokens": COUNT, "prompt_tokens": COUNT},
    ConversationSummary: {"reuse_rate": UNIT, "ideal_rate": UNIT, "reuse_rate_p10": UNIT, "hit_rate": UNIT,
                          "ideal_hit_rate": UNIT, "identical": COUNT, "near_ties": COUNT, "failed_checks": COUNT,
                          "unchecked_reports": COUNT, "unreported": COUNT, "not_emptied": COUNT},
    QualityPhase: {"same_top": UNIT},
    LoadLevelResult: {"goodput": UNIT, "ok": AtMost("sent"), "errors": AtMost("sent"), "duration_s": SPAN},
}
_STATISTICS = ("median", "p95", "p99", "mean", "min", "max")  # of a Summary of proportions


def share_ok(x: float | None) -> bool:
    """Whether ``x`` can be a proportion (None, unknown, can)."""
    return x is None or 0 <= x <= 1


def count_ok(k: int | None, n: int | None = None) -> bool:
    """Whether ``k`` can be a count (of at most ``n``, where given)."""
    return k is None or (k >= 0 and (n is None or k <= n))


class Impossible(NamedTuple):
    path: str  # where in the log, as a JSON pointer without its leading slash
    what: str  # what is wrong with it, in words


def impossible(log: RunLog) -> list[Impossible]:
    """Every figure of ``log`` that no measurement can give."""
    return list(_walk(log, ""))


@functools.cache
def _rules(cls: type) -> dict[str, Any] | None:
    return BOUNDS.get(cls) or next((r for c, r in BOUNDS.items() if issubclass(cls, c)), None)


@functools.cache
def _inner(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that hold records with a rule somewhere inside: the walk goes there
    only (a default run's log has some 27,000 records, most of them summaries and latencies)."""
    found: list[str] = []
    for name, f in fields_of(cls).items():
        if f.record is not None and _bounded(f.record, frozenset([cls])):
            found.append(name)
    return tuple(found)


def _bounded(cls: type, seen: frozenset) -> bool:
    """Whether a record of ``cls``, or one it holds, has a rule."""
    if _rules(cls):
        return True
    return any(f.record is not None and f.record not in seen and _bounded(f.record, seen | {cls})
               for f in fields_of(cls).values())


def _walk(record: Record, at: str) -> Iterator[Impossible]:
    rules = _rules(type(record))
    if rules:
        yield from _check(record, rules, at)
    for name in _inner(type(record)):
        value = getattr(record, name)
        if isinstance(value, Record):
            yield from _walk(value, f"{at}{name}/")
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                if isinstance(v, Record):
                    yield from _walk(v, f"{at}{name}/{i}/")
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, Record):
                    yield from _walk(v, f"{at}{name}/{k}/")


def _check(record: Record, rules: dict[str, Any], at: str) -> Iterator[Impossible]:
    for name, rule in rules.items():
        if name == STAMPS:
            yield from _stamps(record, rule, at)
            continue
        value = getattr(record, name)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, Summary):
            for stat in _STATISTICS:
                x = getattr(value, stat)
                if not share_ok(x):
                    yield Impossible(f"{at}{name}/{stat}", f"{x:g} is a proportion outside 0..1")
        elif rule == UNIT and not share_ok(value):
            yield Impossible(f"{at}{name}", f"{value:g} is a proportion outside 0..1")
        elif rule in (COUNT, SPAN) and value < 0:
            yield Impossible(f"{at}{name}", f"{value:g} is {'a time span' if rule == SPAN else 'a count'} below zero")
        elif isinstance(rule, AtMost):
            bound = getattr(record, rule.other)
            if value < 0:
                yield Impossible(f"{at}{name}", f"{value:g} is a count below zero")
            elif bound is not None and value > bound:
                yield Impossible(f"{at}{name}", f"{value:g} is more than {rule.other} ({bound:g})")


def _stamps(record: Record, names: tuple[str, ...], at: str) -> Iterator[Impossible]:
    """The stamps in order; a stamp before the one before it is a time that runs backwards."""
    last, last_name = None, ""
    for name in names:
        value = getattr(record, name)
        if value is None:
            continue
        stamps = value if isinstance(value, tuple) else (value,)
        if isinstance(value, tuple) and list(value) != sorted(value):  # C speed: a default log has ~100k stamps
            i = next(i for i in range(1, len(value)) if value[i] < value[i - 1])
            yield Impossible(f"{at}{name}/{i}", f"a time that runs backwards: {value[i]} after {value[i - 1]}")
            return
        if stamps and last is not None and stamps[0] < last:
            where = f"{name}/0" if isinstance(value, tuple) else name
            yield Impossible(f"{at}{where}", f"a time that runs backwards: {stamps[0]} is before {last_name} ({last})")
            return
        if stamps:
            last, last_name = stamps[-1], name
