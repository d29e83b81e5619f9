"""The tasks phase's records and events: the task set, every attempt's raw reply (text, ids,
token stamps) and its checker's verdict, and what they give per model (accuracy with Wilson
intervals, tool-call validity, attempts, time, tokens and energy per correct answer).
Definitions: docs/tasks.md; fields: docs/runlog.md."""

from __future__ import annotations

from macprof.model.event_base import Event
from macprof.model.phases import Failure, PhaseMemory

from macprof.model.records import ABSENT, Count, Journals, NonNegative, Number, Positive, Record
from macprof.model.vocab import AttemptStatus, TaskStop
from macprof.model.kind import OWN, PATH, TEXT, VOCAB


class TaskSetInfo(Record):
    """The task file: where it came from, its sha256 and size, its tasks and refused lines."""

    KINDS = {"source": PATH, "sha256": VOCAB}

    source: str | None = None
    sha256: str | None = None
    bytes: int | None = None
    tasks: Count = 0  # lines accepted
    refused: Count = 0  # lines refused (each a TaskRefusal)


class TaskRefusal(Record):
    """A task that did not run, in one line: a malformed line (its number), a task longer than
    the context, a template that did not render."""

    KINDS = {"task": TEXT, "reason": TEXT}

    REQUIRED_KEYS = ("reason",)  # in every log (the schema's required), though code may leave them out
    line: int | None = None
    task: str | None = None
    reason: str = ""


class ToolCall(Record):
    """A tool-call reply's three steps, each false from the first that failed."""

    parses: bool = False
    right_function: bool = False
    arguments_valid: bool = False


class TaskAttempt(Record):
    """One attempt at a task: the raw stamps and ids, the reply, why it ended, the verdict."""

    KINDS = {"task": TEXT, "status": VOCAB, "error": TEXT, "tokens": TEXT, "stop": VOCAB, "text": TEXT,
             "message": TEXT, "claims": TEXT, "check_error": TEXT}

    REQUIRED_KEYS = ("task", "attempt", "status")  # in every log, though code may leave them out
    task: str = ""
    attempt: Positive = 1  # 1 is the first; a retry adds the checker's message as the next user turn
    # "ok"; "error" (the engine raised: the error, and no verdict); "timeout" or "crashed" (the
    # parent killed the worker past the timeout, or it died: the parent's record of the attempt,
    # its wall time t0..t_end and no reply, no tokens known; the phase goes on with the next task)
    status: AttemptStatus = "ok"
    error: str | None = None
    t0: int | None = None  # before its prompt is rendered: its request_start's (ns, the worker's perf_counter)
    t_tokenized: int | None = None
    token_times: tuple[int, ...] = ()  # one stamp per generated id, the EOS included
    # the prompt's tokens; None: unknown (a server that gave no count, or one that is no count: its
    # claim; an attempt that failed or was cut before its prompt was counted)
    prompt_tokens: Count | None = None
    tokens: tuple[int, ...] = ()  # every id generated, the EOS that ended the reply included
    stop: TaskStop | None = None  # "eos" or "max_tokens"
    text: str = ""  # the reply: the ids before the EOS, detokenized
    correct: bool | None = None
    message: str | None = None  # the checker's message (the next user turn's on a retry)
    tool: ToolCall | None = ABSENT  # tool-call tasks only
    # through a server (one chat completion, not streamed), or an attempt cut by the parent: its end stamp
    t_end: int | None = ABSENT
    completion_tokens: int | None = ABSENT  # through a server: its usage count
    # a sampled attempt (a retry at --temperature): what it was drawn with (run/phases/tasks.py attempt_seed)
    temperature: Number | None = ABSENT
    seed: int | None = ABSENT
    # through a server: what its usage said that is no count (negative, not an integer, more than
    # the request allows: engines/wire.py chat_reply), keyed by field, as it said it; never a count
    claims: dict[str, str] | None = ABSENT
    # the checker's own time (ns), after the attempt's window (run/checking.py): in neither its
    # wall time nor the time per correct answer; absent where no checker ran (an error, a cut)
    check_ns: Count | None = ABSENT
    # why the checker could not judge the reply (past its bound, what it raised): the attempt is
    # then not right, its message says so
    check_error: str | None = ABSENT


class TaskResult(Record):
    """One task's attempts, as run: solved at which attempt (None: not within the attempts)."""

    KINDS = {"task": TEXT, "category": TEXT, "checker": VOCAB}

    REQUIRED_KEYS = ("task", "attempts")  # in every log (the schema's required), though code may leave them out
    task: str = ""
    category: str | None = None
    checker: str = ""  # the checker's type
    solved_at: int | None = None
    attempts: tuple[TaskAttempt, ...] = ()


class Proportion(Record):
    """k of n, with its 95 % Wilson score interval."""

    REQUIRED_KEYS = ("k", "n")  # in every log (the schema's required), though code may leave them out
    k: Count = 0
    n: Count = 0
    value: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None


class ToolValiditySummary(Record):
    """Of the attempts at tool-call tasks: how many parsed, named the right function, had valid arguments."""

    attempts: Count = 0
    parses: Proportion | None = None
    right_function: Proportion | None = None
    arguments_valid: Proportion | None = None


class TasksSummary(Record):
    KINDS = {"energy_reason": OWN, "tokens_reason": OWN}
    tasks: Count = 0  # tasks run (refused ones are not counted)
    first: Proportion | None = None  # accuracy at the first attempt
    within: Proportion | None = None  # accuracy within the attempts allowed
    tool_calls: ToolValiditySummary | None = None
    mean_attempts_to_correct: Number | None = None  # over the tasks solved
    attempts_run: Count = 0
    wall_s: Number | None = None  # every attempt's wall time, tokenizing to its last token, failed ones included
    tokens_generated: Count = 0  # every attempt's generated ids (of the attempts whose ids are known)
    attempts_cut: Count = 0  # attempts the parent cut (a timeout, a crash): their time counted, their tokens unknown
    time_per_correct_s: Number | None = None  # wall_s / tasks solved
    tokens_per_correct: Number | None = None  # None where an attempt's tokens are unknown (tokens_reason)
    tokens_reason: str | None = None
    energy_per_correct_j: Number | None = None
    energy_reason: str | None = None  # why energy per correct answer is unknown


class TasksPhase(Record):
    # the task set's own words (a task's id, its reply, the checker's message): free text
    KINDS = {"prompt_format": TEXT, "tool_format": VOCAB, "generation": OWN}
    REQUIRED_KEYS = ("results", "refusals", "failures")  # in every log, though code may leave them out
    # from the attempts and the parent's records (analyse/tasks.py): tasks_start journals the rest
    # (its refusals are the file's lines; a task refused in this model adds its own)
    BUILT = ("summary", "results", "failures", "memory")
    task_set: TaskSetInfo | None = None
    prompt_format: str | None = None  # the chat template (--chat-template, the model's), or macprof's fallback form
    tool_format: str | None = None  # how tool calls were read (run/checkers.py TOOL_FORMATS)
    generation: str | None = None  # how replies end (EOS, unlike the speed phases), greedy or sampled
    attempts_allowed: Positive = 1
    temperature: NonNegative = 0.0
    seed: int | None = None
    context_tokens: int | None = None  # the context a task's prompt and reply must fit
    summary: TasksSummary | None = None
    results: tuple[TaskResult, ...] = ()
    refusals: tuple[TaskRefusal, ...] = ()
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = ABSENT


# -- events (registered in model/events.py EVENTS) -------------------------------------------
class TasksStart(Event, Journals[TasksPhase]):
    """The task set is read and the prompts' form known: what will run, how, and the lines refused."""

    KIND = "tasks_start"
    phase: str


class TaskAttemptDone(Event, Journals[TaskAttempt]):
    """One attempt's raw record: a TaskAttempt, with the task's phase, category and checker."""

    KIND = "task_attempt"
    ENDS_ITEM = True
    phase: str
    category: str | None = None
    checker: str = ""


class TaskCheckStart(Event):
    """An attempt's reply is complete: its timed window ended, and its checker runs now, bounded
    by the worker (``bound_s``, run/checking.py): the parent waits that long (and a grace) before
    it calls the attempt hung, instead of the rest of --timeout."""

    KIND = "check_start"
    DURABLE = False
    phase: str
    task: str = ""
    attempt: int = 1
    bound_s: Number = 0.0


class TaskRefused(Event):
    """A task that could not run in this model (longer than the context, a template error)."""

    KIND = "task_refused"
    ENDS_ITEM = True  # its attempt was announced: a refusal ends it
    phase: str
    line: int | None = None
    task: str | None = None
    reason: str = ""


# the phase's journal events (macprof/phases.py ``events``: model/events.py EVENTS has them)
EVENTS = (TasksStart, TaskAttemptDone, TaskCheckStart, TaskRefused)
