"""speculative: a draft proposes k greedy tokens, the target verifies them all in one forward
pass, the longest prefix it agrees with is kept with the target's own next token, and both
caches are rewound past what was rejected; greedy, EOS ignored, exactly ``gen_tokens`` tokens.

Engine-generic: the target needs capabilities "verify" and "cache_cut" (engines/capabilities.py), the
draft is any engine's propose (its greedy generate, read back once per round; so an MLX draft
serves a GGUF target) or the n-gram lookup of measure/speculative.py. The target's verify is
asked for before the drafts are read (an MLX pair queues it on the draft's unread array, as
mlx-lm's speculative step does) and runs or is waited for when its verdict is read. The prompts are the warm
phase's; each prompt is also decoded plainly on the target, alternately before and after its
speculative requests (one per k of ``draft_tokens``): the baseline of the speed-up and the
reference of the output check.

With --speculative-impl native or both, the engine's own speculative decoding runs too (capability
"native_draft": mlx-lm's stream_generate with a draft model, llama-cpp-python's prompt lookup),
on the same prompts, k and token count, stamped the same way, its output checked against the
same plain request; what it tells of its rounds is journaled as it tells it (SpeculativeNative).

Raw per round (model/speculative.py Round): drafted k, accepted a, the stamps of draft start,
verify start, verify end and rewind end, and the tokens. A round's tokens are yielded (and so
stamped by the request's machinery, run/phases/common.py) at its verify end, in a burst.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Protocol, Sequence, cast

from macprof.engines.base import AnyEngine, Engine, EngineCore, EngineSettings, in_process
from macprof.engines.capabilities import NATIVE_DRAFT, VERIFY, NativeDrafting, able, lacks
from macprof.errors import MacprofError, reason
from macprof.measure.speculative import accepted_prefix, draft_budget, ngram_draft
from macprof.model import events as ev
from macprof.model.speculative import (DraftEnd, DraftLoaded, DraftSpec, NativeRefused, Round, SpeculativeCheck,
                                       SpeculativeNative, SpeculativeRounds)
from macprof.run.phases.api import Parent, PhaseRefused, file_input
from macprof.run.phases.common import (Clock, PhaseContext, _kind, _pause, announced, sent, compare_outputs, request_key,
                                       reuse_of, stamped_sequence, timed_request, warm_prompts)
from macprof.run.prompts import Prompt

if TYPE_CHECKING:
    from macprof.config import ModelSpec

PHASE = "speculative"
NGRAM = "ngram"
DRAFT = "the draft"  # its files' role among a model's inputs (model_start identity.inputs)
# tokenized by both models: a draft whose ids differ from the target's on it is refused
PROBE = "The quick brown fox jumps over the lazy dog, 12 times; naïve café 3.14 — done.\n  Ok?"


class Drafter(Protocol):
    """What drafts for the speculative loop: a model's engine or prompt lookup."""

    def prepare(self, ids: Sequence[int]) -> None: ...

    def propose(self, context: Sequence[int], k: int) -> Sequence[int]: ...

    def rewind(self, keep: int) -> None: ...

    def reset(self) -> None: ...


class ModelDraft:
    """A draft model: ``propose`` is its greedy generate of k tokens after the context, reusing
    what its cache holds, read back together (the engine's ``propose``); ``rewind`` cuts its cache back past the rejected drafts."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def prepare(self, ids: Sequence[int]) -> None:
        """The prompt into the draft's cache before the first token, as the target's prefill is
        (and as mlx-lm's speculative_generate_step prefills both before its first round): else
        the first round's proposal would carry the draft's whole prefill, inside the decode time.
        generate of one token: its cache then holds the prompt, the token itself not fed."""
        list(self.engine.generate(list(ids), 1))

    def propose(self, context: Sequence[int], k: int) -> Sequence[int]:
        return self.engine.propose(list(context), k)  # read back once per round, not per token

    def rewind(self, keep: int) -> None:
        if self.engine.cached_tokens() > keep:
            self.engine.truncate(keep)

    def reset(self) -> None:
        self.engine.reset()


class NgramDraft:
    """Prompt lookup: the continuation of the longest recent n-gram match (no model, no cache)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def prepare(self, ids: Sequence[int]) -> None:
        """Nothing to prefill."""

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        return ngram_draft(context, self.n, k)

    def rewind(self, keep: int) -> None:
        """Nothing cached."""

    def reset(self) -> None:
        """Nothing cached."""


def speculative_tokens(target: Engine, draft: Drafter, ids: Sequence[int], n: int, k: int, rounds: list[Round],
                       clock: Clock = time.perf_counter_ns) -> Iterator[int]:
    """Exactly ``n`` tokens of ``target``'s greedy decoding of ``ids``, drafted ``k`` at a time
    (fewer in the last round, so the count is exact); each round appended to ``rounds``. The
    first token is the target's prefill, as in plain decoding."""
    ids = list(ids)
    draft.prepare(ids)  # both prompts prefilled before the first token (time to first token)
    emitted = list(target.generate(ids, 1))  # the cache then holds the prompt; emitted[-1] is not in it
    yield from emitted
    while len(emitted) < n:
        context = ids + emitted
        k_round = draft_budget(k, n - len(emitted))
        t_draft = clock()
        proposal = draft.propose(context, k_round) if k_round else []
        held = target.cached_tokens()
        # queued on the drafts before they are read (an MLX pair: the verify's graph is built
        # while the draft computes, as mlx-lm's step builds it); it runs, or is waited for, when read
        verdict = target.verify([emitted[-1]], proposal)
        drafts = list(proposal)  # the draft's compute has ended: the verify starts from here
        t_verify = clock()
        choices = list(verdict)
        t_verified = clock()
        a = accepted_prefix(drafts, choices)
        out = [*drafts[:a], choices[a]]
        emitted += out
        yield from out
        target.truncate(held + 1 + a)  # the last token and the accepted drafts stay; choices[a] is fed next round
        draft.rewind(len(context) + a)
        rounds.append(Round(drafted=len(drafts), accepted=a, t_draft_start=t_draft, t_verify_start=t_verify,
                            t_verify_end=t_verified, t_rewind_end=clock(), drafts=tuple(drafts), tokens=tuple(out)))


def speculative_request(target: Engine, draft: Drafter, prompt: Prompt, n: int, k: int,
                        clock: Clock) -> tuple[dict, list[Round]]:
    """One speculative request, stamped as a plain one is (run/phases/common.py ``_stamped``),
    both caches emptied first."""
    rounds: list[Round] = []
    target.reset()
    draft.reset()
    r = stamped_sequence(target, prompt, n, lambda ids: speculative_tokens(target, draft, ids, n, k, rounds, clock),
                         clock, "the speculative loop")
    return {**r, **reuse_of(target, r["prompt_tokens"], 0)}, rounds


def native_request(target: NativeDrafting, prompt: Prompt, n: int, k: int, clock: Clock) -> dict:
    """One request of the engine's own speculative decoding (it empties its caches itself),
    stamped as a plain one is."""
    r = stamped_sequence(target, prompt, n, lambda ids: target.native_generate(ids, n, k), clock,
                         "the engine's own speculative decoding")
    return {**r, "reused_tokens": 0, "computed_prompt_tokens": r["prompt_tokens"]}


def tokenizer_mismatch(target: EngineCore, draft: EngineCore, target_name: str, draft_name: str) -> str | None:
    """Why ``draft`` cannot draft for ``target``: another vocabulary size, or other ids for the
    probe text; None when they agree."""
    if draft.vocab_size != target.vocab_size:
        return (f"draft {draft_name} has a vocabulary of {draft.vocab_size} tokens, target {target_name} one of "
                f"{target.vocab_size}: another tokenizer, refused")
    a, b = target.tokenize(PROBE), draft.tokenize(PROBE)
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return (f"draft {draft_name} tokenizes the probe text otherwise than target {target_name} (first difference "
                f"at token {at} of {len(a)}/{len(b)}): another tokenizer, refused")
    return None


def draft_spec(model: ModelSpec) -> DraftSpec:
    """The model's draft (--draft), resolved as a MODEL argument is (an engine reaches no model
    store): its engine the target's where that reads the draft's format (a fake GGUF target
    drafts with a fake GGUF), else the format's own (an MLX draft for a GGUF target). No draft, or
    one that resolves to nothing: PhaseRefused, in one line."""
    from macprof import engines
    from macprof.collect import modelinfo, resolve

    s = model.settings
    if not s.draft:
        raise PhaseRefused("speculative: no draft given (--draft MODEL or --draft ngram)")
    if s.draft.strip() == NGRAM:
        return DraftSpec(kind=NGRAM, ref=NGRAM, ngram=s.ngram)
    try:
        r = resolve.resolve(s.draft)
    except MacprofError as exc:
        raise PhaseRefused(str(exc)) from None
    engine = model.engine if engines.MODEL_FORMAT.get(model.engine) == r.format else resolve.ENGINE_OF[r.format]
    try:  # the draft's bytes per token, for the round's ceiling (analyse/ceilings.py)
        shape = modelinfo.inspect(r.path, s.kv_type).to_dict()
    except MacprofError:
        shape = None
    return DraftSpec(kind="model", ref=s.draft, engine=engine, path=str(r.path), target=model.name, shape=shape)


class DraftParent(Parent[DraftSpec, DraftSpec]):
    """The draft resolved once per model (its header read once), journaled in the plan; each
    worker of the phase loads the files it names."""

    plan_type = DraftSpec

    def prepare(self, model: ModelSpec) -> DraftSpec:
        return draft_spec(model)

    def inputs(self, model: ModelSpec, prepared: DraftSpec | None) -> list[dict]:
        """The draft model's files (none for prompt lookup, or a draft refused)."""
        from macprof.files import filekind

        if prepared is None or not prepared.path:
            return []
        return [file_input(DRAFT, f) for f in filekind.model_files(Path(prepared.path))]


def load_draft(ctx: PhaseContext[AnyEngine]) -> tuple[Drafter | None, Engine | None]:
    """The draft the parent resolved (``ctx.prepared``, a DraftSpec), as (drafter, its engine
    or None), or (None, None) with a draft_loaded event saying why not."""
    from macprof import engines

    spec: DraftSpec | None = ctx.prepared
    s = ctx.settings
    if spec is None:  # the parent refuses the phase where it has no draft: a job without one is macprof's bug
        raise MacprofError("speculative: the worker's job has no draft (the parent resolves it: DraftParent)")
    if spec.kind == NGRAM:
        ctx.emit(DraftLoaded(phase=PHASE, draft=NGRAM))
        return NgramDraft(int(spec.ngram or s.ngram)), None
    name, engine_name, path = spec.ref or "?", spec.engine or "", spec.path or ""
    head: dict[str, Any] = {"phase": PHASE, "draft": name, "engine": engine_name, "path": path, "shape": spec.shape}
    from macprof.run.worker import _mac, _rss

    rss0, mac0 = _rss(), _mac(False)  # the draft's load is what the process grows by from here
    t0 = time.perf_counter_ns()
    try:
        # the parent resolves a draft to a model file; a server's stream tells no ids
        engine = in_process(engines.create(engine_name), "a draft is a model loaded in process: a server streams "
                                                         "text, not the token ids a draft proposes")
        engine.load_model(Path(path), EngineSettings(n_ctx=ctx.n_ctx or 4096, threads=s.threads, kv_type=s.kv_type))
        engine.load_tokenizer()
    except Exception as exc:  # noqa: BLE001 - a draft that cannot load is a recorded failure; the target goes on
        ctx.emit(DraftLoaded(**head, status="error", reason=f"draft {name} could not be loaded: {reason(exc)}",
                                 t_load_start=t0, t_load_end=time.perf_counter_ns()))
        return None, None
    t1 = time.perf_counter_ns()
    rss1, mac1 = _rss(), _mac(False)
    why = tokenizer_mismatch(ctx.engine, engine, spec.target or "the target", name)
    footprints = {"footprint_before_bytes": mac0["footprint_bytes"], "footprint_bytes": mac1["footprint_bytes"]} \
        if mac0 and mac1 else {}  # macOS only
    ctx.emit(DraftLoaded(**head, status="refused" if why else "ok", reason=why, t_load_start=t0, t_load_end=t1,
                         rss_before_bytes=rss0, rss_bytes=rss1, **footprints, engine_memory=engine.memory() or None,
                         vocab_size=engine.vocab_size, versions=engine.versions()))
    if why:
        engine.close()
        return None, None
    return ModelDraft(engine), engine


IMPLS = {"macprof": ("speculative",), "native": ("native",), "both": ("speculative", "native")}


def heads_of(i: int, ks: Sequence[int], modes: Sequence[str] = ("speculative",)) -> dict[str, dict]:
    """The requests of prompt ``i``: the plain one and, per k (case "k<k>"), one of macprof's loop
    (mode speculative, key "k<k>") and one of the engine's own (mode native, key "n<k>") as asked."""
    base = {"phase": PHASE, "index": i - 1, "kind": _kind(i)}
    key = {"speculative": "k", "native": "n"}
    return {"plain": {**base, "mode": "plain"},
            **{f"{key[m]}{k}": {**base, "mode": m, "case": f"k{k}"} for m in modes for k in ks}}


def check_head(heads: dict[str, dict], key: str) -> dict:
    """The output check of request ``key`` of a prompt's ``heads``, named as a request of mode
    "check" whose case is the request's key (as its speculative_check event is, run/resume.py)."""
    return {**heads[key], "mode": "check", "case": key}


def undone(heads: dict[str, dict], done: dict) -> bool:
    """Whether a prompt has a request or an output check the journal lacks."""
    return any(request_key(h) not in done for h in heads.values()) or \
        any(request_key(check_head(heads, key)) not in done for key in heads if key != "plain")


def open_native(ctx: PhaseContext[AnyEngine], draft_engine: Engine | None) -> NativeDrafting | None:
    """The engine as its own speculative decoding runs it with this draft (opened untimed), or
    None, with a native_refused event that says why it cannot."""
    native = able(ctx.engine, NATIVE_DRAFT)
    if isinstance(native, str):
        why = native
    else:
        refused = native.native_refusal(draft_engine)
        if refused is None:
            try:
                native.open_native(draft_engine, ctx.settings.ngram)
                return native
            except Exception as exc:  # noqa: BLE001 - a native path that fails to open is recorded; macprof's loop goes on
                refused = f"the engine's own speculative decoding could not be opened: {reason(exc)}"
        why = refused
    ctx.emit(NativeRefused(phase=PHASE, reason=why))
    return None


def run_speculative(ctx: PhaseContext[AnyEngine]) -> None:
    s = ctx.settings
    target = able(ctx.engine, VERIFY)
    why = target if isinstance(target, str) else lacks(target, "cache_cut")
    if isinstance(target, str) or why:
        ctx.emit(DraftLoaded(phase=PHASE, draft=ctx.prepared.ref if ctx.prepared else NGRAM, status="refused",
                             reason=f"the target cannot verify drafts: {why}"))
        return
    prompts = warm_prompts(ctx.builder, "warm", s.prompt_tokens, s.reps)  # the warm phase's prompts
    modes = IMPLS[s.speculative_impl]
    heads = [heads_of(i, s.draft_tokens, modes) for i in range(s.reps + 1)]
    left = [undone(group, ctx.done) for group in heads]
    if not any(left):
        return
    drafter, draft_engine = load_draft(ctx)
    if drafter is None:
        return
    native = open_native(ctx, draft_engine) if "native" in modes else None
    if "native" in modes and native is None:
        modes = tuple(m for m in modes if m != "native")
        heads = [{key: h for key, h in group.items() if h["mode"] != "native"} for group in heads]
        if modes == ():
            if draft_engine is not None:
                draft_engine.close()
            return
    target.reset_peak_memory()
    try:
        for i, prompt in enumerate(prompts):
            if sent(left, i):
                _prompt(ctx, Targets(target, drafter, native), prompt, i, heads[i], record=left[i])
    finally:
        ctx.emit(ev.PhaseMemory(phase=PHASE, engine_memory={**target.memory(), **{
            f"draft_{k}": v for k, v in (draft_engine.memory() if draft_engine else {}).items()}}))
        if draft_engine is not None:
            from macprof.run.worker import _weights

            # what the draft holds at the end, for the phase's memory (analyse/speculative.py)
            ctx.emit(DraftEnd(phase=PHASE, kv_cache_bytes=draft_engine.kv_cache_bytes(),
                              engine_memory=draft_engine.memory() or None,
                              **_weights(draft_engine, (ctx.prepared.path if ctx.prepared else None) or "")))
            draft_engine.close()


@dataclass(frozen=True)
class Targets:
    """What a prompt's requests run on: the target, macprof's drafter, and the target as its own
    speculative decoding where that runs (None: not asked, or refused)."""

    target: Engine
    drafter: Drafter
    native: NativeDrafting | None


def _prompt(ctx: PhaseContext[AnyEngine], on: Targets, prompt: Prompt, i: int, heads: dict[str, dict],
            record: bool) -> None:
    """One prompt: plain and every k, the plain one first on even prompts and last on odd ones
    (the first prompt warms every path up and is discarded); then each speculative output
    checked against the plain one, token by token."""
    target, s, clock = on.target, ctx.settings, ctx.clock
    order = list(heads)  # plain, then macprof's loop and the engine's own per k
    if i % 2:
        order = order[1:] + order[:1]
    outputs: dict[str, tuple[int, ...]] = {}
    for key in order:
        head = heads[key]
        if record and request_key(head) in ctx.done:
            outputs[key] = ctx.done[request_key(head)]
            continue
        _pause(s)
        if key == "plain":
            target.reset()
            rec = announced(ctx.emit, head, lambda: timed_request(target, prompt, s.gen_tokens, clock), record=record)
        elif head["mode"] == "native":
            native, k = on.native, int(key[1:])
            if native is None:  # never: a native request is planned only where it opened (run_speculative)
                continue

            def run_native(native: NativeDrafting = native, k: int = k) -> dict:
                return native_request(native, prompt, s.gen_tokens, k, clock)

            rec = announced(ctx.emit, head, run_native, record=record)
            if record and rec.status == "ok":
                told = native.native_report()
                ctx.emit(SpeculativeNative(phase=PHASE, index=head["index"], kind=head["kind"], case=head["case"], k=k,
                                           impl=told.impl, from_draft=told.from_draft, drafted=told.drafted,
                                           accepted=told.accepted, unknown=told.unknown))
        else:
            k = int(key[1:])
            got: list[list[Round]] = []

            def measure(k: int = k) -> dict:
                r, rounds = speculative_request(target, on.drafter, prompt, s.gen_tokens, k, clock)
                got.append(rounds)
                return r

            rec = announced(ctx.emit, head, measure, record=record)
            if record:
                ctx.emit(SpeculativeRounds(phase=PHASE, index=head["index"], kind=head["kind"], case=key, k=k,
                                           rounds=tuple(got[0] if got else ())))
        outputs[key] = cast(tuple[int, ...], tuple(rec.tokens))  # an in-process request's: ids
    if not record:
        return
    plain = outputs.get("plain", ())
    for key in order:
        if key == "plain" or not plain or request_key(check_head(heads, key)) in ctx.done:
            continue  # a check a resumed run's journal has: made once
        if len(outputs[key]) == 0:
            continue  # a failed request: its failure is the record
        check = compare_outputs(target, prompt, plain, outputs[key])
        head = heads[key]
        ctx.emit(SpeculativeCheck(phase=PHASE, index=head["index"], kind=head["kind"], case=key,
                                  **check.to_json()))

