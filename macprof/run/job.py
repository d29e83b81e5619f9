"""The job a worker process receives on its stdin: one typed record, written by the orchestrator
and decoded, with its types checked, by the worker. A key misspelt on one side, or a value of
the wrong kind, is a decoding error at the worker's start (the job's field named), not a
``job.get`` that quietly reads a default.

What the parent gives a phase of its own (run/phases/api.py ``Parent.job``) travels as that
phase's JSON under ``prepared``, decoded by the worker with the type the phase's registry line
names (macprof/phases.py ``prepared``), so this record names no phase.

msgspec decodes it: the worker imports it before any engine, and it costs ~1 ms to import.
"""

from __future__ import annotations

import msgspec


class WorkerJob(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str  # the model's name in the run
    engine: str  # a key of engines.ENGINES
    path: str  # the model file or directory
    phases: list[str]  # the phases this worker runs, in order
    settings: dict  # config.settings_dict of the model's settings (config.settings_from_dict reads it)
    n_ctx: int  # one sequence's context: the longest request of these phases plus the margin
    trial: int = 0  # a trial's number (a phase that runs a fresh worker per trial)
    cases: dict[str, list[dict]] = {}  # a sweep's (or the concurrency levels') cases still to measure, per phase
    done: list[dict] = []  # requests already journaled by an earlier worker (a resume or a restart)
    endpoint: dict | None = None  # the openai engine's server (config/endpoint.py, Endpoint.job)
    idle_baseline_s: float = 0.0  # the idle wait before each phase, where power is read (0: none)
    prepared: dict[str, msgspec.Raw] = {}  # per phase, what its parent gives its workers (its JSON)


def encode(job: WorkerJob) -> bytes:
    return msgspec.json.encode(job)


def decode(line: bytes | str) -> WorkerJob:
    """The job from the worker's first stdin line; a malformed one raises msgspec's
    ValidationError naming the field ("Expected `int`, got `str` - at `$.n_ctx`")."""
    return msgspec.json.decode(line, type=WorkerJob)
