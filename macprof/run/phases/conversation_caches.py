"""The conversation phase's three ways to meet a cache (run/phases/conversation.py), one class
each, and where and why reuse stopped, pure:

- ``InProcessCache``: an engine in this process; its one cache holds the ids the last request
  left (``cached_tokens_after``), put back by computing them again from an empty cache.
- ``ServerTextCache``: a server sent the text rendered here (a completions request); it holds the
  last requests it served, as many as it holds at once (``cache_holds``), put back by sending them
  again (greedy: the same replies); its generated ids are not known here, only its count.
- ``ServerChatCache``: a server sent the messages (``--api chat``): it renders and tokenizes them,
  so only its counts are known here.

Each tells, for a turn: what the cache held before it (``held_before``), how to put that back or
empty it, what a request left, what the natural request told (``natural``), and where and why reuse
stopped (``stop``, from the pure functions below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence, Union, cast

from macprof.engines.base import Engine, EngineCore, ServerEngine, common_prefix, reusable_prefix
from macprof.errors import MacprofError
from macprof.model.phases import Request, ServerReport
from macprof.run.phases.common import prime, reply_end
from macprof.run.prompts import Prompt

SERVER_ENDS = {"stop": "eos", "length": "max_tokens"}  # a server's finish_reason, as a reply's end


class Previous(NamedTuple):
    """An app's last exchange as the protocol knows it: its prompt's ids and text, the reply (its
    ids; a server's: its chunks' texts), the reply's text as the history holds it (the assistant's
    message), and the ids the engine's cache held after it (a server's: not known)."""

    ids: list[int]
    text: str
    reply: list
    reply_text: str = ""
    held: tuple[int, ...] = ()
    ended: str | None = None  # "eos" or "max_tokens" (common.reply_end)
    n_reply: int | None = None  # the reply's tokens (a server's: its count; None where not known)

    @property
    def content(self) -> list:
        """The reply's ids that are its message: those before the end-of-generation id."""
        return list(self.reply[:-1] if self.ended == "eos" else self.reply)


@dataclass(frozen=True)
class Held:
    """What the cache held when a turn started: its ids (a server's: the held request's prompt
    ids, its reply's being the server's), whose conversation they were (None: nothing of the
    phase's), and a server's counts of that request's prompt and reply."""

    ids: list[int]
    app: int | None = None
    prompt_tokens: int = 0
    reply_tokens: int | None = None


@dataclass(frozen=True)
class Natural:
    """What the natural request told: the reply (ids; a server's: its chunks' texts), what it
    reused, why it kept nothing (an in-process engine's cut_refusal) or why the reuse is unknown
    (a server's report), the reply's tokens and how it ended, and the ids the cache held after it
    (an in-process engine's; a server's: none known)."""

    reply: list
    reused: int | None
    refused: str | None
    unreported: str | None
    reply_tokens: int | None
    ended: str | None
    kept: list[int]


@dataclass(frozen=True)
class Stop:
    """Where and why reuse stopped short of what the cache held, and what bounds the report."""

    held_tokens: int
    common_prefix: int | None
    kind: str
    reason: str
    expected_reuse: int | None = None  # an in-process engine's: the reusable prefix of the held ids
    reuse_bound: int | None = None  # a server's: the most it may have reused
    ideal_reuse: int | None = None  # what a cache of this app's own last exchange would serve
    reply_text_ids_equal: bool | None = None
    not_emptied: str | None = None


@dataclass(frozen=True)
class Seen:
    """What a turn's two requests showed, for where and why reuse stopped: whose turn, its
    prompt, the app's last exchange, the natural request's report, the emptied request, and the
    prompt's tokens as the requests counted them."""

    app: int
    prompt: Prompt
    last: Previous | None
    natural: Natural
    emptied: Request
    prompt_tokens: int


@dataclass(frozen=True)
class Exchange:
    """What a turn leaves: the reply (ids; a server's: its chunks' texts), the prompt's tokens as
    its request counted them, the ids the cache held after it (an in-process engine's) and the
    reply's tokens (a server's: its count, None where it gave none)."""

    reply: list
    prompt_tokens: int
    kept: list[int]
    reply_tokens: int | None


class _RenderedHere:
    """Prompts rendered and tokenized here (an engine in process; a server sent text)."""

    engine: EngineCore

    def prompt_of(self, text: str, messages: Sequence[dict]) -> Prompt:
        return Prompt(text, tuple(self.engine.tokenize_chat(text)), chat=True)

    def prompt_tokens(self, prompt: Prompt, rec: Request, where: str) -> int:
        """The prompt's tokens: the request tokenizes its text again, timed, and must read the same ids."""
        if rec.prompt_tokens != len(prompt.ids):
            raise MacprofError(f"conversation: {where}: the request read {rec.prompt_tokens} prompt tokens, the "
                               f"rendered prompt has {len(prompt.ids)}")
        return len(prompt.ids)


class InProcessCache(_RenderedHere):
    """An engine in this process: one cache, one sequence, as llama.cpp's and MLX's are."""

    engine: Engine
    renders = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.eos = frozenset(engine.eos_ids)  # an app's generation ends at the model's end-of-generation id
        self.ids: list[int] | None = None  # what it holds; None: not known (emptied by a diagnosis, or not yet)
        self.held = Held([])

    def holds(self, apps: int) -> str | None:
        return holds_note(apps, 1, "an in-process engine's one cache holds one sequence")

    def generation(self, gen_tokens: int) -> str:
        return (f"a reply ends at the model's first end-of-generation id ({len(self.eos)} id(s)) or at --gen-tokens "
                f"({gen_tokens}), as an app's does (the speed phases hold EOS off); its ids up to that end, "
                f"detokenized, are the assistant's message, rendered back through the template's assistant turn")

    def held_before(self, prompt: Prompt) -> Held:
        return self.held

    def restore(self, held: Held) -> None:
        """The held ids computed again from an empty cache, untimed (unless it holds them now)."""
        if self.ids == held.ids:
            return
        self.engine.reset()
        if held.ids:
            prime(self.engine, Prompt("", tuple(held.ids)))  # prefills the ids; the one token yielded is not cached
        self.ids = list(held.ids)

    def empty(self) -> None:
        self.engine.reset()

    def forget(self) -> None:
        self.ids = None

    def sent(self, prompt: Prompt, rec: Request) -> None:
        self.ids = held_after(list(prompt.ids), rec)

    def natural(self, prompt: Prompt, rec: Request) -> Natural:
        tokens = list(cast(tuple[int, ...], rec.tokens))  # an in-process request's: ids
        return Natural(tokens, rec.reused_tokens, self.engine.reuse_refused, None, len(tokens),
                       reply_end(tokens, self.eos), held_after(list(prompt.ids), rec))

    def stop(self, held: Held, seen: Seen) -> Stop:
        ids, last = list(seen.prompt.ids), seen.last
        common, kind, reason = why_stopped(held.ids, held.app, seen.app, ids, seen.prompt.text, last,
                                           seen.natural.refused)
        prev = last or Previous([], "", [])
        content = prev.content  # the reply's ids that are its message (its end-of-generation id is the template's)
        equal = ids[len(prev.ids):len(prev.ids) + len(content)] == content \
            if last and ids[:len(prev.ids)] == list(prev.ids) else None
        # what a cache of this app's own last prompt and reply would serve: what it held after them
        return Stop(len(held.ids), common, kind, reason, expected_reuse=reusable_prefix(held.ids, ids),
                    ideal_reuse=reusable_prefix(prev.held, ids), reply_text_ids_equal=equal)

    def reply_text(self, said: Previous) -> str:
        return self.engine.detokenize(said.content)

    def ended(self, reply: list) -> str | None:
        return reply_end(reply, self.eos)

    def replayed_tokens(self, reply: list) -> int | None:
        return len(reply)

    def served(self, app: int, prompt: Prompt, done: Exchange) -> None:
        self.held = Held(list(done.kept), app)


@dataclass(frozen=True)
class Served:
    """A request a server served, as its cache holds it: whose, its prompt (ids and the request
    itself, to send again), its prompt's count and its reply's."""

    app: int
    ids: list[int]
    prompt: Prompt
    prompt_tokens: int
    reply_tokens: int | None


class ServerTextCache(_RenderedHere):
    """A server sent the text rendered here. Its cache is the last requests it served, as many as
    it holds (its slots; least recently served first out); put back by the displacing requests of
    ``reset``, then those requests sent again in their order, greedy, for as many tokens."""

    engine: ServerEngine
    renders = False
    eos: frozenset[int] = frozenset()  # its replies end where the server ends them

    def __init__(self, engine: ServerEngine, gen_tokens: int) -> None:
        self.engine, self.n = engine, gen_tokens
        self.slots = engine.cache_holds()[0] or 1
        self.recent: list[Served] = []  # least recently served first
        self.state: list[Prompt] | None = None  # what it holds now: [] nothing of this phase's; None: not known
        self.seen = engine.displacements  # a counting request displaces the cache too (engines/openai.py _count)

    def holds(self, apps: int) -> str | None:
        return holds_note(apps, *self.engine.cache_holds())

    def generation(self, gen_tokens: int) -> str:
        return (f"a reply ends where the server ends it, at its end-of-generation id or at --gen-tokens ({gen_tokens}), "
                f"as an app's (the speed phases hold EOS off); its text is the assistant's message, its tokens the "
                f"server's count")

    def held_before(self, prompt: Prompt) -> Held:
        """Of the requests it holds, the one it serves this prompt from: the longest shared prefix."""
        if not self.recent:
            return Held([])
        best = max(reversed(self.recent), key=lambda r: common_prefix(r.ids, list(prompt.ids)))
        return Held(best.ids, best.app, best.prompt_tokens, best.reply_tokens)

    def restore(self, held: Held) -> None:
        from macprof.engines import wire

        prompts = [r.prompt for r in self.recent]
        if self.state == prompts:
            return
        self.engine.reset()
        try:
            for prompt in prompts:
                for _ in self.engine.request(prompt.text, self.n, prompt.messages):
                    pass
        except wire.ServerError as exc:
            raise MacprofError(f"conversation: the natural cache could not be put back (an untimed request "
                               f"of a previous prompt again): {exc}") from None
        self.state, self.seen = prompts, self.engine.displacements

    def empty(self) -> None:
        self.engine.reset()
        self.state, self.seen = [], self.engine.displacements

    def forget(self) -> None:
        self.state = None

    def sent(self, prompt: Prompt, rec: Request) -> None:
        # a counting request after it (the same prompt, after a displacement) leaves it alone
        held = self.state or [] if self.engine.displacements == self.seen else []
        self.state, self.seen = after(held, prompt, self.slots), self.engine.displacements

    def natural(self, prompt: Prompt, rec: Request) -> Natural:
        told = rec.server or ServerReport()
        return Natural(list(rec.tokens), rec.reused_tokens, None, self.engine.reuse_unreported, told.completion_tokens,
                       SERVER_ENDS.get(told.finish_reason or ""), [])

    def stop(self, held: Held, seen: Seen) -> Stop:
        app, ids, text, last, emptied = seen.app, list(seen.prompt.ids), seen.prompt.text, seen.last, seen.emptied
        displaced = self.engine.displacing_ids()
        # the held request's reply is known by the server's count (where it gave none: at most --gen-tokens);
        # nothing of this phase's held: what the displacing request left
        n_reply = (self.n if held.reply_tokens is None else held.reply_tokens) if held.app is not None else 1
        held_ids = held.ids if held.app is not None else displaced
        found = server_stop(held_ids, n_reply, held.app, app, ids, text, last, seen.natural.reused,
                            seen.natural.unreported)
        ideal = server_stop(last.ids, self.n if last.n_reply is None else last.n_reply, app, app, ids, text, last,
                            None, None).bound if last else 0
        # the emptied half: after the displacing requests, the server may share no more than they leave
        most = server_stop(displaced, 1, None, app, ids, text, None, None, None).bound or 0  # ids known: a bound
        not_emptied = None
        if emptied.reused_tokens is not None and emptied.reused_tokens > most:
            not_emptied = (f"the emptied request reused {emptied.reused_tokens} tokens, more than the displacing "
                           f"requests leave shared ({most}): the server holds more than they displaced (its slots or "
                           f"prompt cache), so that half is not an empty cache's")
        return Stop(len(held_ids) + n_reply, found.common, found.kind, found.reason,
                    expected_reuse=reusable_prefix(held_ids, ids), reuse_bound=found.bound, ideal_reuse=ideal,
                    not_emptied=not_emptied)

    def reply_text(self, said: Previous) -> str:
        return "".join(said.reply)  # its chunks' texts

    def ended(self, reply: list) -> str | None:
        return None  # what its chunks' texts are, ids, is not known here (its finish_reason is the turn's reply_end)

    def replayed_tokens(self, reply: list) -> int | None:
        return None  # a server's count is not in the journal's replay

    def served(self, app: int, prompt: Prompt, done: Exchange) -> None:
        self.recent = after(self.recent, Served(app, list(prompt.ids), prompt, done.prompt_tokens, done.reply_tokens),
                            self.slots)


class ServerChatCache(ServerTextCache):
    """A server sent the messages (--api chat): it applies its own template and tokenizes them,
    so the prompt's text here only names the request, and only the server's counts are known."""

    renders = True

    def prompt_of(self, text: str, messages: Sequence[dict]) -> Prompt:
        return Prompt(text, (), chat=True, messages=tuple(dict(m) for m in messages))

    def prompt_tokens(self, prompt: Prompt, rec: Request, where: str) -> int:
        return rec.prompt_tokens  # the server rendered and counted it

    def stop(self, held: Held, seen: Seen) -> Stop:
        # the held request's reply is known by the server's count (where it gave none: at most --gen-tokens)
        n_reply = (self.n if held.reply_tokens is None else held.reply_tokens) if held.app is not None else 0
        found = counted_stop(held.prompt_tokens, n_reply, held.app, seen.app, seen.prompt_tokens, seen.natural.reused,
                             seen.natural.unreported)
        return Stop(held.prompt_tokens + n_reply, found.common, found.kind, found.reason, reuse_bound=found.bound)


# the conversation phase's cache, one of the three (ServerChatCache is a ServerTextCache)
Cache = Union[InProcessCache, ServerTextCache]


def held_after(ids: list[int], rec: Request) -> list[int]:
    """The ids an in-process engine's cache holds after the request ``rec`` of ``ids``: the prompt
    and reply, as far as the engine says it holds them (``cached_tokens_after``: llama.cpp has not
    fed the last id it yielded; MLX has queued it already where the reply ended at EOS)."""
    whole = list(ids) + list(cast(tuple[int, ...], rec.tokens))  # an in-process request's: ids
    return whole[:rec.cached_tokens_after] if isinstance(rec.cached_tokens_after, int) else whole[:-1]


def after(held: list, item: object, slots: int) -> list:
    """What a cache of ``slots`` entries holds after serving ``item``: it, most recent last, and the
    ``slots - 1`` served before it (least recently served out first)."""
    return ([x for x in held if x != item] + [item])[-slots:]


def holds_note(apps: int, slots: int | None, how: str) -> str | None:
    """What the log says where ``--apps`` is more than the cache holds at once: the apps then evict
    each other, measured so (never truncated to what fits); None where it holds them all."""
    if slots is not None and apps <= slots:
        return None
    if slots is None:
        return f"--apps {apps}: how many conversations the server holds at once is {how}"
    return (f"--apps {apps} is more than the {slots} conversation(s) the cache holds at once ({how}): the apps "
            f"evict each other, and each turn is measured as it finds the cache")


# -- where and why reuse stopped (pure) ----------------------------------------------------------
class Divergence(NamedTuple):
    common: int  # the ids the prompt shares with those the cache held, from the start
    kind: str  # model/conversation.py STOP_KINDS
    reason: str


class Bounded(NamedTuple):
    common: int | None  # the ids the prompt shares with the previous prompt's (None: the server rendered them)
    bound: int | None  # the most the server may have reused (None: not known)
    kind: str
    reason: str


def server_stop(held: list[int], n_reply: int, held_by: int | None, app: int, ids: list[int], text: str,
                previous: Previous | None, reported: int | None, unreported: str | None) -> Bounded:
    """Through a server: the prompt's ids shared with the previous prompt's, from the start; the
    most the server may have reused (those, and where the prompt extends all of them the reply's
    ``n_reply`` tokens too, the prompt's last token recomputed); the stop kind; the reason. The
    server's generated ids are not known here: inside the reply, where reuse stopped is where the
    server says (``reported``, read by ``said_stop``)."""
    common = common_prefix(held, ids)
    bound = min(common + (n_reply if held and common == len(held) else 0), len(ids) - 1)
    if held_by is None:  # the cache held the displacing request of ``reset`` (a server's is not addressable)
        return Bounded(common, bound, "empty", f"the cache held only the {len(held)} tokens of the request that "
                                               f"displaced what it held: they share the first {common}")
    if held_by != app or common < len(held):
        kind, reason = divergence(common, held, held_by, app, ids, text, previous)
        if held and held_by == app and reported is not None and reported < bound:
            return Bounded(common, bound, "kept_less", f"{reason}; the server reused {reported} of the {bound} "
                                                       f"tokens the ids it held allow (its own cache policy)")
        return Bounded(common, bound, kind, reason)
    return Bounded(common, bound, *said_stop(len(held), n_reply, bound, reported, unreported, ids_known=True))


def counted_stop(held_n: int, n_reply: int, held_by: int | None, app: int, prompt_n: int, reported: int | None,
                 unreported: str | None) -> Bounded:
    """Through a server that renders the messages itself (--api chat): its ids are not known here,
    only its counts. The common prefix is not known; the most it may have reused is what it held
    (not known after the displacing request, whose count the server does not say)."""
    bound = max(0, min(held_n + n_reply, prompt_n - 1))
    if held_by is None:
        return Bounded(None, None, "empty", "the cache held only the request that displaced what it held")
    if held_by != app:
        return Bounded(None, bound, "evicted", f"the cache held app {held_by}'s conversation (where the two part is "
                                               f"not known here: the server renders and tokenizes the messages)")
    return Bounded(None, bound, *said_stop(held_n, n_reply, bound, reported, unreported, ids_known=False))


def said_stop(held_n: int, n_reply: int, bound: int, reported: int | None, unreported: str | None,
              ids_known: bool) -> tuple[str, str]:
    """Where a server's reuse stopped, by its count alone (its generated ids are never known here),
    where the cache held this app's previous prompt (``held_n`` tokens) and reply (``n_reply``):
    the stop kind and the reason. With the prompts' ids known (the prompt text rendered here), a
    count short of the previous prompt is the server's cache policy; with its counts alone (--api
    chat), it is where its template rendered the earlier turns otherwise."""
    held = f"all {held_n} tokens of the previous prompt" if ids_known else f"the {held_n + n_reply} tokens it held"
    if reported is None:
        where = f"in its {n_reply}-token reply " if ids_known else ""
        return "unreported", (f"the prompt extends {held}; " if ids_known else "") + \
            f"where reuse stopped {where}is not known: {unreported}"
    if reported >= bound - 1:  # a server may or may not hold the reply's last token
        return "none_lost", f"the server reused {reported}: the prompt extends {held} and the reply it held" \
            if ids_known else f"the server reused {reported} of {held}"
    if reported >= held_n:
        return "reply_retokenized", (
            f"at token {reported}, {reported - held_n} tokens into the previous reply (where the server says): "
            f"its text tokenizes to other ids than the {n_reply} the server generated")
    if ids_known:
        return "kept_less", f"the server reused {reported} though the prompt extends {held} (its own cache policy)"
    return "template_rewrite", (
        f"at token {reported}, inside the previous prompt of {held_n} tokens as the server rendered it: its template "
        f"rendered the earlier turns otherwise, or they tokenize otherwise where they join (its ids are not known here)")


def why_stopped(held: list[int], held_by: int | None, app: int, ids: list[int], text: str,
                previous: Previous | None, refused: str | None) -> Divergence:
    """Where the prompt's ids leave the held ones, the stop kind and the reason in words. Where
    the engine could not cut its cache back to that prefix (``refused``: a sliding window moved
    past it, a recurrent state), the kind is "cannot_go_back" and the reason says both where the
    prompt left the held ids and why the cache could not follow."""
    common = common_prefix(held, ids)
    kind, reason = divergence(common, held, held_by, app, ids, text, previous)
    if refused:
        return Divergence(common, "cannot_go_back", f"{reason}; the cache cannot be cut back to token {common}: {refused}")
    return Divergence(common, kind, reason)


def divergence(common: int, held: list[int], held_by: int | None, app: int, ids: list[int], text: str,
               previous: Previous | None) -> tuple[str, str]:
    """The stop kind and its reason where the prompt's ids leave the held ones at token ``common``."""
    if not held:
        return "empty", "the cache held nothing"
    if held_by != app:
        return "evicted", f"the cache held app {held_by}'s conversation: the two share their first {common} tokens"
    if common >= len(held) or common >= len(ids) - 1:
        return "none_lost", f"the prompt extends all {len(held)} tokens the cache held"
    prev = previous or Previous([], "", [])
    if common >= len(prev.ids):  # inside the previous reply
        into, written = common - len(prev.ids), prev.text + prev.reply_text
        if prev.reply_text and text.startswith(prev.text) and not text.startswith(written):
            return "template_rewrite", (f"at token {common}, {into} tokens into the previous reply: the template rendered "
                                        f"the reply otherwise than its text (the prompt differs from the previous "
                                        f"prompt and reply at character {_first_difference(written, text)})")
        if prev.ended == "eos" and into == len(prev.reply) - 1:
            return "template_rewrite", (f"at token {common}, the previous reply's end: the model ended it with id {held[common]}, "
                                        f"the template closes the assistant turn with id {ids[common]}")
        return "reply_retokenized", (f"at token {common}, {into} tokens into the previous reply: its text tokenizes to id "
                                     f"{ids[common]} where the model generated id {held[common]} (of the {len(prev.reply)} "
                                     f"generated)")
    if text.startswith(prev.text):
        return "tokenization_join", (f"at token {common}: the text extends the previous prompt's, but tokenizes "
                                     f"otherwise where the two join")
    return "template_rewrite", (f"at token {common}: the template rendered the earlier turns otherwise "
                                f"(the text differs from the previous prompt's at character "
                                f"{_first_difference(prev.text, text)})")


def _first_difference(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
