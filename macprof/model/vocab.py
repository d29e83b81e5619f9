"""The words a run-log field may hold (a status, a phase, an engine), as the types that decoding
checks and the JSON Schema lists as enums (macprof/store/schema): each list is taken from where
macprof declares it (the phase registry, the engine registry), so a phase or an engine added
there is a word of the log with nothing edited here.

To the type checker each is a str: the values reach the records from variables everywhere (an
event's field, an engine's answer), and a Literal would make every such line a cast. msgspec,
which reads the annotations at run time, gets the Literal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

from macprof.engines import ENGINES
from macprof.engines.base import WEIGHTS_HELD
from macprof.phases import NAMES

# NSProcessInfoThermalState (Foundation, NSProcessInfo.h), in its order: collect/macos.py reads it
THERMAL_STATES = ("nominal", "fair", "serious", "critical")
# Why reuse stopped where it did (ConversationTurn.stop_kind), in the order they are told apart:
STOP_KINDS = (
    "empty",  # the cache held nothing (the first request, or the cache was emptied)
    "none_lost",  # the prompt extends all the cache held: nothing was lost
    "evicted",  # the cache held another app's conversation (one slot, several apps)
    "cannot_go_back",  # the prompt diverges inside what the cache holds, and a sliding window or a recurrent state cannot be cut back
    "reply_retokenized",  # inside the previous reply: its text, tokenized again, is not the ids that were generated
    "tokenization_join",  # the text extends the previous prompt's, but tokenizes otherwise where they join
    "template_rewrite",  # the template rendered the earlier turns otherwise than before
    "unreported",  # through a server that reports no reuse: where, inside the previous reply, is not known
    "kept_less",  # a server reused less than the ids it held allow (its own cache policy)
)
BENCH_TESTS = ("pp", "tg")  # llama-bench's tests the bench phase measures: prompt processing, text generation
STORES = ("path", "hf", "llama.cpp", "ollama", "lmstudio", "demo")  # where a named model was found (collect/resolve.py)

if TYPE_CHECKING:
    PhaseName: TypeAlias = str
    EngineName: TypeAlias = str
    ThermalState: TypeAlias = str
    WeightsHeld: TypeAlias = str
    Store: TypeAlias = str
    RequestKind: TypeAlias = str
    PairKind: TypeAlias = str
    RequestMode: TypeAlias = str
    OkOrError: TypeAlias = str
    AttemptStatus: TypeAlias = str
    FailureStatus: TypeAlias = str
    CaseStatus: TypeAlias = str
    TrialStatus: TypeAlias = str
    CountStatus: TypeAlias = str
    DraftStatus: TypeAlias = str
    LoadMode: TypeAlias = str
    StopKind: TypeAlias = str
    TaskStop: TypeAlias = str
    BenchTest: TypeAlias = str
else:
    PhaseName = Literal[NAMES]
    EngineName = Literal[tuple(ENGINES)]
    ThermalState = Literal[THERMAL_STATES]
    WeightsHeld = Literal[WEIGHTS_HELD]
    Store = Literal[STORES]
    RequestKind = Literal["warmup", "measured", "first", "second"]
    PairKind = Literal["warmup", "measured"]
    RequestMode = Literal["reuse", "noreuse", "natural", "emptied", "plain", "speculative", "native"]
    OkOrError = Literal["ok", "error"]
    AttemptStatus = Literal["ok", "error", "timeout", "crashed"]  # a task attempt: timeout and crashed are the parent's
    FailureStatus = Literal["error", "timeout", "crashed", "refused"]
    CaseStatus = Literal["ok", "failed", "refused", "unsupported", "not run"]
    TrialStatus = Literal["ok", "failed", "interrupted"]
    CountStatus = Literal["ok", "differs", "error"]
    DraftStatus = Literal["ok", "refused", "error"]
    LoadMode = Literal["closed", "open"]
    TaskStop = Literal["eos", "max_tokens"]
    StopKind = Literal[STOP_KINDS]
    BenchTest = Literal[BENCH_TESTS]
