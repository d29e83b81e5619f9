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

Generation is greedy with EOS ignored and exactly ``--gen-tokens`` tokens, as in every speed
phase, so the replies are the same length whatever the model says. Between the two halves the
natural state is put back, untimed, by computing the held ids again where the other half (or
the output check's diagnosis) emptied the cache. A turn whose prompt no longer fits the context
stops that app's conversation; the turns before are kept.
"""

from __future__ import annotations

import hashlib
import random

from macprof.engines.base import common_prefix, lacks, reusable_prefix
from macprof.errors import MacprofError
from macprof.model import events as ev
from macprof.model.conversation import ConversationStart, ConversationTurn
from macprof.run.chat import template_for
from macprof.run.phases.common import PhaseContext, _pause, announced, compare_outputs, request_key, timed_request
from macprof.run.prompts import Prompt

PHASE = "conversation"


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


def why_stopped(held: list[int], held_by: int | None, app: int, ids: list[int], text: str,
                previous: tuple[list[int], str, list[int]] | None, refused: str | None) -> tuple[int, str, str]:
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
                previous: tuple[list[int], str, list[int]] | None) -> tuple[str, str]:
    if not held:
        return "empty", "the cache held nothing"
    if held_by != app:
        return "evicted", f"the cache held app {held_by}'s conversation: the two share their first {d} tokens"
    if d >= len(held) or d >= len(ids) - 1:
        return "none_lost", f"the prompt extends all {len(held)} tokens the cache held"
    prev_ids, prev_text, reply = previous if previous else ([], "", [])
    if d >= len(prev_ids):
        return "reply_retokenized", (f"at token {d}, {d - len(prev_ids)} tokens into the previous reply: its text "
                                     f"tokenizes to other ids than the {len(reply)} generated")
    if text.startswith(prev_text):
        return "tokenization_join", (f"at token {d}: the text extends the previous prompt's, but tokenizes "
                                     f"otherwise where the two join")
    c = next((k for k, (x, y) in enumerate(zip(prev_text, text)) if x != y), min(len(prev_text), len(text)))
    return "template_rewrite", (f"at token {d}: the template rendered the earlier turns otherwise "
                                f"(the text differs from the previous prompt's at character {c})")


class _Cache:
    """What the engine's single cache holds, as this protocol knows it, and the untimed way back
    to a state: compute those ids again from an empty cache."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.ids: list[int] | None = None  # None: not known (emptied by a diagnosis, or before the first request)

    def hold(self, ids: list[int]) -> None:
        if self.ids == ids:
            return
        self.engine.reset()
        if ids:
            for _ in self.engine.generate(list(ids), 1):  # prefills ``ids``; the one token yielded is not cached
                pass
        self.ids = list(ids)


def run_conversation(ctx: PhaseContext) -> None:
    engine, s, builder = ctx.engine, ctx.settings, ctx.builder
    if not lacks(engine, "stream"):
        raise MacprofError("the conversation phase is measured in process (llama.cpp, MLX): what a server reuses is "
                           "decided by its slots and prompt cache, which this phase does not read yet")
    template = template_for(engine, s.chat_template)
    order = schedule(s.apps, s.turns, s.app_order)
    ctx.emit(ConversationStart(phase=PHASE, template_source=template.source, template_path=template.path,
                               template_sha256=hashlib.sha256(template.text.encode()).hexdigest(), apps=s.apps,
                               turns=s.turns, order=tuple(order)))
    messages = {a: [{"role": "system", "content": builder.words_text(f"conversation:system:{a}", s.system_tokens)}]
                for a in range(s.apps)}
    heads = {(a, t): {mode: {"phase": PHASE, "index": t, "kind": "measured", "case": f"app{a}", "mode": mode}
                      for mode in ("natural", "emptied")} for a, t in order}
    if all(request_key(h) in ctx.done for pair in heads.values() for h in pair.values()):
        return
    cache = _Cache(engine)
    engine.reset_peak_memory()
    # a warm-up, discarded: a worker's first request pays one-off costs (the same prompt as app 0's first turn)
    first = messages[0] + [{"role": "user", "content": builder.words_text("conversation:user:0:0", s.turn_tokens)}]
    warm_text = template.render(first)
    warm_ids = engine.tokenize_chat(warm_text)
    engine.reset()
    announced(ctx.emit, {"phase": PHASE, "index": -1, "kind": "warmup", "case": "app0", "mode": "emptied"},
              lambda: timed_request(engine, Prompt(warm_text, tuple(warm_ids), chat=True), s.gen_tokens, ctx.clock), record=False)
    held: list[int] = []
    held_by: int | None = None
    last: dict[int, tuple[list[int], str, list[int]]] = {}
    stopped: set[int] = set()
    for i, (a, t) in enumerate(order):
        if a in stopped:
            continue
        if t > 0 and s.tool_tokens:  # an agent: the tool's result comes back after the reply
            messages[a].append({"role": "tool", "content": builder.words_text(f"conversation:tool:{a}:{t}", s.tool_tokens)})
        messages[a].append({"role": "user", "content": builder.words_text(f"conversation:user:{a}:{t}", s.turn_tokens)})
        text = template.render(messages[a])
        ids = engine.tokenize_chat(text)
        if ctx.n_ctx and len(ids) + s.gen_tokens > ctx.n_ctx:
            ctx.emit(ConversationTurn(phase=PHASE, app=a, turn=t, prompt_tokens=len(ids), fits=False,
                                      stop_kind="empty", stop_reason=f"{len(ids)} prompt + {s.gen_tokens} generated "
                                      f"tokens exceed the context of {ctx.n_ctx}: app {a}'s conversation stops here"))
            stopped.add(a)
            continue
        pair = heads[(a, t)]
        recorded = {mode: ctx.done.get(request_key(h)) for mode, h in pair.items()}
        if all(v is not None for v in recorded.values()):  # measured before a resume: its reply is the recorded one
            reply = list(recorded["natural"] or ())
        else:
            reply = _turn(ctx, cache, pair, i, a, t, ids, text, held, held_by, last.get(a))
        last[a] = (ids, text, reply)
        held, held_by = ids + reply[:-1], a  # what the app's request leaves in the cache
        messages[a].append({"role": "assistant", "content": engine.detokenize(reply)})
    ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory=engine.memory()))


def _turn(ctx: PhaseContext, cache: _Cache, pair: dict, i: int, a: int, t: int, ids: list[int], text: str,
          held: list[int], held_by: int | None, previous) -> list[int]:
    """One turn measured both ways (the natural cache first on even turns); returns the reply."""
    engine, s = ctx.engine, ctx.settings
    prompt = Prompt(text, tuple(ids), chat=True)
    out: dict[str, tuple] = {}
    reused, refused = None, None
    for mode in ("natural", "emptied") if i % 2 == 0 else ("emptied", "natural"):
        _pause(s)
        if mode == "natural":
            cache.hold(held)
        else:
            engine.reset()
        rec = announced(ctx.emit, pair[mode], lambda: timed_request(engine, prompt, s.gen_tokens, ctx.clock))
        out[mode] = rec.tokens
        cache.ids = ids + list(rec.tokens[:-1])
        if mode == "natural":
            reused, refused = rec.reused_tokens, engine.reuse_refused
        if rec.status != "ok":
            raise MacprofError(f"conversation: app {a} turn {t} ({mode}): {rec.error}")
        if rec.prompt_tokens != len(ids):  # the request tokenizes its text again, timed: it must read the same ids
            raise MacprofError(f"conversation: app {a} turn {t}: the request read {rec.prompt_tokens} prompt tokens, "
                               f"the rendered prompt has {len(ids)}")
    reply = list(out["natural"])
    check = compare_outputs(engine, prompt, out["emptied"], reply)
    if check.first_divergence is not None:  # its diagnosis (top2) empties the cache
        cache.ids = None
    d, kind, reason = why_stopped(held, held_by, a, ids, text, previous, refused)
    prev_ids, _, prev_reply = previous if previous else ([], "", [])
    equal = (ids[len(prev_ids):len(prev_ids) + len(prev_reply)] == list(prev_reply)) if previous and \
        ids[:len(prev_ids)] == list(prev_ids) else None
    ctx.emit(ConversationTurn(phase=PHASE, app=a, turn=t, prompt_tokens=len(ids), held_tokens=len(held), held_by=held_by,
                              common_prefix=d, expected_reuse=reusable_prefix(held, ids), reused_tokens=reused,
                              reuse_refused=refused,
                              # what a cache of this app's own last prompt and reply would serve
                              ideal_reuse=reusable_prefix(prev_ids + prev_reply[:-1], ids),
                              stop_kind=kind, stop_reason=reason, reply_text_ids_equal=equal, check=check))
    return reply
