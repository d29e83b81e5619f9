"""conversation: seeded dialogues sent as apps send them, and what the engine's cache really reuses.

Each app (``--apps``) has its own system prompt and conversation; they take turns on the one
engine (``--app-order``). Every turn the app's whole conversation is rendered again from its
messages through the chat template (run/chat.py) to text, then to ids, with the model's replies
appended as text, as a chat app does; an agent (``--tool-tokens``) appends a tool result after
each reply. The engine's cache is left as the previous request left it (the natural cache: one
slot, as llama.cpp's and MLX's in-process caches are), and each turn is measured twice,
alternating which goes first: with that natural cache, and with the cache emptied. Nothing is
cached for the engine: what it reuses is what it finds, as ``reused_tokens`` reports it, checked
against the ids the cache held (ConversationTurn.expected_reuse). Where reuse stopped short of
what the cache held, the turn says where and why (model/conversation.py STOP_KINDS).

Generation is greedy and ends as an app's does: at the model's first end-of-generation id or at
``--gen-tokens``, whichever comes first (the speed phases hold EOS off for exact lengths; the
tasks phase ends its replies so too). The reply goes back into the history as the model produced
it: its ids up to that end, detokenized, as the assistant's message, which the next turn renders
through the template's assistant turn. What the engine's cache holds after a request is what it
says it holds (``cached_tokens_after``: llama.cpp has not fed the last id it yielded, MLX has
queued it already). Between the two halves the
natural state is put back, untimed, by computing the held ids again where the other half (or
the output check's diagnosis) emptied the cache. A turn whose prompt no longer fits the context,
or that fails (its template or tokenizer raises, a request fails or its reply cannot be read),
stops that app's conversation, with the reason (``ConversationTurn.error``); the turns before
are kept, and the other apps go on.

Through a server (``--serve``, ``--endpoint``) each turn's prompt is the text rendered here (a
completions request, as an app that sends text does; the model's own template where its file is
known here, engines/openai.py ``chat_template``), its reply ending where the server ends it (nothing
holds its EOS off: ``replies_end_at_eos``), and what it reused is what the server reports
(``usage.prompt_tokens_details.cached_tokens``, llama.cpp's ``timings.cache_n``), raw in each
request's ``server`` record; where it reports none the reuse is unknown, with the reason, never
guessed from TTFT. Its cache is not addressable: it is emptied by a short unrelated request (the
engine's ``reset``: it displaces a one-prompt cache, which is how macprof starts both servers), and
the natural state is put back, untimed, by sending the request that left it again (greedy: the
same reply). The server does not return the ids it generated, so what its cache held is known
exactly up to the previous prompt, and by its count beyond: a turn's ``reuse_bound`` is the most
the server may have reused, and a report above it fails the check. How many conversations the
server holds at once (``cache_holds``) is said where ``--apps`` is more (``holds``).
"""

from __future__ import annotations

import hashlib
import random
from typing import NamedTuple

from macprof.engines.base import common_prefix, lacks, reusable_prefix
from macprof.errors import MacprofError, reason
from macprof.model import events as ev
from macprof.model.conversation import ConversationStart, ConversationTurn
from macprof.model.phases import ServerReport
from macprof.run.chat import template_for
from macprof.run.phases.common import PhaseContext, _pause, announced, compare_outputs, reply_end, request_key, \
    timed_request
from macprof.run.prompts import Prompt

PHASE = "conversation"


SERVER_ENDS = {"stop": "eos", "length": "max_tokens"}  # a server's finish_reason, as a reply's end


class Previous(NamedTuple):
    """An app's last request as the protocol knows it: its prompt's ids and text, the reply (its
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


def generation_note(eos: int, gen_tokens: int) -> str:
    return (f"a reply ends at the model's first end-of-generation id ({eos} id(s)) or at --gen-tokens ({gen_tokens}), "
            f"as an app's does (the speed phases hold EOS off); its ids up to that end, detokenized, are the "
            f"assistant's message, rendered back through the template's assistant turn")


def server_generation(gen_tokens: int) -> str:
    return (f"a reply ends where the server ends it, at its end-of-generation id or at --gen-tokens ({gen_tokens}), as "
            f"an app's (the speed phases hold EOS off); its text is the assistant's message, its tokens the server's count")


def schedule(apps: int, turns: int, order: str, seed: int = 0) -> list[tuple[int, int]]:
    """(app, turn) in the order they run: round-robin, or a seeded random interleaving that keeps
    each app's own turns in order."""
    if order == "round-robin":
        return [(a, t) for t in range(turns) for a in range(apps)]
    rng = random.Random(f"{seed}:apps")
    next_turn = {a: 0 for a in range(apps)}
    out = []
    while next_turn:
        a = rng.choice(sorted(next_turn))
        out.append((a, next_turn[a]))
        next_turn[a] += 1
        if next_turn[a] == turns:
            del next_turn[a]
    return out


def server_stop(held: list[int], n_reply: int, held_by: int | None, app: int, ids: list[int], text: str,
                previous: Previous | None, reported: int | None,
                unreported: str | None) -> tuple[int, int, str, str]:
    """Through a server: (the prompt's ids shared with the previous prompt's, from the start; the
    most the server may have reused: those, and where the prompt extends all of them the reply's
    ``n_reply`` tokens too, the prompt's last token recomputed; the stop kind; the reason). The
    server's generated ids are not known here: inside the reply, where reuse stopped is where the
    server says (``reported``)."""
    d = common_prefix(held, ids)
    bound = min(d + (n_reply if held and d == len(held) else 0), len(ids) - 1)
    if held_by is None:  # the cache held the displacing request of ``reset`` (a server's is not addressable)
        return d, bound, "empty", (f"the cache held only the {len(held)} tokens of the request that displaced what "
                                   f"it held: they share the first {d}")
    if held_by != app or d < len(held):
        kind, reason = _divergence(d, held, held_by, app, ids, text, previous)
        if held and held_by == app and reported is not None and reported < bound:
            return d, bound, "kept_less", (f"{reason}; the server reused {reported} of the {bound} tokens "
                                           f"the ids it held allow (its own cache policy)")
        return d, bound, kind, reason
    if reported is None:
        return d, bound, "unreported", (f"the prompt extends all {len(held)} tokens of the previous prompt; "
                                        f"where reuse stopped in its {n_reply}-token reply is not known: {unreported}")
    if reported >= bound - 1:  # a server may or may not hold the reply's last token
        return d, bound, "none_lost", (f"the server reused {reported}: the prompt extends the previous prompt "
                                       f"and reply it held")
    if reported >= len(held):
        return d, bound, "reply_retokenized", (
            f"at token {reported}, {reported - len(held)} tokens into the previous reply (where the server says): "
            f"its text tokenizes to other ids than the {n_reply} the server generated")
    return d, bound, "kept_less", (f"the server reused {reported} though the prompt extends all {len(held)} "
                                   f"tokens of the previous prompt (its own cache policy)")


def counted_stop(held_n: int, n_reply: int, held_by: int | None, app: int, prompt_n: int, reported: int | None,
                 unreported: str | None) -> tuple[int | None, int | None, str, str]:
    """Through a server that renders the messages itself (--api chat): its ids are not known here,
    only its counts. (the common prefix: not known; the most it may have reused: what it held, not
    known after the displacing request, whose count the server does not say; the stop kind; the reason)."""
    bound = max(0, min(held_n + n_reply, prompt_n - 1))
    if held_by is None:
        return None, None, "empty", "the cache held only the request that displaced what it held"
    if held_by != app:
        return None, bound, "evicted", (f"the cache held app {held_by}'s conversation (where the two part is not "
                                        f"known here: the server renders and tokenizes the messages)")
    if reported is None:
        return None, bound, "unreported", f"where reuse stopped is not known: {unreported}"
    if reported >= bound - 1:
        return None, bound, "none_lost", f"the server reused {reported} of the {held_n + n_reply} tokens it held"
    if reported >= held_n:
        return None, bound, "reply_retokenized", (
            f"at token {reported}, {reported - held_n} tokens into the previous reply (where the server says): "
            f"its text tokenizes to other ids than the {n_reply} the server generated")
    return None, bound, "template_rewrite", (
        f"at token {reported}, inside the previous prompt of {held_n} tokens as the server rendered it: its template "
        f"rendered the earlier turns otherwise, or they tokenize otherwise where they join (its ids are not known here)")


def why_stopped(held: list[int], held_by: int | None, app: int, ids: list[int], text: str,
                previous: Previous | None, refused: str | None) -> tuple[int, str, str]:
    """(the common prefix of the held ids and the prompt's, the stop kind, the reason in words).
    Where the engine could not cut its cache back to that prefix (``refused``: a sliding window
    moved past it, a recurrent state), the kind is "cannot_go_back" and the reason says both
    where the prompt left the held ids and why the cache could not follow."""
    d = common_prefix(held, ids)
    kind, reason = _divergence(d, held, held_by, app, ids, text, previous)
    if refused:
        return d, "cannot_go_back", f"{reason}; the cache cannot be cut back to token {d}: {refused}"
    return d, kind, reason


def _divergence(d: int, held: list[int], held_by: int | None, app: int, ids: list[int], text: str,
                previous: Previous | None) -> tuple[str, str]:
    if not held:
        return "empty", "the cache held nothing"
    if held_by != app:
        return "evicted", f"the cache held app {held_by}'s conversation: the two share their first {d} tokens"
    if d >= len(held) or d >= len(ids) - 1:
        return "none_lost", f"the prompt extends all {len(held)} tokens the cache held"
    prev = previous or Previous([], "", [])
    if d >= len(prev.ids):  # inside the previous reply
        k, written = d - len(prev.ids), prev.text + prev.reply_text
        if prev.reply_text and text.startswith(prev.text) and not text.startswith(written):
            return "template_rewrite", (f"at token {d}, {k} tokens into the previous reply: the template rendered the "
                                        f"reply otherwise than its text (the prompt differs from the previous prompt "
                                        f"and reply at character {_first_difference(written, text)})")
        if prev.ended == "eos" and k == len(prev.reply) - 1:
            return "template_rewrite", (f"at token {d}, the previous reply's end: the model ended it with id {held[d]}, "
                                        f"the template closes the assistant turn with id {ids[d]}")
        return "reply_retokenized", (f"at token {d}, {k} tokens into the previous reply: its text tokenizes to id "
                                     f"{ids[d]} where the model generated id {held[d]} (of the {len(prev.reply)} "
                                     f"generated)")
    if text.startswith(prev.text):
        return "tokenization_join", (f"at token {d}: the text extends the previous prompt's, but tokenizes "
                                     f"otherwise where the two join")
    return "template_rewrite", (f"at token {d}: the template rendered the earlier turns otherwise "
                                f"(the text differs from the previous prompt's at character "
                                f"{_first_difference(prev.text, text)})")


def _first_difference(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class _Cache:
    """What the engine's single cache holds, as this protocol knows it, and the untimed way back
    to a state: compute those ids again from an empty cache."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ids: list[int] | None = None  # None: not known (emptied by a diagnosis, or before the first request)

    def hold(self, ids: list[int], prompts: list[Prompt]) -> None:
        if self.ids == ids:
            return
        self.engine.reset()
        if ids:
            for _ in self.engine.generate(list(ids), 1):  # prefills ``ids``; the one token yielded is not cached
                pass
        self.ids = list(ids)

    def sent(self, ids: list[int], rec: ev.Request, prompt: Prompt) -> None:
        self.ids = held_after(ids, rec)

    def empty(self) -> None:
        self.engine.reset()

    def forget(self) -> None:
        self.ids = None


class _ServerCache:
    """A server's cache as this protocol knows it: the last requests it served, as many as it
    holds (``slots``; it then holds their prompts and replies, least recently served first out);
    the untimed way back to a state is the displacing requests of ``reset``, then those requests
    sent again in their order, greedy, for as many tokens (the same replies)."""

    def __init__(self, engine, n: int, slots: int) -> None:
        self.engine, self.n, self.slots = engine, n, slots
        self.state: list[Prompt] | None = None  # [] nothing of this phase's (displaced); None: not known
        self.seen = engine.displacements  # a counting request displaces the cache too (engines/openai.py _count)

    def hold(self, ids: list[int], prompts: list[Prompt]) -> None:
        from macprof.engines import wire

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
        self.state, self.seen = list(prompts), self.engine.displacements

    def sent(self, ids: list[int], rec: ev.Request, prompt: Prompt) -> None:
        # a counting request after it (the same prompt, after a displacement) leaves it alone
        held = self.state or [] if self.engine.displacements == self.seen else []
        self.state, self.seen = after(held, prompt, self.slots), self.engine.displacements

    def empty(self) -> None:
        self.engine.reset()
        self.state, self.seen = [], self.engine.displacements

    def forget(self) -> None:
        self.state = None


def held_after(ids: list[int], rec: ev.Request) -> list[int]:
    """The ids an in-process engine's cache holds after the request ``rec`` of ``ids``: the prompt
    and reply, as far as the engine says it holds them (``cached_tokens_after``: llama.cpp has not
    fed the last id it yielded; MLX has queued it already where the reply ended at EOS)."""
    whole = list(ids) + list(rec.tokens)
    return whole[:rec.cached_tokens_after] if isinstance(rec.cached_tokens_after, int) else whole[:-1]


def after(held: list, item, slots: int) -> list:
    """What a cache of ``slots`` entries holds after serving ``item``: it, most recent last, and the
    ``slots - 1`` served before it (least recently served out first)."""
    return ([x for x in held if x != item] + [item])[-slots:]


def holds(engine, server: bool, apps: int) -> str | None:
    """What the log says where ``--apps`` is more than the cache holds at once: the apps then evict
    each other, measured so (never truncated to what fits); None where it holds them all."""
    if not server:
        slots, how = 1, "an in-process engine's one cache holds one sequence"
    else:
        slots, how = engine.cache_holds()
    if slots is not None and apps <= slots:
        return None
    if slots is None:
        return f"--apps {apps}: how many conversations the server holds at once is {how}"
    return (f"--apps {apps} is more than the {slots} conversation(s) the cache holds at once ({how}): the apps "
            f"evict each other, and each turn is measured as it finds the cache")


def run_conversation(ctx: PhaseContext) -> None:
    """The phase; through a server, every request of it (timed, counting, a state put back) ends
    where the server ends it, as an app's (engines/openai.py ``replies_end_at_eos``)."""
    if ctx.engine.kind != "server":
        _conversation(ctx)
        return
    with ctx.engine.replies_end_at_eos():
        _conversation(ctx)


def _conversation(ctx: PhaseContext) -> None:
    engine, s, builder = ctx.engine, ctx.settings, ctx.builder
    server = engine.kind == "server"  # requests go to a server (engines/openai.py)
    # --api chat: the messages go as they are and the server applies its own template; their text
    # and ids are the server's (the text rendered here only names the request)
    renders = server and engine.renders_messages
    if renders and s.chat_template:
        raise MacprofError(f"--chat-template {s.chat_template}: through --api chat the server applies its model's "
                           f"own template to the messages (give --api completions to send text rendered here)")
    template = template_for(engine, s.chat_template)
    order = schedule(s.apps, s.turns, s.app_order)
    # an app's generation ends at the model's end-of-generation id (a server's: where the server ends it)
    eos = frozenset() if server else frozenset(engine.eos_ids)
    ctx.emit(ConversationStart(phase=PHASE, template_source="server" if renders else template.source,
                               template_path=None if renders else template.path,
                               template_sha256=None if renders else hashlib.sha256(template.text.encode()).hexdigest(),
                               apps=s.apps, turns=s.turns, order=tuple(order), holds=holds(engine, server, s.apps),
                               generation=server_generation(s.gen_tokens) if server else
                               generation_note(len(eos), s.gen_tokens)))
    messages = {a: [{"role": "system", "content": builder.words_text(f"conversation:system:{a}", s.system_tokens)}]
                for a in range(s.apps)}
    heads = {(a, t): {mode: {"phase": PHASE, "index": t, "kind": "measured", "case": f"app{a}", "mode": mode}
                      for mode in ("natural", "emptied")} for a, t in order}
    if all(request_key(h) in ctx.done for pair in heads.values() for h in pair.values()):
        return
    slots = (engine.cache_holds()[0] or 1) if server else 1
    cache = _ServerCache(engine, s.gen_tokens, slots) if server else _Cache(engine)
    engine.reset_peak_memory()
    # a warm-up, discarded: a worker's first request pays one-off costs (the same prompt as app 0's first turn)
    first = messages[0] + [{"role": "user", "content": builder.words_text("conversation:user:0:0", s.turn_tokens)}]

    def warm_up() -> dict:  # rendered and tokenized inside its announcement: under --timeout, and its own
        warm_text = template.render(first)
        warm = Prompt(warm_text, tuple(engine.tokenize_chat(warm_text)), chat=True,
                      messages=tuple(first) if renders else None)
        engine.reset()
        return timed_request(engine, warm, s.gen_tokens, ctx.clock, eos)

    announced(ctx.emit, {"phase": PHASE, "index": -1, "kind": "warmup", "case": "app0", "mode": "emptied"}, warm_up,
              record=False)
    held: list[int] = []  # through a server: the previous prompt's ids (its reply's are the server's)
    held_n = 0  # its prompt tokens, as the server counted them (--api chat: its ids are the server's)
    held_by: int | None = None
    held_reply: int | None = None  # through a server: the held request's reply tokens, as the server counted them
    # through a server: the requests its cache holds, least recently served first: (app, ids, prompt, count,
    # its reply's tokens)
    recent: list[tuple[int, list[int], Prompt, int, int | None]] = []
    last: dict[int, Previous] = {}
    stopped: set[int] = set()
    for i, (a, t) in enumerate(order):
        if a in stopped:
            continue
        if t > 0 and s.tool_tokens:  # an agent: the tool's result comes back after the reply
            messages[a].append({"role": "tool", "content": builder.words_text(f"conversation:tool:{a}:{t}", s.tool_tokens)})
        messages[a].append({"role": "user", "content": builder.words_text(f"conversation:user:{a}:{t}", s.turn_tokens)})
        # the turn announces itself before its prompt is rendered and tokenized (under --timeout: a
        # template that hangs is cut here, this turn's), then ends that part before the untimed
        # work of its requests (the pause, the cache put back), which announce themselves
        head: dict = heads[(a, t)]["natural" if i % 2 == 0 else "emptied"]
        ctx.emit(ev.RequestStart(**head))
        try:
            text = template.render(messages[a])
            ids = engine.tokenize_chat(text) if not renders else []  # --api chat: the server's, not known here
        except Exception as exc:  # noqa: BLE001 - the template's or the tokenizer's: this app's conversation alone
            ctx.emit(ev.RequestEnd(**head))
            _failed(ctx, cache, stopped, a, t, exc)
            continue
        ctx.emit(ev.RequestEnd(**head))
        prompt = Prompt(text, tuple(ids), chat=True, messages=tuple(dict(m) for m in messages[a]) if renders else None)
        if ctx.n_ctx and not renders and len(ids) + s.gen_tokens > ctx.n_ctx:
            ctx.emit(ConversationTurn(phase=PHASE, app=a, turn=t, prompt_tokens=len(ids), fits=False,
                                      stop_kind="empty", stop_reason=f"{len(ids)} prompt + {s.gen_tokens} generated "
                                      f"tokens exceed the context of {ctx.n_ctx}: app {a}'s conversation stops here"))
            stopped.add(a)
            continue
        pair = heads[(a, t)]
        recorded = {mode: ctx.done.get(request_key(h)) for mode, h in pair.items()}
        if all(v is not None for v in recorded.values()):  # measured before a resume: the recorded reply and cache
            reply, counted = list(recorded["natural"] or ()), len(ids)
            left = ctx.done_cached.get(request_key(pair["natural"]))
            kept = (list(ids) + reply)[:left] if left is not None else list(ids) + reply[:-1]
            n_reply = None if server else len(reply)  # a server's count is not in the journal's replay
        else:
            if server and recent:  # of what it holds, the server serves the prompt the longest shared prefix
                held_by, held, _, held_n, held_reply = max(reversed(recent), key=lambda r: common_prefix(r[1], ids))
            try:
                reply, counted, kept, n_reply = _turn(ctx, cache, pair, i, a, t, prompt,
                                                      (held, [r[2] for r in recent], held_by, held_n, held_reply),
                                                      last.get(a), server, eos)
            except Exception as exc:  # noqa: BLE001 - a failed request, or what its reply made raise: this app alone
                _failed(ctx, cache, stopped, a, t, exc)
                continue
        ended = None if server else reply_end(reply, eos)
        # the assistant's message: the reply as the model produced it, up to its end (a server's: its chunks' texts)
        said = Previous(ids, text, reply, "", tuple(kept), ended, n_reply)
        said = said._replace(reply_text="".join(reply) if server else engine.detokenize(said.content))
        last[a] = said
        # what the app's request leaves in the cache (a server's: this prompt and a reply of its own ids)
        held, held_by, held_n, held_reply = (list(ids) if server else list(kept)), a, counted, n_reply
        recent = after(recent, (a, list(ids), prompt, counted, n_reply), slots)
        messages[a].append({"role": "assistant", "content": said.reply_text})
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory()))


def _failed(ctx: PhaseContext, cache, stopped: set[int], a: int, t: int, exc: Exception) -> None:
    """A turn that failed (its template or tokenizer raised, a request failed or its reply could
    not be read): recorded with the reason (its conversation_turn's ``error``); its app's
    conversation stops there, as at a full context, the turns before kept and the other apps
    going on; what the cache holds is no longer known, so it is put back before the next turn."""
    why = reason(exc)
    ctx.emit(ConversationTurn(phase=PHASE, app=a, turn=t, error=why,
                              stop_reason=f"app {a} turn {t} failed: {why}: app {a}'s conversation stops here"))
    stopped.add(a)
    cache.forget()


def _turn(ctx: PhaseContext, cache, pair: dict, i: int, a: int, t: int, prompt: Prompt,
          state: tuple[list[int], list[Prompt], int | None, int, int | None], previous: Previous | None,
          server: bool, eos: frozenset[int]) -> tuple[list, int, list[int], int | None]:
    """One turn measured both ways (the natural cache first on even turns); returns the reply,
    the prompt's tokens as the request counted them, the ids the natural request left in the
    cache (an in-process engine's; a server's: none known), and the reply's tokens (a server's:
    its count, None where it gave none)."""
    engine, s = ctx.engine, ctx.settings
    held, natural, held_by, held_n, held_reply = state
    ids, text = list(prompt.ids), prompt.text
    renders = bool(prompt.messages)
    out: dict[str, tuple] = {}
    kept: list[int] = []
    counted = len(ids)
    n_out: int | None = None
    ended: str | None = None
    reused, refused, unreported, n_reply, emptied_reused, not_emptied = None, None, None, 0, None, None
    for mode in ("natural", "emptied") if i % 2 == 0 else ("emptied", "natural"):
        _pause(s)
        if mode == "natural":
            cache.hold(held, natural)
        else:
            cache.empty()
        rec = announced(ctx.emit, pair[mode], lambda: timed_request(engine, prompt, s.gen_tokens, ctx.clock, eos))
        out[mode] = rec.tokens
        cache.sent(ids, rec, prompt)
        if mode == "natural":
            reused, refused = rec.reused_tokens, None if server else engine.reuse_refused
            kept = [] if server else held_after(ids, rec)
            if server:
                unreported = engine.reuse_unreported
                told = rec.server or ServerReport()
                n_out, ended = told.completion_tokens, SERVER_ENDS.get(told.finish_reason or "")
            else:
                n_out, ended = len(rec.tokens), reply_end(rec.tokens, eos)
        else:
            emptied_reused = rec.reused_tokens
        if rec.status != "ok":
            raise MacprofError(f"conversation: app {a} turn {t} ({mode}): {rec.error}")
        if renders:  # the server rendered and counted it
            counted = rec.prompt_tokens
        elif rec.prompt_tokens != len(ids):  # the request tokenizes its text again, timed: it must read the same ids
            raise MacprofError(f"conversation: app {a} turn {t}: the request read {rec.prompt_tokens} prompt tokens, "
                               f"the rendered prompt has {len(ids)}")
    reply = list(out["natural"])
    check = compare_outputs(engine, prompt, out["emptied"], reply)
    if check.first_divergence is not None and not lacks(engine, "top2"):  # its diagnosis (top2) empties the cache
        cache.forget()
    prev = previous or Previous([], "", [])
    # through a server, the held request's reply is known by the server's count (at most --gen-tokens)
    last_reply = held_reply if held_reply is not None else s.gen_tokens
    if renders:  # --api chat: no ids here, the server's counts only
        n_reply = last_reply if held_by is not None else 0
        d, bound, kind, reason = counted_stop(held_n, n_reply, held_by, a, counted, reused, unreported)
        ideal, equal = None, None
    elif server:
        # the reply's ids are the server's, known by their count (where it gave none: at most --gen-tokens)
        n_reply = last_reply if held_by is not None else 1
        if held_by is None:  # nothing of this phase's: what the displacing request left
            held = engine.displacing_ids()
        d, bound, kind, reason = server_stop(held, n_reply, held_by, a, ids, text, previous, reused, unreported)
        ideal = server_stop(prev.ids, prev.n_reply if prev.n_reply is not None else s.gen_tokens, a, a, ids, text,
                            previous, None, None)[1] if previous else 0
        equal = None
        # the emptied half: after the displacing requests, the server may share no more than they leave
        most = server_stop(engine.displacing_ids(), 1, None, a, ids, text, None, None, None)[1]
        if emptied_reused is not None and emptied_reused > most:
            not_emptied = (f"the emptied request reused {emptied_reused} tokens, more than the displacing requests "
                           f"leave shared ({most}): the server holds more than they displaced (its slots or prompt "
                           f"cache), so that half is not an empty cache's")
    else:
        d, kind, reason = why_stopped(held, held_by, a, ids, text, previous, refused)
        bound = None
        # what a cache of this app's own last prompt and reply would serve: what it held after them
        ideal = reusable_prefix(prev.held, ids)
        content = prev.content  # the reply's ids that are its message (its end-of-generation id is the template's)
        equal = (ids[len(prev.ids):len(prev.ids) + len(content)] == content) if previous and \
            ids[:len(prev.ids)] == list(prev.ids) else None
    ctx.emit(ConversationTurn(phase=PHASE, app=a, turn=t, prompt_tokens=counted,
                              held_tokens=(held_n if renders else len(held)) + n_reply, held_by=held_by,
                              common_prefix=d, expected_reuse=None if renders else reusable_prefix(held, ids),
                              reused_tokens=reused, reuse_refused=refused, reuse_bound=bound,
                              reuse_unreported=unreported, ideal_reuse=ideal, stop_kind=kind, stop_reason=reason,
                              reply_text_ids_equal=equal, not_emptied=not_emptied, check=check,
                              reply_tokens=n_out, reply_end=ended))
    return reply, counted, kept, n_out
