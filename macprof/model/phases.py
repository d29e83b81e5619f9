"""The run log's records of what was measured: requests, statistics, failures, each phase
(cold, warm, prefix, the sweeps and their cases) and the ceilings beside them.
docs/runlog.md says what every field means; store/schema/runlog.schema.json is the same
layout as a JSON Schema (tests/test_model_schema.py keeps the two in step)."""

from __future__ import annotations

from msgspec import field
from typing import Any

from macprof.model.records import ABSENT, Count, Journals, Number, Positive, Record
from macprof.model.vocab import BenchTest, CaseStatus, CountStatus, FailureStatus, OkOrError, PairKind, PhaseName, RequestKind, RequestMode, ThermalState, TrialStatus, WeightsHeld
from macprof.model.telemetry import ColdEnergy, Energy, PhaseTelemetry
from macprof.model.kind import NAME, OWN, TEXT, VOCAB


# -- one request and the statistics of many ------------------------------------------------
class Summary(Record):
    """One figure over raw samples: macprof.measure.stats.summarize."""

    # in every log (the schema's "required"), though code may construct the record without them
    REQUIRED_KEYS = (
        "n", "failures", "median", "p95", "p99", "mean", "stdev", "min", "max")
    n: Count = 0
    failures: Count = 0
    dropped: Count = 0
    median: Number | None = None
    p95: Number | None = None
    p99: Number | None = None
    mean: Number | None = None
    stdev: Number | None = None
    min: Number | None = None
    max: Number | None = None


class Metrics(Record):
    """The summaries of a phase's (or a case's) measured requests."""

    # in every log (the schema's "required"), though code may construct the record without them
    REQUIRED_KEYS = (
        "ttft_s", "prefill_tok_s", "decode_tok_s", "e2e_tok_s", "itl_s")
    ttft_s: Summary = field(default_factory=Summary)
    prefill_tok_s: Summary = field(default_factory=Summary)
    decode_tok_s: Summary = field(default_factory=Summary)
    e2e_tok_s: Summary = field(default_factory=Summary)
    itl_s: Summary = field(default_factory=Summary)
    aggregate_decode_tok_s: Summary | None = ABSENT  # batch cases: B x the per-sequence decode rate


class Itl(Record):
    """One request's inter-token latencies."""

    mean: Number | None = None
    p50: Number | None = None
    p95: Number | None = None
    p99: Number | None = None
    max: Number | None = None


class CountingRequest(Record):
    """The untimed request that counted a server request's tokens, made after it where the
    server's own free count did not settle them (engines/counting.py): the same prompt and
    greedy settings, not streamed; used only when its text is the timed request's."""

    KINDS = {"status": VOCAB, "named_by": VOCAB, "reason": TEXT}

    REQUIRED_KEYS = ("status",)  # in every log (the schema's required), though code may leave them out
    status: CountStatus  # "ok" (used), "differs" (its text is not the timed request's: not used), "error"
    completion_tokens: int | None = None
    named_by: str | None = None  # what placed each token in the text: "ids" (detokenized), "raw token strings",
    # "text offsets"; None: a total only
    reason: str | None = None  # why it was not used, or failed


class ServerReport(Record):
    """What a server's request counted and reported (engines/wire.py, engines/counting.py):
    the tokens, where the count came from, the tokens each received chunk carried where that is
    known, how EOS was held off, the server's own timings, and flags for whatever differs from
    what was asked. docs/design.md "Local servers" says what is assumed and what is checked."""

    # cached_tokens_source may quote a line of the server's own log
    KINDS = {"count_source": VOCAB, "chunk_tokens_source": VOCAB, "prompt_tokens_source": VOCAB,
             "finish_reason": TEXT, "eos": VOCAB, "timings": TEXT, "flags": TEXT, "cached_tokens_source": TEXT,
             "claims": TEXT}

    completion_tokens: int | None = None
    count_source: str | None = None
    chunk_tokens: tuple[Count, ...] | None = None  # per received chunk with text; None: not known
    chunk_tokens_source: str | None = None
    unstamped_tokens: int | None = ABSENT  # counted by the server after the last chunk with text (its EOS)
    prompt_tokens_source: str | None = None
    cached_tokens: int | None = None
    # where cached_tokens came from (usage.prompt_tokens_details, timings.cache_n, or the line of the
    # server's own log that said it); absent in older logs
    cached_tokens_source: str | None = ABSENT
    finish_reason: str | None = None
    eos: str | None = ABSENT  # how EOS was held off on this request (absent in older logs)
    counting: CountingRequest | None = ABSENT
    timings: dict[str, Any] | None = None
    flags: tuple[str, ...] = ()
    # what the server reported that is no count or duration (negative, not a number, more than the
    # request allows: engines/wire.py), keyed by field, as it said it; flagged, never taken as a figure
    claims: dict[str, str] | None = ABSENT


class Request(Record):
    """A request as journaled (raw timestamps, token ids) plus what its timestamps give."""

    KINDS = {"kind": VOCAB, "mode": VOCAB, "status": VOCAB, "error": TEXT, "tokens": TEXT, "engine_memory": TEXT,
             "case": VOCAB}

    # in every log (the schema's "required"), though code may construct the record without them
    REQUIRED_KEYS = (
        "kind", "status", "t0", "t_tokenized", "token_times", "tokens", "prompt_tokens", "n_tokens", "ttft_s",
        "decode_tok_s", "e2e_tok_s", "prefill_tok_s")
    # what its timestamps give (analyse/requests.py request_record): the request event has the rest
    BUILT = ("n_tokens", "ttft_s", "prefill_tok_s", "decode_tok_s", "e2e_tok_s", "tokenize_s", "total_s", "itl",
             "aggregate_decode_tok_s", "aggregate_e2e_tok_s")
    index: int | None = None
    kind: RequestKind = ""
    mode: RequestMode | None = None
    status: OkOrError = ""
    error: str | None = None
    t0: int = 0
    t_tokenized: int | None = None
    token_times: tuple[int, ...] = ()
    tokens: tuple[int | str | tuple[int, ...], ...] = ()  # ids; one list of ids per sequence in a batch; a server's chunk texts
    prompt_tokens: Count = 0
    reused_tokens: int | None = None
    computed_prompt_tokens: int | None = None
    cached_tokens_after: int | None = None
    kv_cache_bytes: int | None = None
    engine_memory: dict[str, Any] | None = ABSENT  # absent from schema 1 logs
    case: str | None = ABSENT
    batch: Positive | None = ABSENT
    cached_tokens_before: int | None = ABSENT
    n_tokens: Count = 0
    ttft_s: Number | None = None
    prefill_tok_s: Number | None = None
    decode_tok_s: Number | None = None
    e2e_tok_s: Number | None = None
    tokenize_s: Number | None = None
    total_s: Number | None = None
    itl: Itl | None = None
    aggregate_decode_tok_s: Number | None = ABSENT
    aggregate_e2e_tok_s: Number | None = ABSENT
    server: ServerReport | None = ABSENT  # a server's request: what it counted and reported
    t_prefilled: int | None = ABSENT  # a pp test (bench phase): the prompt computed, no token generated


class Failure(Record):
    """A failure as the orchestrator journaled it (worker crash, timeout, refusal) or a sweep
    case's error; only ``status`` and ``reason`` are always there."""

    # a worker is named after its model ("NAME:warm:0:..."): its name is the model's
    KINDS = {"event": VOCAB, "model": NAME, "worker": NAME, "status": VOCAB, "reason": TEXT, "phase": VOCAB,
             "case": VOCAB, "kind": VOCAB, "mode": VOCAB, "signal": VOCAB, "stderr_tail": TEXT}

    REQUIRED_KEYS = ("status", "reason")  # in every log (the schema's required), though code may leave them out
    event: str | None = ABSENT
    model: str | None = ABSENT
    worker: str | None = ABSENT
    status: FailureStatus = "error"
    reason: str | None = None
    phase: PhaseName | None = ABSENT
    case: str | None = ABSENT
    index: int | None = ABSENT
    kind: str | None = ABSENT
    mode: str | None = ABSENT
    exit_code: int | None = ABSENT
    signal: str | None = ABSENT
    stderr_tail: str | None = ABSENT


class OutputCheck(Record):
    """Token-by-token agreement of two outputs of the same prompt (prefix reuse, batching)."""

    REQUIRED_KEYS = ("identical_fraction", "first_divergence", "passed")  # in every log, though code may leave them out
    identical_fraction: Number | None = None
    first_divergence: int | None = None
    margin: Number | None = None
    near_tie: bool | None = None
    passed: bool = False



class Checks(Record):
    n: int = 0
    identical: int = 0
    near_ties: int = 0
    failed: int = 0


class BatchCheck(Checks):
    sequences: tuple[OutputCheck, ...] = ()


class PhaseMemory(Record):
    KINDS = {"engine": TEXT, "weights_held": VOCAB}
    rss_start_bytes: int | None = None
    rss_end_bytes: int | None = None
    peak_rss_bytes: int | None = None
    rss_samples: int | None = None
    engine: dict[str, Any] | None = None
    # macOS: phys_footprint, what Activity Monitor shows (GPU buffers included); absent elsewhere
    footprint_start_bytes: int | None = ABSENT
    footprint_end_bytes: int | None = ABSENT
    peak_footprint_bytes: int | None = ABSENT
    footprint_samples: int | None = ABSENT
    # how the engine held its weights ("mapped" / "copied", engines/base.py) and, mapped, the
    # model files' resident bytes at the phase's end: clean file pages macOS's footprint leaves
    # out, added to it in the headline (analyse/headline.py); absent in older logs and servers
    weights_held: WeightsHeld | None = ABSENT
    mapped_resident_bytes: int | None = ABSENT


# -- the ceilings --------------------------------------------------------------------------
class CeilingSide(Record):
    """The roofline with the published (spec) or the measured bandwidth; where that bandwidth is
    unknown, only ``reason``."""

    KINDS = {"reason": OWN, "bound": VOCAB, "prefill_reason": OWN}

    bandwidth_gbs: Number | None = None
    reason: str | None = ABSENT
    ceiling_tok_s: Number | None = ABSENT
    efficiency: Number | None = ABSENT
    bound: str | None = ABSENT
    file_size_ceiling_tok_s: Number | None = ABSENT
    prefill_compute_ceiling_tok_s: Number | None = ABSENT
    prefill_efficiency: Number | None = ABSENT
    prefill_reason: str | None = ABSENT


class Ceiling(Record):
    """A phase's or a case's decode figure against the roofline at its context; where the model's
    shape is unknown (or the log predates ceilings), only ``reason``."""

    KINDS = {"reason": OWN, "kv_type": VOCAB}

    reason: str | None = ABSENT
    context_tokens: Number | None = ABSENT
    weight_bytes_per_token: Number | None = ABSENT
    kv_bytes_per_token: Number | None = ABSENT  # where K/V grows linearly with the context (full attention, MLA)
    kv_bytes_read: Number | None = ABSENT  # K/V and recurrent state read per token at context_tokens
    kv_type: str | None = ABSENT
    decode_tok_s: Number | None = ABSENT
    spec: CeilingSide | None = ABSENT
    measured: CeilingSide | None = ABSENT


class PredictionSide(Record):
    KINDS = {"reason": OWN, "bound": VOCAB}
    bandwidth_gbs: Number | None = None
    reason: str | None = ABSENT
    batch: int | None = ABSENT
    step_s: Number | None = ABSENT
    itl_s: Number | None = ABSENT
    aggregate_tok_s: Number | None = ABSENT
    per_user_tok_s: Number | None = ABSENT
    bound: str | None = ABSENT


class Prediction(Record):
    """The roofline's batching model for one batch case."""

    KINDS = {"reason": OWN}

    reason: str | None = ABSENT
    spec: PredictionSide | None = ABSENT
    measured: PredictionSide | None = ABSENT


class TradeoffRow(Record):
    """One batch size: measured and predicted, each also relative to B = 1."""

    KINDS = {"predicted_with": VOCAB, "bound": VOCAB}

    REQUIRED_KEYS = ("batch",)  # in every log (the schema's required), though code may leave them out
    batch: Positive = 1
    aggregate_tok_s: Number | None = None
    itl_p50_s: Number | None = None
    itl_p99_s: Number | None = None
    predicted_with: str | None = None
    predicted_aggregate_tok_s: Number | None = None
    predicted_itl_s: Number | None = None
    bound: str | None = None
    measured_over_predicted_aggregate: Number | None = None
    measured_over_predicted_itl: Number | None = None
    aggregate_vs_b1: Number | None = None
    itl_p50_vs_b1: Number | None = None
    predicted_aggregate_vs_b1: Number | None = None
    predicted_itl_vs_b1: Number | None = None


# -- the phases ------------------------------------------------------------------------------
class Residency(Record):
    KINDS = {"label": VOCAB, "method": VOCAB}
    resident_bytes: int | None = None
    file_bytes: int | None = None
    fraction: Number | None = None
    label: str = "unknown"
    method: str | None = None


class DropCache(Record):
    KINDS = {"reason": TEXT}
    dropped: bool = False
    reason: str | None = None


class ColdTrial(Record):
    """One fresh worker process; a trial whose worker never ran has only the first four."""

    KINDS = {"status": VOCAB, "tokenizer_note": TEXT, "note": TEXT}

    REQUIRED_KEYS = ("index", "residency", "status")  # in every log, though code may leave them out
    index: int = 0
    residency: Residency | None = None
    drop_cache: DropCache | None = None
    status: TrialStatus = "ok"  # ok | failed | interrupted (the run ended while it was measured)
    interpreter_s: Number | None = ABSENT
    harness_s: Number | None = ABSENT  # macprof's own start-up in the worker: not in ready_s
    import_s: Number | None = ABSENT
    model_load_s: Number | None = ABSENT
    tokenizer_load_s: Number | None = ABSENT
    ready_s: Number | None = ABSENT
    first_request: Request | None = ABSENT
    second_request: Request | None = ABSENT
    first_request_extra_s: Number | None = ABSENT
    time_to_first_token_s: Number | None = ABSENT
    prompt_build_s: Number | None = ABSENT
    tokenizer_note: str | None = ABSENT
    failure: Failure | None = ABSENT
    note: str | None = ABSENT  # why a trial is "interrupted"
    energy: ColdEnergy | None = ABSENT  # spawn -> ready, where the trial's telemetry was journaled


class ColdSummary(Record):
    interpreter_s: Summary = field(default_factory=Summary)
    import_s: Summary = field(default_factory=Summary)
    model_load_s: Summary = field(default_factory=Summary)
    tokenizer_load_s: Summary = field(default_factory=Summary)
    ready_s: Summary = field(default_factory=Summary)
    first_request_extra_s: Summary = field(default_factory=Summary)
    time_to_first_token_s: Summary = field(default_factory=Summary)


class ColdPhase(Record):
    REQUIRED_KEYS = ("trials", "summary")  # in every log (the schema's required), though code may leave them out
    trials: tuple[ColdTrial, ...] = ()
    summary: ColdSummary = field(default_factory=ColdSummary)
    failures: tuple[Failure, ...] = ()


class WarmPhase(Record):
    KINDS = {"thermal_state_start": VOCAB, "thermal_state_end": VOCAB}
    REQUIRED_KEYS = ("requests", "summary", "failures")  # in every log, though code may leave them out
    requests: tuple[Request, ...] = ()
    summary: Metrics = field(default_factory=Metrics)
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = None
    roofline: Ceiling | None = ABSENT  # a schema 1 log gets it (with the reason) on migration
    telemetry: PhaseTelemetry | None = ABSENT  # logs before telemetry lack it
    # macOS: NSProcessInfo.thermalState at the phase's boundaries, not telemetry's pressure level
    thermal_state_start: ThermalState | None = ABSENT
    thermal_state_end: ThermalState | None = ABSENT


class PrefixPair(Record):
    """One prompt with the prefix cached (reuse) and not (noreuse); a pair cut short by a
    failure lacks what was not measured."""

    KINDS = {"kind": VOCAB}

    index: int | None = None
    kind: PairKind = ""
    reuse: Request | None = ABSENT
    noreuse: Request | None = ABSENT
    check: OutputCheck | None = ABSENT


class PrefixSummary(Record):
    REQUIRED_KEYS = ("reuse", "noreuse", "ttft_speedup", "checks")  # in every log, though code may leave them out
    reuse: Metrics = field(default_factory=Metrics)
    noreuse: Metrics = field(default_factory=Metrics)
    ttft_speedup: Number | None = None
    reused_tokens: Summary = field(default_factory=Summary)
    checks: Checks = field(default_factory=Checks)


class PrefixPhase(Record):
    KINDS = {"reuse_not_possible": TEXT, "thermal_state_start": VOCAB, "thermal_state_end": VOCAB}
    REQUIRED_KEYS = ("pairs", "summary", "failures")  # in every log, though code may leave them out
    pairs: tuple[PrefixPair, ...] = ()
    summary: PrefixSummary = field(default_factory=PrefixSummary)
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = None
    roofline: Ceiling | None = ABSENT
    # why the engine could not keep the cached prefix (its pairs then ran from an empty cache)
    reuse_not_possible: str | None = ABSENT
    telemetry: PhaseTelemetry | None = ABSENT
    # macOS: NSProcessInfo.thermalState at the phase's boundaries, not telemetry's pressure level
    thermal_state_start: ThermalState | None = ABSENT
    thermal_state_end: ThermalState | None = ABSENT


class DepthFill(Record):
    t_start: int | None = None
    t_end: int | None = None
    fill_s: Number | None = None
    cached_tokens: int | None = None
    kv_cache_bytes: int | None = None


class SweepCase(Record):
    """One planned case and what came of it; a case that never ran is listed as ``not run``."""

    KINDS = {"id": VOCAB, "status": VOCAB, "shape": VOCAB, "reason": TEXT, "reuse_not_possible": TEXT, "test": VOCAB}

    # in every log (the schema's "required"), though code may construct the record without them
    REQUIRED_KEYS = (
        "id", "status", "prompt_tokens", "gen_tokens", "context_tokens", "requests", "summary", "failures",
        "roofline")
    # what came of it (analyse/build.py): the rest is the case as planned (PlannedCase)
    BUILT = ("status", "requests", "summary", "failures", "reason", "roofline", "fill", "reuse_not_possible", "prediction",
             "check", "energy")
    id: str = ""
    status: CaseStatus = "not run"
    shape: str | None = ABSENT
    depth: Count | None = ABSENT
    batch: Positive | None = ABSENT
    test: BenchTest | None = ABSENT  # bench: llama-bench's test, pp (no token generated) or tg
    prompt_tokens: Positive = 0
    gen_tokens: Count = 0  # 0: a pp test
    context_tokens: Number = 0.0
    requests: tuple[Request, ...] = ()
    summary: Metrics = field(default_factory=Metrics)
    failures: tuple[Failure, ...] = ()
    reason: str | None = None
    roofline: Ceiling | None = None
    fill: DepthFill | None = ABSENT  # depth
    reuse_not_possible: str | None = ABSENT  # depth: the fill could not be cut back to, so it was refilled
    prediction: Prediction | None = ABSENT  # batch
    check: BatchCheck | None = ABSENT  # batch
    energy: Energy | None = ABSENT  # this case's requests against its phase's telemetry


class Sweep(Record):
    """grid, depth or batch: its cases in plan order, the failures tied to no case, memory."""

    KINDS = {"thermal_state_start": VOCAB, "thermal_state_end": VOCAB}

    REQUIRED_KEYS = ("cases", "failures")  # in every log (the schema's required), though code may leave them out
    cases: tuple[SweepCase, ...] = ()
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = None
    tradeoff: tuple[TradeoffRow, ...] | None = ABSENT  # batch
    telemetry: PhaseTelemetry | None = ABSENT
    # macOS: NSProcessInfo.thermalState at the phase's boundaries, not telemetry's pressure level
    thermal_state_start: ThermalState | None = ABSENT
    thermal_state_end: ThermalState | None = ABSENT


class PlannedCase(Record, Journals[SweepCase]):
    """A sweep case as planned (macprof.cases.plan; journaled in the plan event): what the case
    is, before it runs, its record's fields less what came of it."""

    REQUIRED = ("id", "prompt_tokens", "gen_tokens", "context_tokens")
