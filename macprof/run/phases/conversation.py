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
queued it already). Between the two halves the natural state is put back, untimed, by computing
the held ids again where the other half (or the output check's diagnosis) emptied the cache. A
turn whose prompt no longer fits the context, or that fails (its template or tokenizer raises, a
request fails or its reply cannot be read), stops that app's conversation, with the reason
(``ConversationTurn.error``); the turns before are kept, and the other apps go on. A resumed run
replays the turns the journal settled and keeps a stopped app stopped (``resumed``).

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

The three ways of meeting a cache (in process; a server sent text; a server sent the messages,
``--api chat``) are run/phases/conversation_caches.py's strategies; this module is the protocol
they share: the schedule, a turn rendered, measured both ways (or replayed on a resume), recorded.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from macprof.engines.base import AnyEngine, Engine, ServerEngine
from macprof.engines.capabilities import lacks
from macprof.errors import MacprofError, reason
from macprof.model import events as ev
from macprof.model.conversation import ConversationPhase, ConversationStart, ConversationTurn
from macprof.model.conversation import Turn as LoggedTurn  # the log's record of a turn (Turn here: the schedule's)
from macprof.model.phases import OutputCheck, Request
from macprof.model.records import ABSENT
from macprof.run import chat
from macprof.run.phases.api import Parent
from macprof.run.phases.common import (ByKind, PhaseContext, _pause, announced, compare_outputs, request_key,
                                       timed_request)
from macprof.run.phases.conversation_caches import (Cache, Exchange, Held, InProcessCache, Natural, Previous, Seen,
                                                    ServerChatCache, ServerTextCache, Stop)
from macprof.run.prompts import Prompt

if TYPE_CHECKING:
    from pathlib import Path

    from macprof.config import ModelSpec
    from macprof.run.phases.api import Host, Reads
    from macprof.run.resume import ModelPast

PHASE = "conversation"
MODES = ("natural", "emptied")


def schedule(apps: int, turns: int, order: str, seed: int = 0) -> list[tuple[int, int]]:
    """(app, turn) in the order they run: round-robin, or a seeded random interleaving that keeps
    each app's own turns in order."""
    if order == "round-robin":
        return [(app, t) for t in range(turns) for app in range(apps)]
    rng = random.Random(f"{seed}:apps")
    next_turn = {app: 0 for app in range(apps)}
    out = []
    while next_turn:
        app = rng.choice(sorted(next_turn))
        out.append((app, next_turn[app]))
        next_turn[app] += 1
        if next_turn[app] == turns:
            del next_turn[app]
    return out


@dataclass
class App:
    """One app's conversation: its messages so far, its last exchange, and whether it stopped."""

    index: int
    messages: list[dict]
    last: Previous | None = None
    stopped: bool = False


@dataclass(frozen=True)
class Turn:
    """One turn of one app: its place in the schedule and its two requests' heads."""

    app: int
    turn: int
    place: int  # in the schedule: the natural half goes first at an even place
    heads: dict[str, dict] = field(compare=False)

    @property
    def modes(self) -> tuple[str, ...]:
        return MODES if self.place % 2 == 0 else MODES[::-1]

    @property
    def where(self) -> str:
        return f"app {self.app} turn {self.turn}"


def _in_process(ctx: PhaseContext[Engine]) -> None:
    _converse(ctx, InProcessCache(ctx.engine))


def _served(ctx: PhaseContext[ServerEngine]) -> None:
    """Through a server, every request of the phase (timed, counting, a state put back) ends where
    the server ends it, as an app's (engines/openai.py ``replies_end_at_eos``); with --api chat the
    server renders the messages itself, so a --chat-template is refused in one line."""
    engine, s = ctx.engine, ctx.settings
    if engine.renders_messages:
        chat.rendered_by_server(s.chat_template, "through --api chat", " (give --api completions to send text "
                                                                       "rendered here)")
    cache = ServerChatCache(engine, s.gen_tokens) if engine.renders_messages else ServerTextCache(engine, s.gen_tokens)
    with engine.replies_end_at_eos():
        _converse(ctx, cache)


run_conversation = ByKind(_in_process, _served)


def _converse(ctx: PhaseContext[AnyEngine], cache: Cache) -> None:
    """The phase's start, a warm-up, then every app's turns in the schedule's order."""
    s, builder = ctx.settings, ctx.builder
    template = chat.template_for(ctx.engine, ctx.prepared)  # with --api chat its text only names the request
    order = schedule(s.apps, s.turns, s.app_order)
    ctx.emit(ConversationStart.of(ConversationPhase(
        template_source="server" if cache.renders else template.source,
        template_path=None if cache.renders else template.path,
        template_sha256=None if cache.renders else hashlib.sha256(template.text.encode()).hexdigest(),
        apps=s.apps, holds=cache.holds(s.apps), generation=cache.generation(s.gen_tokens)),
        phase=PHASE, turns=s.turns, order=tuple(order)))
    apps = [App(a, [{"role": "system", "content": builder.words_text(f"conversation:system:{a}", s.system_tokens)}])
            for a in range(s.apps)]
    turns = [Turn(a, t, i, {mode: {"phase": PHASE, "index": t, "kind": "measured", "case": f"app{a}", "mode": mode}
                            for mode in MODES}) for i, (a, t) in enumerate(order)]
    stopped_at = stopped_apps(ctx.done)  # before a resume: where each app's conversation stopped

    def left(turn: Turn) -> bool:
        return turn.turn < stopped_at.get(turn.app, s.turns) and not all(
            request_key(h) in ctx.done for h in turn.heads.values())

    if not any(left(turn) for turn in turns):
        return
    ctx.engine.reset_peak_memory()
    _warm_up(ctx, cache, template, apps[0].messages + [_user(ctx, 0, 0)])
    for turn in turns:
        app = apps[turn.app]
        app.stopped = app.stopped or turn.turn >= stopped_at.get(turn.app, s.turns)
        if not app.stopped:
            _turn(ctx, cache, template, app, turn)
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=ctx.engine.memory()))


def _user(ctx: PhaseContext[AnyEngine], app: int, turn: int) -> dict:
    return {"role": "user", "content": ctx.builder.words_text(f"conversation:user:{app}:{turn}", ctx.settings.turn_tokens)}


def _warm_up(ctx: PhaseContext[AnyEngine], cache: Cache, template: chat.Template, messages: list[dict]) -> None:
    """A warm-up, discarded: a worker's first request pays one-off costs (the same prompt as app
    0's first turn), rendered and tokenized inside its announcement (under --timeout)."""
    def measure() -> dict:
        warm = cache.prompt_of(template.render(messages), messages)
        ctx.engine.reset()
        return timed_request(ctx.engine, warm, ctx.settings.gen_tokens, ctx.clock, cache.eos)

    announced(ctx.emit, {"phase": PHASE, "index": -1, "kind": "warmup", "case": "app0", "mode": "emptied"}, measure,
              record=False)


def _turn(ctx: PhaseContext[AnyEngine], cache: Cache, template: chat.Template, app: App, turn: Turn) -> None:
    """One turn: the app's next messages, its prompt rendered, then measured both ways (or, measured
    before a resume, replayed from the journal); its reply goes back into the app's history."""
    s = ctx.settings
    if turn.turn > 0 and s.tool_tokens:  # an agent: the tool's result comes back after the reply
        app.messages.append({"role": "tool", "content": ctx.builder.words_text(
            f"conversation:tool:{app.index}:{turn.turn}", s.tool_tokens)})
    app.messages.append(_user(ctx, app.index, turn.turn))
    prompt = _rendered(ctx, cache, template, app, turn)
    if prompt is None:
        return
    if ctx.n_ctx and not cache.renders and len(prompt.ids) + s.gen_tokens > ctx.n_ctx:
        ctx.emit(ConversationTurn.of(LoggedTurn(
            app=app.index, turn=turn.turn, prompt_tokens=len(prompt.ids), fits=False, stop_kind="empty",
            stop_reason=f"{len(prompt.ids)} prompt + {s.gen_tokens} generated tokens exceed the context of {ctx.n_ctx}: "
                        f"app {app.index}'s conversation stops here"), phase=PHASE))
        app.stopped = True
        return
    try:
        done = _replayed(ctx, cache, prompt, turn) or _measured(ctx, cache, prompt, turn, app.last)
    except Exception as exc:  # noqa: BLE001 - a failed request, or what its reply made raise: this app alone
        _failed(ctx, cache, app, turn, exc, prompt)
        return
    said = Previous(list(prompt.ids), prompt.text, done.reply, "", tuple(done.kept), cache.ended(done.reply),
                    done.reply_tokens)
    # the assistant's message: the reply as the model produced it, up to its end (a server's: its chunks' texts)
    app.last = said._replace(reply_text=cache.reply_text(said))
    cache.served(app.index, prompt, done)
    app.messages.append({"role": "assistant", "content": app.last.reply_text})


def _rendered(ctx: PhaseContext[AnyEngine], cache: Cache, template: chat.Template, app: App,
              turn: Turn) -> Prompt | None:
    """The turn's prompt. The turn announces itself before its prompt is rendered and tokenized
    (under --timeout: a template that hangs is cut here, this turn's), then ends that part before
    the untimed work of its requests (the pause, the cache put back), which announce themselves.
    None where rendering failed: the app's conversation stops there."""
    head = turn.heads[turn.modes[0]]
    ctx.emit(ev.RequestStart(**head))
    try:
        prompt = cache.prompt_of(template.render(app.messages), app.messages)
    except Exception as exc:  # noqa: BLE001 - the template's or the tokenizer's: this app's conversation alone
        ctx.emit(ev.RequestEnd(**head))
        _failed(ctx, cache, app, turn, exc)
        return None
    ctx.emit(ev.RequestEnd(**head))
    return prompt


def _replayed(ctx: PhaseContext[AnyEngine], cache: Cache, prompt: Prompt, turn: Turn) -> Exchange | None:
    """A turn measured before a resume: its recorded reply, and the cache its natural request left
    (``done_cached``; where the journal kept none, the prompt and reply less the reply's last id).
    None where it is still to be measured."""
    recorded = {mode: ctx.done.get(request_key(h)) for mode, h in turn.heads.items()}
    natural = recorded["natural"]
    if natural is None or recorded["emptied"] is None:
        return None
    ids, reply = list(prompt.ids), list(natural)
    left = ctx.done_cached.get(request_key(turn.heads["natural"]))
    kept = (ids + reply)[:left] if left is not None else ids + reply[:-1]
    return Exchange(reply, len(ids), kept, cache.replayed_tokens(reply))


def _measured(ctx: PhaseContext[AnyEngine], cache: Cache, prompt: Prompt, turn: Turn, last: Previous | None) -> Exchange:
    """The turn measured both ways (the natural cache first at an even place), checked against
    each other, and recorded with where and why reuse stopped."""
    held = cache.held_before(prompt)
    requests: dict[str, Request] = {}
    natural: Natural | None = None
    counted = len(prompt.ids)
    for mode in turn.modes:
        _pause(ctx.settings)
        if mode == "natural":
            cache.restore(held)
        else:
            cache.empty()
        rec = requests[mode] = announced(ctx.emit, turn.heads[mode], lambda: timed_request(
            ctx.engine, prompt, ctx.settings.gen_tokens, ctx.clock, cache.eos))
        cache.sent(prompt, rec)
        if mode == "natural":  # what the engine says of it, read before the other half runs
            natural = cache.natural(prompt, rec)
        if rec.status != "ok":
            raise MacprofError(f"the {mode} request failed: {rec.error}")
        counted = cache.prompt_tokens(prompt, rec, turn.where)
    assert natural is not None  # turn.modes holds both halves
    check = compare_outputs(ctx.engine, prompt, requests["emptied"].tokens, natural.reply)
    if check.first_divergence is not None and not lacks(ctx.engine, "top2"):  # its diagnosis (top2) empties the cache
        cache.forget()
    seen = Seen(turn.app, prompt, last, natural, requests["emptied"], counted)
    ctx.emit(_recorded(turn, held, seen, cache.stop(held, seen), check))
    return Exchange(natural.reply, counted, natural.kept, natural.reply_tokens)


def _recorded(turn: Turn, held: Held, seen: Seen, stop: Stop, check: OutputCheck) -> ConversationTurn:
    natural = seen.natural
    return ConversationTurn.of(LoggedTurn(
        app=turn.app, turn=turn.turn, prompt_tokens=seen.prompt_tokens, held_tokens=stop.held_tokens,
        held_by=held.app, common_prefix=stop.common_prefix, expected_reuse=stop.expected_reuse,
        reused_tokens=natural.reused, reuse_refused=natural.refused, reuse_bound=stop.reuse_bound,
        reuse_unreported=natural.unreported, ideal_reuse=stop.ideal_reuse, stop_kind=stop.kind,
        stop_reason=stop.reason, reply_text_ids_equal=stop.reply_text_ids_equal, not_emptied=stop.not_emptied,
        check=check, reply_tokens=natural.reply_tokens, reply_end=natural.ended), phase=PHASE)


def _failed(ctx: PhaseContext[AnyEngine], cache: Cache, app: App, turn: Turn, exc: Exception,
            prompt: Prompt | None = None) -> None:
    """A turn that failed (its template or tokenizer raised, a request failed or its reply could
    not be read): recorded with the reason (its conversation_turn's ``error``) and, where it was
    rendered here, its prompt's tokens; its app's conversation stops there, as at a full context,
    the turns before kept and the other apps going on; what the cache holds is no longer known,
    so it is put back before the next turn."""
    why = reason(exc)
    ctx.emit(ConversationTurn.of(LoggedTurn(
        app=app.index, turn=turn.turn, stop_reason=f"{turn.where} failed: {why}: app {app.index}'s conversation stops here",
        prompt_tokens=ABSENT if prompt is None or cache.renders else len(prompt.ids)), phase=PHASE, error=why))
    app.stopped = True
    cache.forget()


# -- the parent's side (run/phases/api.py) ---------------------------------------------------
class ConversationParent(Parent[None, chat.TemplateFile]):
    """Each --chat-template given read once per run, before any worker: one that cannot be read
    or compiled is one line (run/chat.py read_template); that text is one of the model's inputs
    and what its workers render (their job)."""

    def __init__(self, models: Sequence[ModelSpec], journal_path: Path, reads: Reads) -> None:
        super().__init__(models, journal_path, reads)
        chat.given_templates(reads, models, PHASE)

    def inputs(self, model: ModelSpec, prepared: None) -> list[dict]:
        return chat.template_input(self.reads, model)

    def job(self, model: ModelSpec, prepared: None, host: Host) -> chat.TemplateFile | None:
        return chat.given_template(self.reads, model)


def stopped_head(app: int, turn: int) -> dict:
    """What names, among a resumed worker's done items, the turn ``app``'s conversation stopped
    at (its prompt no longer fit, or it failed): no request event, its conversation_turn."""
    return {"phase": PHASE, "case": f"app{app}", "mode": None, "kind": "stopped", "index": turn}


def stopped_apps(done: dict) -> dict[int, int]:
    """The apps whose conversation a resumed worker does not go on with: app -> the turn it
    stopped at (``stopped_head``); their turns before it are replayed, that one and those after
    never run, as in the interrupted run."""
    return {int(key[1].removeprefix("app")): key[4] for key in done if key[0] == PHASE and key[3] == "stopped"}


def resumed(past: ModelPast, event: ev.Event, spawn: ev.WorkerSpawn) -> bool:
    """--resume: a turn whose conversation_turn was recorded is done, its two requests with the
    natural reply's ids and what it left in the cache, so that the resumed conversation's
    history and cache are the interrupted run's (the replay needs both); a turn interrupted
    between its halves is measured again, both halves, its new requests superseding the old. A
    conversation_turn that stopped its app (it no longer fit, or failed: whatever of its
    requests were recorded) stops that app in the resumed run too (``stopped_apps``): none of its
    later turns is measured, nor that one again."""
    held: dict[tuple[int, int], list[dict]] = past.state.setdefault(PHASE, {})
    if isinstance(event, ev.Request) and event.kind == "measured" and event.case:
        r = event.record()
        held.setdefault((int(event.case.removeprefix("app")), event.index), []).append(
            {"phase": event.phase, "case": event.case, "mode": event.mode, "kind": event.kind, "index": event.index,
             "tokens": list(r.tokens),
             "cached_tokens_after": r.cached_tokens_after if isinstance(r.cached_tokens_after, int) else None})
        return True
    if isinstance(event, ConversationTurn):
        logged = event.record()
        for request in held.pop((logged.app, logged.turn), []):
            past.request_done(request)
        if not logged.fits or event.error:
            past.item_done(stopped_head(logged.app, logged.turn))
        return True
    return False
