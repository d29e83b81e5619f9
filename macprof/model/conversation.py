"""The conversation phase's journal events and its record in the run log (run/phases/conversation.py
measures it, analyse/conversation.py builds it): per turn what the engine's cache held, how much of
the prompt it reused (as the engine reported it, and as the ids it held allow), where and why reuse
stopped, and TTFT with the natural cache against the cache emptied; and where each app's
conversation stopped early (its prompt no longer fit, or a turn failed), with the requests it made."""

from __future__ import annotations

from msgspec import field

from macprof.model.event_base import Event
from macprof.model.phases import Failure, OutputCheck, PhaseMemory, Request, Summary
from macprof.model.records import ABSENT, Journals, Number, Record
from macprof.model.vocab import STOP_KINDS, StopKind, TaskStop  # noqa: F401  # STOP_KINDS: readers import it from here
from macprof.model.kind import OWN, PATH, TEXT, VOCAB



class Turn(Record):
    """One turn of one app: its prompt against what the cache held before its natural request,
    and what its two requests (the cache as the turn found it, and emptied) gave."""

    KINDS = {"reuse_refused": OWN, "stop_kind": VOCAB, "stop_reason": OWN, "reuse_unreported": OWN, "not_emptied": OWN,
             "reply_end": VOCAB}
    # from its requests and the reports (analyse/conversation.py): conversation_turn journals the rest
    BUILT = ("reuse_rate", "ideal_rate", "reuse_checked", "natural", "emptied", "ttft_saved_s")
    app: int = 0
    turn: int = 0
    prompt_tokens: int = 0
    held_tokens: int = 0  # what the cache held before the natural request
    held_by: int | None = None  # the app whose request left it (None: nothing held)
    # the prompt's ids shared with the held ids, from the start, and what they allow (the prompt's last
    # token recomputed); None where the ids are the server's (--api chat: it renders the messages)
    common_prefix: int | None = 0
    expected_reuse: int | None = 0
    reused_tokens: int | None = None  # what the engine reported it reused
    reuse_rate: Number | None = None  # reused_tokens / prompt_tokens
    ideal_reuse: int | None = 0  # what a cache of this app's own last prompt and reply would allow (a server's: at most)
    ideal_rate: Number | None = None
    reuse_refused: str | None = None  # the engine's reason for keeping nothing (cut_refusal)
    # through a server (its generated ids are not returned): the most it may have reused, and why
    # its reuse is unknown where it reported none
    reuse_bound: int | None = None
    reuse_unreported: str | None = None
    # the engine's report equals what the held ids allow (or it said why not); a server's is at most reuse_bound
    reuse_checked: bool | None = None
    stop_kind: StopKind = "empty"  # one of STOP_KINDS
    stop_reason: str = ""  # in words, with the position
    reply_text_ids_equal: bool | None = None  # the previous reply re-tokenized gives the generated ids
    not_emptied: str | None = None  # through a server: its emptied half found more than an emptied cache holds
    fits: bool = True  # False: the prompt no longer fits the context; the conversation stopped here
    natural: Request | None = ABSENT
    emptied: Request | None = ABSENT
    ttft_saved_s: Number | None = None  # emptied TTFT - natural TTFT
    check: OutputCheck | None = None  # natural vs emptied outputs, token by token
    # the natural request's reply: its ids, and how it ended ("eos": at the model's end-of-generation
    # id, counted among them; "max_tokens": at --gen-tokens); a server's: not known (its EOS held off)
    reply_tokens: int | None = None
    reply_end: TaskStop | None = None


class AppStop(Record):
    """Where an app's conversation stopped before its last turn, and why: the turn whose prompt no
    longer fit the context, or that failed (its template or tokenizer raised, a request failed or
    its reply could not be read), with the requests it made before it stopped (a failed one among
    them). The other apps went on."""

    KINDS = {"reason": TEXT, "error": TEXT}  # macprof's sentence, quoting an engine's, a template's or a server's words
    app: int = 0
    turn: int = 0
    reason: str = ""  # in words, with the turn
    error: str | None = None  # the turn failed: why (None: its prompt no longer fit the context)
    prompt_tokens: int | None = None  # its prompt's tokens as rendered here (None: not rendered, or --api chat)
    natural: Request | None = None
    emptied: Request | None = None


class ConversationSummary(Record):
    KINDS = {"stops": VOCAB}
    reuse_rate: Summary = field(default_factory=Summary)  # per turn after the first of each app
    reuse_rate_p10: Number | None = None
    ideal_rate: Summary = field(default_factory=Summary)
    hit_rate: Number | None = None  # all turns' reused tokens over all their prompt tokens
    ideal_hit_rate: Number | None = None
    ttft_natural_s: Summary = field(default_factory=Summary)
    ttft_emptied_s: Summary = field(default_factory=Summary)
    ttft_saved_s: Summary = field(default_factory=Summary)
    # TTFT growth with context: seconds per 1,000 prompt tokens (least squares over the turns)
    ttft_growth_natural_s_per_kt: Number | None = None
    ttft_growth_emptied_s_per_kt: Number | None = None
    stops: dict[str, int] = field(default_factory=dict)  # turns per stop_kind
    identical: int = 0
    near_ties: int = 0
    failed_checks: int = 0
    unchecked_reports: int = 0  # turns where the engine's reported reuse is not what its held ids allow
    unreported: int = 0  # turns whose reuse the server did not report
    not_emptied: int = 0  # turns whose emptied half found more than an emptied cache holds (a server's)


class ConversationPhase(Record):
    # the template's path is a file's (--chat-template) or where the model's came from
    # stopped: macprof's sentence, or a failed turn's reason quoting an engine's, a template's or a server's words
    KINDS = {"template_source": VOCAB, "template_path": PATH, "template_sha256": VOCAB, "app_order": VOCAB,
             "stopped": TEXT, "holds": OWN, "generation": OWN}
    # from the settings and the turns (analyse/conversation.py): conversation_start journals the rest
    BUILT = ("turns_planned", "app_order", "turns", "stops", "stopped", "summary", "failures", "memory")
    template_source: str | None = None  # "model", "file" or "fallback" (run/chat.py)
    template_path: str | None = None
    template_sha256: str | None = None
    apps: int = 1
    turns_planned: int = 0
    app_order: str | None = None
    turns: tuple[Turn, ...] = ()  # the turns measured
    stops: tuple[AppStop, ...] = ()  # each app's conversation that stopped early, where and why
    # an older log's (before stops): the first stop's reason alone, its turn and requests not kept
    stopped: str | None = ABSENT
    holds: str | None = None  # where --apps is more than the cache holds at once, or that is not known: said so
    generation: str | None = None  # how a reply ends and goes back into the history, in words
    summary: ConversationSummary = field(default_factory=ConversationSummary)
    failures: tuple[Failure, ...] = ()
    memory: PhaseMemory | None = None

    @property
    def stop_reasons(self) -> tuple[str, ...]:
        """Why each app's conversation stopped early, in the order they stopped (an older log's
        one reason)."""
        return tuple(s.reason for s in self.stops) or ((self.stopped,) if self.stopped else ())


# -- events (registered in model/events.py EVENTS) -------------------------------------------
class ConversationStart(Event, Journals[ConversationPhase]):
    """The phase's template and schedule, before its first request."""

    KIND = "conversation_start"
    REQUIRED = ("template_source",)  # "model", "file" or "fallback" (run/chat.py)
    phase: str
    turns: int = 0  # per app (the phase's record: turns_planned)
    order: tuple[tuple[int, int], ...] = ()  # (app, turn) in the order they ran


class ConversationTurn(Event, Journals[Turn]):
    """One turn of one app: its prompt against what the cache held before its natural request
    (the Turn the log keeps, less what its requests give); or the turn its app's conversation
    stopped at, its prompt no longer fitting (``fits`` false) or failed (``error``): the log's
    AppStop, from its ``stop_reason``, ``error`` and ``prompt_tokens``."""

    KIND = "conversation_turn"
    REQUIRED = ("app", "turn")
    # a turn that failed before its prompt was rendered has no prompt_tokens (its record: AppStop's None)
    DEFAULTS = {"prompt_tokens": ABSENT}
    phase: str
    # the turn failed (its template or tokenizer raised, a request failed): why; the app's
    # conversation stopped here (stop_reason says so), the other apps went on
    error: str | None = ABSENT


# the phase's journal events (macprof/phases.py ``events``: model/events.py EVENTS has them)
EVENTS = (ConversationStart, ConversationTurn)
