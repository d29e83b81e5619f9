"""The conversation phase (issue #26): conversations rendered through a chat template, the cache as
the previous request left it, what the engine reuses (checked against the ids it held), where and
why reuse stops, several apps on one engine, caches that cannot go back, the context running out,
and a resume. The protocol is driven in process on the fake engine; the real engines run it on the
tiny demo models (slow) with a small ChatML template, since the demo models ship none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macprof import config
from macprof.analyse.conversation import build, slope_per_kt
from macprof.engines.base import EngineSettings
from macprof.engines.fake import FakeEngine, write_model
from macprof.errors import MacprofError
from macprof.model.events import parse_event
from macprof.run.chat import FALLBACK, Template, read_template, template_for
from macprof.run.phases import PhaseContext
from macprof.run.phases.conversation import run_conversation, schedule
from macprof.run.phases.conversation_caches import Previous, why_stopped
from macprof.run.prompts import PromptBuilder
from macprof.store import runlog
from tests.test_published_model import smollm2  # noqa: F401 - the fixture
from tests.test_run import macprof

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _engine(tmp_path: Path, cache: str = "full") -> FakeEngine:
    engine = FakeEngine()
    engine.load_model(write_model(tmp_path / f"{cache.replace(':', '-')}.gguf", cache=cache), EngineSettings(n_ctx=4096))
    return engine


def _run(engine, n_ctx: int = 4096, done=None, done_cached=None, **settings):
    s = config.Settings(**{"phases": ("conversation",), "gen_tokens": 6, "turns": 4, "turn_tokens": 12,
                           "system_tokens": 16, **settings})
    events = []
    run_conversation(PhaseContext(engine, PromptBuilder(engine), s, lambda e: events.append(
        parse_event({**e.to_json(), "model": "m"})), n_ctx=n_ctx, done=done or {}, done_cached=done_cached or {}))
    return events, build(events, [], s.app_order, None)


# -- pure parts --------------------------------------------------------------------------------
def test_the_schedule_interleaves_apps_and_keeps_each_app_s_turns_in_order():
    assert schedule(2, 3, "round-robin") == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    mixed = schedule(3, 4, "random")
    assert sorted(mixed) == sorted((a, t) for a in range(3) for t in range(4)) and mixed == schedule(3, 4, "random")
    for a in range(3):
        assert [t for b, t in mixed if b == a] == [0, 1, 2, 3]


def test_why_reuse_stopped_is_told_by_where_the_ids_part():
    prev = Previous([1, 2, 3, 4], "abcd", [5, 6, 7])
    held = [1, 2, 3, 4, 5, 6]
    assert why_stopped([], None, 0, [1, 2], "ab", None, None)[1] == "empty"
    assert why_stopped(held, 1, 0, [1, 2, 9], "x", prev, None)[:2] == (2, "evicted")
    assert why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 6, 8, 9], "abcdefgh", prev, None)[1] == "none_lost"
    d, kind, reason = why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 9, 9], "abcdexx", prev, None)
    # the first differing id: the one the text gives against the one the model generated
    assert (d, kind) == (5, "reply_retokenized") and "to id 9 where the model generated id 6" in reason
    assert why_stopped(held, 0, 0, [1, 2, 8, 9, 9], "abcdyy", prev, None)[:2] == (2, "tokenization_join")
    kind, reason = why_stopped(held, 0, 0, [1, 2, 8, 9, 9], "abXdyy", prev, None)[1:]
    assert kind == "template_rewrite" and "character 2" in reason
    kind, reason = why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 9, 9], "abcdexx", prev, "recurrent memory")[1:]
    assert kind == "cannot_go_back" and "recurrent memory" in reason and "into the previous reply" in reason


def test_a_reply_the_template_writes_otherwise_is_the_template_s_doing():
    """The reply went back as its text "ef" and the model ended it with EOS id 7: a template that
    trims the reply, or closes the assistant turn with another id than the model ended it with,
    rewrote it; the same text read as other ids is the reply re-tokenized."""
    prev = Previous([1, 2, 3, 4], "abcd", [5, 6, 7], " ef", ended="eos")
    assert prev.content == [5, 6]
    held = [1, 2, 3, 4, 5, 6, 7]  # an engine that fed the EOS id before the reply was closed (MLX queues it)
    kind, reason = why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 9, 9], "abcdef!", prev, None)[1:]
    assert kind == "template_rewrite" and "rendered the reply otherwise than its text" in reason
    kind, reason = why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 9, 9], "abcd efxx", prev, None)[1:]
    assert kind == "reply_retokenized" and "to id 9 where the model generated id 6" in reason
    kind, reason = why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 6, 8, 9], "abcd ef<end>", prev, None)[1:]
    assert kind == "template_rewrite" and "ended it with id 7, the template closes the assistant turn with id 8" in reason
    assert why_stopped(held, 0, 0, [1, 2, 3, 4, 5, 6, 7, 9], "abcd ef<end>", prev, None)[1] == "none_lost"


def test_through_a_server_reuse_stops_where_the_known_ids_part_or_where_the_server_says():
    from macprof.run.phases.conversation_caches import counted_stop, server_stop

    prev = Previous([1, 2, 3, 4], "abcd", ["x", "y", "z"])  # a server's reply: its chunks' texts, 3 tokens
    held = [1, 2, 3, 4]  # the previous prompt's ids; its reply's are the server's
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert server_stop([1, 7], 1, None, 0, ids, "t", None, 1, None)[1:3] == (1, "empty")  # the displacing request's
    assert server_stop(held, 3, 1, 0, [1, 2, 9, 9], "x", prev, 2, None)[:3] == (2, 2, "evicted")  # exact: in the prompts
    assert server_stop(held, 3, 0, 0, ids, "abcdefghi", prev, 7, None)[1:3] == (7, "none_lost")
    assert server_stop(held, 3, 0, 0, ids, "abcdefghi", prev, 5, None)[1:3] == (7, "reply_retokenized")
    assert server_stop(held, 3, 0, 0, ids, "abcdefghi", prev, 2, None)[1:3] == (7, "kept_less")
    assert server_stop(held, 3, 0, 0, ids, "abcdefghi", prev, None, "says nothing")[2:] == (
        "unreported", "the prompt extends all 4 tokens of the previous prompt; where reuse stopped in its 3-token "
                      "reply is not known: says nothing")
    assert server_stop(held, 3, 0, 0, [1, 2, 8, 9, 9], "abXdyy", prev, 2, None)[1:3] == (2, "template_rewrite")
    # --api chat: the server's counts only
    assert counted_stop(0, 0, None, 0, 20, 1, None)[1:3] == (None, "empty")
    assert counted_stop(10, 4, 1, 0, 20, 3, None)[1:3] == (14, "evicted")
    assert counted_stop(10, 4, 0, 0, 20, 13, None)[1:3] == (14, "none_lost")
    assert counted_stop(10, 4, 0, 0, 20, 11, None)[1:3] == (14, "reply_retokenized")
    assert counted_stop(10, 4, 0, 0, 20, 6, None)[1:3] == (14, "template_rewrite")


def test_templates_render_as_apps_render_them(tmp_path):
    engine = _engine(tmp_path)
    assert template_for(engine, None).source == "fallback"  # the fake model ships none
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert Template("fallback", FALLBACK).render(messages) == "system:\ns\n\nuser:\nu\n\nassistant:\n"
    path = tmp_path / "t.jinja"
    path.write_text(CHATML)
    t = template_for(engine, read_template(str(path)))
    assert t.source == "file" and t.render(messages).endswith("<|im_start|>assistant\n")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    with pytest.raises(MacprofError, match="does not compile"):
        read_template(str(bad))
    refusing = Template("file", "{{ raise_exception('roles must alternate') }}", str(path))
    with pytest.raises(MacprofError, match=f"chat template \\(file: {path}\\).*roles must alternate"):
        refusing.render(messages)
    assert engine.tokenize_chat("x")[0] == engine.tokenize("")[0]  # the tokenizer's own BOS, once


def test_slope():
    assert slope_per_kt([(1000, 1.0), (2000, 3.0)]) == pytest.approx(2.0)
    assert slope_per_kt([(1000, 1.0), (1000, 2.0)]) is None


# -- the protocol on the fake engine -----------------------------------------------------------
def test_one_app_reuses_what_its_last_request_left_and_says_where_it_stopped(tmp_path):
    events, phase = _run(_engine(tmp_path))
    turns = phase.turns
    assert [(t.app, t.turn) for t in turns] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert turns[0].stop_kind == "empty" and turns[0].reused_tokens == 0
    for prev, t in zip(turns, turns[1:]):
        # the fake engine, as llama.cpp, has not fed the last id it yielded
        assert t.prompt_tokens > prev.prompt_tokens and t.held_tokens == prev.prompt_tokens + prev.reply_tokens - 1
        # the engine's report is what the ids it held allow, never a token past the first difference
        assert t.reuse_checked and t.reused_tokens == t.expected_reuse <= t.common_prefix
        assert t.stop_kind in ("none_lost", "reply_retokenized", "tokenization_join") and t.stop_reason
        assert t.natural.reused_tokens == t.reused_tokens and t.emptied.reused_tokens == 0
        assert t.check.passed and t.check.first_divergence is None
    assert phase.summary.hit_rate == pytest.approx(sum(t.reused_tokens for t in turns[1:]) /
                                                   sum(t.prompt_tokens for t in turns[1:]))
    assert phase.template_source == "fallback" and phase.summary.unchecked_reports == 0
    assert phase.to_json()["turns"][1]["natural"]["mode"] == "natural"


def test_replies_end_at_the_model_s_end_of_generation_id_and_go_back_as_it_produced_them(tmp_path):
    """An app's reply ends at the model's first EOS or at --gen-tokens: the natural request's ids
    are the reply (the EOS counted, its decode over them), the log says how it ended, and the next
    turn's prompt holds the reply's ids up to its end, as the model produced them."""
    from macprof.engines.fake import EOS

    engine = _engine(tmp_path)
    texts: list[str] = []  # the prompts as rendered, in order (the warm-up's first)
    tokenize_chat = engine.tokenize_chat
    engine.tokenize_chat = lambda text: texts.append(text) or tokenize_chat(text)  # type: ignore[method-assign]
    events, phase = _run(engine, turns=6, gen_tokens=16)
    rendered = list(dict.fromkeys(texts))  # each turn's prompt, once (the warm-up is the first turn's; the requests tokenize again)
    assert len(rendered) == 6
    ends = {t.reply_end for t in phase.turns}
    assert ends == {"eos", "max_tokens"}  # the fake model says EOS one time in 16: both happen in six turns
    for t in phase.turns:
        reply = list(t.natural.tokens)
        assert t.reply_tokens == len(reply) == len(t.natural.token_times) and 1 <= len(reply) <= 16
        assert (t.reply_end == "eos") == (reply[-1] == EOS) and EOS not in reply[:-1]
        assert t.reply_end == "eos" or len(reply) == 16
        assert list(t.emptied.tokens) == reply and t.check.first_divergence is None  # both end at the same place
    for k, (prev, t) in enumerate(zip(phase.turns, phase.turns[1:])):
        # the history holds the reply's text up to its end, right after the prompt it answered
        content = list(prev.natural.tokens)[:prev.reply_tokens - (prev.reply_end == "eos")]
        assert rendered[k + 1].startswith(rendered[k] + engine.detokenize(content) + "\n\n")
        assert t.reused_tokens == t.expected_reuse
        if t.reply_text_ids_equal:  # the fake's bytes and words read back as the ids generated, or not
            assert t.stop_kind == "none_lost" and t.reused_tokens == prev.prompt_tokens + prev.reply_tokens - 1
        else:
            assert t.stop_kind == "reply_retokenized" and "where the model generated id" in t.stop_reason
    start = next(e for e in events if e.KIND == "conversation_start")
    assert "end-of-generation id (1 id(s)) or at --gen-tokens (16)" in start.generation
    assert phase.generation == start.generation


def test_another_app_evicts_the_single_slot_cache(tmp_path):
    events, phase = _run(_engine(tmp_path), apps=2)
    later = [t for t in phase.turns if (t.app, t.turn) != (0, 0)]
    assert all(t.stop_kind == "evicted" and t.held_by == 1 - t.app for t in later)
    # the system prompts differ: nothing past the first difference is ever reused
    assert all(t.reused_tokens == t.expected_reuse <= t.common_prefix for t in later)
    assert phase.summary.hit_rate < 0.1 < phase.summary.ideal_hit_rate


def test_a_cache_that_cannot_go_back_reuses_nothing_and_says_why(tmp_path):
    _, phase = _run(_engine(tmp_path, "recurrent"))
    refused = [t for t in phase.turns if t.stop_kind == "cannot_go_back"]
    assert refused and all(t.reused_tokens == 0 and "recurrent" in t.reuse_refused and t.reuse_checked for t in refused)


def test_a_conversation_longer_than_the_context_stops_and_keeps_its_turns(tmp_path):
    events, phase = _run(_engine(tmp_path), n_ctx=160)
    (stop,) = phase.stops
    assert 0 < len(phase.turns) < 4 and stop.turn == len(phase.turns) and "exceed the context of 160" in stop.reason
    assert stop.error is None and stop.prompt_tokens + 6 > 160 and stop.natural is None and stop.emptied is None


def test_a_resumed_conversation_replays_what_was_measured(tmp_path):
    engine = _engine(tmp_path)
    first, whole = _run(engine)
    done = {("conversation", e.case, e.mode, e.kind, e.index): tuple(e.tokens) for e in first
            if e.KIND == "request" and e.index < 2}
    again, _ = _run(_engine(tmp_path), done=done)
    measured = [e for e in again if e.KIND == "request"]
    assert sorted({e.index for e in measured}) == [2, 3]  # only the turns not recorded
    turns = [e for e in again if e.KIND == "conversation_turn"]
    by_turn = {t.turn: t for t in whole.turns}
    for t in turns:  # the same prompts and the same cache as the uninterrupted run
        assert (t.prompt_tokens, t.held_tokens, t.reused_tokens) == (by_turn[t.turn].prompt_tokens,
                                                                   by_turn[t.turn].held_tokens, by_turn[t.turn].reused_tokens)


@pytest.mark.parametrize("cut", [4, 5])
def test_a_run_killed_mid_conversation_resumes_the_same_conversation(fake_dir, tmp_path, cut):
    """Issue #37 row 5: a resumed conversation replayed the recorded turns with empty replies, so
    the turns after the kill measured another conversation. The journal keeps each turn's reply
    and the cache it left, and a turn is settled by its conversation_turn: killed after a turn's
    two requests (4) or between its halves (5), the resumed log's turns are the uninterrupted
    run's, prompts, cache and replies, each turn once."""
    from tests.test_journal import cut_after

    args = ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--turns", "4", "--gen-tokens",
            "8", "--turn-tokens", "10", "--system-tokens", "12"]
    macprof(*args, "--log", str(tmp_path / "whole.json"))
    whole = runlog.load(tmp_path / "whole.json").models[0].phases.conversation
    journal = tmp_path / f"r{cut}.journal.jsonl"
    journal.write_bytes(cut_after((tmp_path / "whole.journal.jsonl").read_bytes(), cut, torn=False))
    macprof(*args, "--resume", str(journal))
    resumed = runlog.load(tmp_path / f"r{cut}.json")
    ph = resumed.models[0].phases.conversation
    assert resumed.complete and [(t.app, t.turn) for t in ph.turns] == [(0, 0), (0, 1), (0, 2), (0, 3)]

    def seen(t):
        return (t.prompt_tokens, t.held_tokens, t.common_prefix, t.reused_tokens, t.stop_kind, t.reply_tokens,
                t.reply_end, tuple(t.natural.tokens), tuple(t.emptied.tokens))
    assert [seen(t) for t in ph.turns] == [seen(t) for t in whole.turns]


class _Failing(FakeEngine):
    """A fake engine whose request fails for chosen turns once the cache is emptied (their emptied
    half): the prompt holds one of ``marks``, a turn's own user message."""

    marks: tuple[str, ...] = ()

    def generate(self, ids, n):
        if not self._states and any(m in self.detokenize(list(ids)) for m in self.marks):
            raise RuntimeError("the engine failed this request")
        return super().generate(ids, n)


def _failing(tmp_path, fails) -> _Failing:
    """``fails``: the (app, turn)s whose emptied half fails."""
    engine = _Failing()
    engine.load_model(write_model(tmp_path / "failing.gguf"), EngineSettings(n_ctx=4096))
    engine.marks = tuple(PromptBuilder(engine).words_text(f"conversation:user:{a}:{t}", 12) for a, t in fails)
    return engine


def _resumed(tmp_path, fails, journaled, **settings):
    """The phase run again as `--resume` runs it after a kill that left ``journaled``: the
    journal read by run/resume.py (the phase's own reader too) into the worker's ``done``."""
    from macprof.model import events as ev
    from macprof.run import resume
    from macprof.run.phases.common import done_cached, done_requests

    past, spawn = resume.ModelPast(), ev.WorkerSpawn(phases=("conversation",), t_spawn=0)
    for e in journaled:
        resume._read(past, e, spawn)
    return _run(_failing(tmp_path, fails), done=done_requests(past.requests), done_cached=done_cached(past.requests),
                **settings)


def _said(phase) -> tuple:
    """What a conversation measured and where each app stopped, without its timings."""
    def seen(t):
        return (t.app, t.turn, t.prompt_tokens, t.held_tokens, t.held_by, t.reused_tokens, t.stop_kind,
                t.reply_tokens, tuple(t.natural.tokens), tuple(t.emptied.tokens))

    def stop(s):
        return (s.app, s.turn, s.reason, s.error, s.prompt_tokens,
                *((r.mode, r.status, r.error, tuple(r.tokens)) if r else None for r in (s.natural, s.emptied)))
    return [seen(t) for t in phase.turns], [stop(s) for s in phase.stops]


FAILS = [(0, 1), (1, 2)]  # case A (natural half first: recorded, then the emptied half fails), case B (emptied first)


def test_a_failed_request_stops_its_app_and_every_stop_stays_in_the_log(tmp_path):
    """Finding 2 of the wave-3 review: app 0's turn 1 (natural half first: it is recorded, the
    emptied half fails) and app 1's turn 2 (emptied half first: it fails, the natural half is
    never sent) each stop their app. Both stops stay in the log, each with its reason and the
    requests it made, the failed one with its error; the summary is the measured turns'. Before,
    only the first app's reason was kept and the failed turns' requests were nowhere."""
    from macprof.analyse.unbuild import conversation_events

    _, whole = _run(_failing(tmp_path, FAILS), apps=2)
    turns, stops = _said(whole)
    assert [t[:2] for t in turns] == [(0, 0), (1, 0), (1, 1)]
    assert [s[:2] for s in stops] == FAILS
    for s in whole.stops:
        assert s.error == "the emptied request failed: RuntimeError: the engine failed this request"
        assert s.reason == f"app {s.app} turn {s.turn} failed: {s.error}: app {s.app}'s conversation stops here"
        assert s.emptied.status == "error" and s.emptied.error == "RuntimeError: the engine failed this request"
        assert s.prompt_tokens == s.emptied.prompt_tokens > 0
    assert whole.stops[0].natural.status == "ok" and whole.stops[0].natural.tokens  # case A: the natural half ran
    assert whole.stops[1].natural is None  # case B: the emptied half ran first, and failed
    assert sum(whole.summary.stops.values()) == 3  # the measured turns' alone
    # read back as its events (macprof verify), it builds the same
    again = build(conversation_events(whole.to_json(), {}, "conversation"), [], "round-robin", None)
    assert again.to_json() == whole.to_json()


def test_a_run_killed_anywhere_resumes_with_each_app_stopped_where_it_stopped(tmp_path):
    """Finding 1 of the wave-3 review: the run of the test above killed after any of its events
    and resumed (its journal read by run/resume.py, the phase's own reader too) gives the log of
    the uninterrupted run: no turn after a stop is measured, no failed turn twice. Before, a resume
    went on with app 0's turns 2 and 3 (case A: both its halves were recorded), or measured app 1's
    turn 2 again (case B) and journaled a second stop for it."""
    events, whole = _run(_failing(tmp_path, FAILS), apps=2)
    for cut in range(1, len(events) + 1):
        again, _ = _resumed(tmp_path, FAILS, events[:cut], apps=2)
        merged = events[:cut] + again
        told = [(e.app, e.turn) for e in merged if e.KIND == "conversation_turn"]
        assert len(told) == len(set(told)) == 5, (cut, told)  # each turn settled once
        assert _said(build(merged, [], "round-robin", None)) == _said(whole), cut


def test_a_run_killed_after_a_failed_turn_resumes_without_measuring_it_again(fake_dir, tmp_path):
    """End to end, two apps whose template raises at their third turn (six messages): the log
    keeps both stops, and a run killed before the first, after it, or after both resumes to the
    same turns and stops, each failed turn journaled once, its log verifying. Before, the resume
    rendered a failed turn again and journaled a second stop for it."""
    from macprof.store.verify import verify_file

    template = tmp_path / "t.jinja"
    template.write_text("{% if messages|length > 5 %}{{ raise_exception('too long for this template') }}{% endif %}"
                        + FALLBACK)
    args = ["run", "--config", str(fake_dir / "models.toml"), "--models", "fake-a", "--phases", "conversation",
            "--apps", "2", "--turns", "4", "--gen-tokens", "4", "--turn-tokens", "8", "--chat-template", str(template)]
    macprof(*args, "--log", str(tmp_path / "whole.json"))

    def said(log):
        ph = runlog.load(log).models[0].phases.conversation
        return ([(t.app, t.turn, t.prompt_tokens, t.reused_tokens, tuple(t.natural.tokens)) for t in ph.turns],
                [(s.app, s.turn, s.error is not None, s.prompt_tokens, s.natural, s.emptied) for s in ph.stops])
    whole = said(tmp_path / "whole.json")
    assert [t[:2] for t in whole[0]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert whole[1] == [(0, 2, True, None, None, None), (1, 2, True, None, None, None)]  # not rendered: no request
    assert verify_file(tmp_path / "whole.json").ok
    lines = (tmp_path / "whole.journal.jsonl").read_bytes().split(b"\n")[:-1]
    failed = [i for i, line in enumerate(lines) if b'"event":"conversation_turn"' in line and b'"error"' in line]
    for n, at in enumerate((failed[0], failed[0] + 1, failed[1] + 1)):
        journal = tmp_path / f"r{n}.journal.jsonl"
        journal.write_bytes(b"\n".join(lines[:at]) + b"\n")
        macprof(*args, "--resume", str(journal))
        told = [(e["app"], e["turn"]) for e in map(json.loads, journal.read_text().splitlines())
                if e["event"] == "conversation_turn"]
        assert len(told) == len(set(told)) == 6, (n, told)
        assert said(tmp_path / f"r{n}.json") == whole, n
        found = verify_file(tmp_path / f"r{n}.json")
        assert found.ok, found.lines()


def test_the_phase_runs_end_to_end_and_reports(fake_dir, tmp_path):
    log = tmp_path / "c.json"
    macprof("run", "--config", str(fake_dir / "models.toml"), "--models", "fake-b", "--turns", "3", "--apps", "2",
            "--app-order", "random", "--gen-tokens", "4", "--turn-tokens", "10", "--log", str(log))
    data = json.loads(log.read_text())
    (model,) = data["models"]
    assert model["settings"]["phases"] == ["conversation"]  # --turns alone asks for the phase
    assert len(model["phases"]["conversation"]["turns"]) == 6
    shown = macprof("show", str(log)).stdout
    assert "conversation: 6 turns of 2 app(s), random" in shown and "Conversation (cache as" in shown
    md = macprof("show", str(log), "--format", "markdown").stdout
    section = md[md.index("**Conversation (cache as the previous request left it)**"):]
    assert "| fake-b |" in section  # its table, as markdown
    # and its turns, one row each, as show's text gives them as lines
    turns = md[md.index("**Conversation turns: fake-b**"):].split("\n\n")[1].splitlines()
    assert turns[0].startswith("| app | turn | prompt | held (whose) | reused | ideal | stop | reply (end) |")
    ph = runlog.load(log).models[0].phases.conversation
    assert [row.split(" | ")[:3] for row in turns[2:]] == [[f"| {t.app}", str(t.turn), str(t.prompt_tokens)]
                                                           for t in ph.turns]
    assert all(f"{t.reply_tokens} ({t.reply_end})" in row for t, row in zip(ph.turns, turns[2:]))
    compared = macprof("compare", str(log), str(log), "--format", "json").stdout
    assert "reuse_rate_p50" in compared and "hit_rate" in compared
    assert runlog.load(log).models[0].phases.conversation.summary.stops


# -- the real engines (slow) -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo-tiny-q4_k_m", "demo-tiny-mlx-f16"])
def test_real_engines_reuse_what_they_hold(tiny_build, tmp_path, name):
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    log = tmp_path / "c.json"
    macprof("run", "--config", str(tiny_build / "models.toml"), "--models", name, "--phases", "conversation",
            "--turns", "3", "--apps", "2", "--gen-tokens", "6", "--turn-tokens", "16", "--chat-template", str(template),
            "--log", str(log))
    ph = runlog.load(log).models[0].phases.conversation
    assert ph.template_source == "file" and len(ph.turns) == 6
    for t in ph.turns:
        assert t.reuse_checked and t.reused_tokens == t.expected_reuse <= t.common_prefix
        assert t.check.passed  # the natural cache's output is the emptied one's, or a near-tie
    assert {t.stop_kind for t in ph.turns} <= {"empty", "evicted"}  # two apps on one slot, round-robin
    one = tmp_path / "one.json"
    macprof("run", "--config", str(tiny_build / "models.toml"), "--models", name, "--phases", "conversation",
            "--turns", "3", "--gen-tokens", "6", "--turn-tokens", "16", "--chat-template", str(template), "--log", str(one))
    turns = runlog.load(one).models[0].phases.conversation.turns
    assert all(t.reused_tokens and t.reuse_checked and t.stop_kind != "evicted" for t in turns[1:])


@pytest.mark.slow
def test_caches_that_cannot_go_back_are_measured_with_their_reason(tiny_dir, tmp_path):
    """A sliding window (gemma3_text, 16 tokens), a recurrent layer (lfm2) and llama.cpp's recurrent
    memory (Mamba): where a turn's prompt leaves what the cache holds (the reply re-tokenized), the
    cache cannot be cut back: that turn reuses nothing, says why, and is measured all the same."""
    from tests.test_caches import GEMMA3, LFM2, write_mamba_gguf, write_mlx_model

    tok = tiny_dir / "mlx" / "demo-tiny-f16"
    models = {"gemma3-swa": ("mlx", write_mlx_model(tmp_path / "gemma3-swa", GEMMA3, tok)),
              "lfm2-conv": ("mlx", write_mlx_model(tmp_path / "lfm2-conv", LFM2, tok)),
              "mamba": ("llama.cpp", write_mamba_gguf(tmp_path / "mamba.gguf", (tok / "tokenizer.json").read_text()))}
    (tmp_path / "models.toml").write_text("\n".join(f'[[models]]\nname = "{n}"\nengine = "{e}"\npath = "{p}"\n'
                                                    for n, (e, p) in models.items()))
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    log = tmp_path / "c.json"
    # two apps: each turn's prompt leaves the other app's held ids after their shared template head
    macprof("run", "--config", str(tmp_path / "models.toml"), "--phases", "conversation", "--turns", "2", "--apps", "2",
            "--gen-tokens", "6", "--turn-tokens", "12", "--system-tokens", "8", "--chat-template", str(template),
            "--timeout", "120", "--log", str(log))
    for m, what in zip(runlog.load(log).models, ("RotatingKVCache", "ArraysCache", "recurrent memory")):
        turns = m.phases.conversation.turns
        assert len(turns) == 4 and all(t.reuse_checked and t.check.passed for t in turns), m.identity.name
        later = turns[1:]
        assert all(t.stop_kind == "cannot_go_back" and t.reused_tokens == 0 and what in t.reuse_refused
                   and "app" in t.stop_reason and t.common_prefix > 0 for t in later), m.identity.name


@pytest.mark.slow
def test_a_published_model_s_own_template_with_its_special_tokens(smollm2, tmp_path):  # noqa: F811 - the fixture
    """SmolLM2 ships a ChatML template whose <|im_start|> / <|im_end|> are special tokens: the
    prompts are rendered through it, the requests read those texts as the special tokens (as the
    phase built them), and each turn reuses what the previous one left."""
    log = tmp_path / "s.json"
    macprof("run", str(smollm2), "--phases", "conversation", "--turns", "3", "--gen-tokens", "8", "--turn-tokens", "16",
            "--system-tokens", "16", "--log", str(log))
    ph = runlog.load(log).models[0].phases.conversation
    assert ph.template_source == "model" and len(ph.turns) == 3
    # <|im_start|> and <|im_end|> are one token each: read as text they would be seven or so
    assert ph.turns[0].prompt_tokens < 16 + 16 + 20
    for t in ph.turns[1:]:
        assert t.reuse_checked and t.reused_tokens == t.expected_reuse > 0 and t.check.passed


# -- through a server (a fake one here; the real ones below, slow) -----------------------------
def _served(loopback, tmp_path, name: str, *args, **options):
    from macprof.bench import fake_server as fakes

    state = fakes.new_state(token_ms=0.5, prompt_ms=0.01, tokenizer="llama.cpp", **{"cache": 1, **options})
    url = loopback(fakes.handler(state)) + "/v1"
    log = tmp_path / f"{name}.json"
    out = macprof("run", "--endpoint", url, "--phases", "conversation", "--turns", "3", "--gen-tokens", "4",
                  "--turn-tokens", "10", "--system-tokens", "12", "--timeout", "30", *args, "--log", str(log)).stdout
    return runlog.load(log).models[0].phases.conversation, state, out, log


def test_through_a_server_reuse_is_what_it_reports_and_never_past_the_first_difference(loopback, tmp_path):
    ph, state, out, log = _served(loopback, tmp_path, "two", "--apps", "2")
    assert len(ph.turns) == 6 and ph.template_source == "fallback"  # no model file known here
    assert "how many conversations the server holds at once is not known" in ph.holds  # --endpoint: said, not assumed
    for t in ph.turns:
        assert t.reused_tokens == t.natural.server.cached_tokens  # the server's own report, kept raw per request
        assert t.reuse_checked and t.reused_tokens <= t.reuse_bound
        assert t.emptied.reused_tokens <= 1  # after the displacing request: its BOS at most
    for t in ph.turns[1:]:  # another app's system prompt: nothing past the first difference
        assert t.stop_kind == "evicted" and t.reused_tokens <= t.common_prefix == t.reuse_bound
    assert ph.summary.hit_rate < 0.1 < ph.summary.ideal_hit_rate
    assert "evict each other" not in out and "not known" in out  # the end-of-run table says it
    one, _, _, _ = _served(loopback, tmp_path, "one")
    for prev, t in zip(one.turns, one.turns[1:]):  # one app: its own last prompt and reply (all of it held), reused
        assert t.stop_kind == "none_lost" and t.reused_tokens == t.reuse_bound == prev.prompt_tokens + 4
        assert t.reuse_checked and t.check.passed and t.natural.ttft_s and t.emptied.ttft_s


def test_through_a_server_replies_end_where_the_server_ends_them(loopback, tmp_path):
    """An app's request holds nothing off: a server that ends its replies after 3 words (its EOS
    counted in usage) gives 4-token replies, recorded as ended at EOS with no count flag; the next
    prompt holds the reply's text, and the server's reuse is bounded by the reply it counted. The
    speed phases still hold EOS off."""
    from macprof.bench import fake_server as fakes

    state = fakes.new_state(token_ms=0.5, prompt_ms=0.01, tokenizer="llama.cpp", cache=1, eos_after=3)
    url = loopback(fakes.handler(state)) + "/v1"
    common = ["--endpoint", url, "--gen-tokens", "4", "--timeout", "30"]
    macprof("run", *common, "--phases", "conversation", "--turns", "3", "--turn-tokens", "10", "--system-tokens", "12",
            "--log", str(tmp_path / "eos.json"))
    ph = runlog.load(tmp_path / "eos.json").models[0].phases.conversation
    timed = [b for b in state["bodies"] if b["path"] == "/v1/completions" and b.get("stream") and b["max_tokens"] == 4]
    assert timed and not any(k in b for b in timed for k in ("ignore_eos", "min_tokens", "logit_bias"))
    assert "as an app's" in ph.generation
    for t in ph.turns:
        assert (t.reply_tokens, t.reply_end) == (4, "eos") and t.natural.server.eos.startswith("none: the reply ends")
        assert not any(f.startswith("count:") for f in t.natural.server.flags)
    assert "assistant:\n w0 w1 w2\n\nuser:" in timed[-1]["prompt"]  # the reply as the server ended it
    for prev, t in zip(ph.turns, ph.turns[1:]):
        assert t.reuse_bound == prev.prompt_tokens + prev.reply_tokens and t.reuse_checked
        assert t.reused_tokens == prev.prompt_tokens + 3 and t.stop_kind == "none_lost"  # its prompt and 3 words
    state["bodies"].clear()
    macprof("run", *common, "--phases", "warm", "--reps", "1", "--prompt-tokens", "16", "--log", str(tmp_path / "w.json"))
    assert all(b.get("ignore_eos") for b in state["bodies"] if b.get("stream") and b["max_tokens"] == 4)


def test_a_server_that_holds_more_than_was_displaced_is_said_not_emptied(loopback, tmp_path):
    """--endpoint to a server whose prompt cache holds two entries (macprof cannot know it): the one
    displacing request leaves the app's last prompt and reply there, so the emptied half reuses
    them: said per turn and in the output, never passed off as an empty cache's TTFT."""
    ph, _, out, log = _served(loopback, tmp_path, "big", cache=2)
    # the first turn too: the warm-up (its prompt) is still held
    assert all(t.not_emptied and t.emptied.reused_tokens > 1 for t in ph.turns) and ph.summary.not_emptied == 3
    assert ph.turns[0].reuse_checked is False  # its natural half found the warm-up, more than was thought held
    assert "not an empty cache's" in out and "not an empty cache's" in macprof("show", str(log)).stdout


def test_a_server_s_impossible_reuse_is_its_claim_never_a_figure(loopback, tmp_path):
    """Issue #37 row 7: a server that says it reused 10^6 tokens of a prompt of a few dozen. That is
    its claim, flagged on the request, never a count: the reuse is unknown with the reason, the log
    stores no negative computed count, and show and compare print no rate from it."""
    from macprof.bench import fake_server as fakes

    state = fakes.new_state(token_ms=0.5, prompt_ms=0.01, tokenizer="llama.cpp", cache=1)
    base = fakes.handler(state)

    class Lying(base):  # type: ignore[misc, valid-type]
        def _send(self, obj: dict) -> None:
            if "prompt_tokens_details" in obj.get("usage", {}):
                obj["usage"]["prompt_tokens_details"]["cached_tokens"] = 10 ** 6
            super()._send(obj)

    url = loopback(Lying) + "/v1"
    log = tmp_path / "lie.json"
    out = macprof("run", "--endpoint", url, "--phases", "conversation", "--turns", "3", "--gen-tokens", "4",
                  "--turn-tokens", "10", "--system-tokens", "12", "--timeout", "30", "--log", str(log)).stdout
    ph = runlog.load(log).models[0].phases.conversation
    for t in ph.turns:
        assert t.reused_tokens is None and t.reuse_rate is None and t.stop_kind in ("unreported", "empty")
        for r in (t.natural, t.emptied):
            assert r.reused_tokens is None and r.computed_prompt_tokens == r.prompt_tokens > 0
            assert r.server.cached_tokens is None and any("cached_tokens = 1000000" in f for f in r.server.flags)
    assert all("impossible: 1000000 (more than the prompt's" in t.reuse_unreported for t in ph.turns[1:])
    assert ph.summary.hit_rate is None and ph.summary.reuse_rate.median is None and ph.summary.unreported == 3
    shown = macprof("show", str(log)).stdout + out + macprof("compare", str(log), str(log)).stdout
    assert "1000000" not in shown.replace("impossible: 1000000", "") and "2512255" not in shown
    data = json.loads(log.read_text())["models"][0]["phases"]["conversation"]
    assert all(t["natural"]["computed_prompt_tokens"] >= 0 for t in data["turns"])


def test_an_older_log_s_impossible_reuse_is_no_rate():
    """A log written before the check at entry: a turn whose reported reuse exceeds its prompt gets
    no rate and stays out of the hit rate."""
    from macprof.model.conversation import ConversationTurn

    events = [ConversationTurn(phase="conversation", app=0, turn=t, prompt_tokens=40, held_tokens=30, held_by=0,
                               common_prefix=30, expected_reuse=30, reused_tokens=r, reuse_bound=34,
                               stop_kind="none_lost") for t, r in ((0, 0), (1, 10 ** 6), (2, 30))]
    phase = build(events, [], "round-robin", None)
    assert [t.reuse_rate for t in phase.turns] == [0.0, None, 0.75]
    assert phase.turns[1].reused_tokens is None and "more than the prompt's 40 tokens" in phase.turns[1].reuse_unreported
    assert phase.summary.hit_rate == 0.75 and phase.summary.reuse_rate.median == 0.75


def test_a_server_that_reports_no_reuse_leaves_it_unknown(loopback, tmp_path):
    ph, _, out, log = _served(loopback, tmp_path, "silent", usage=False)
    assert all(t.reused_tokens is None and t.reuse_rate is None and t.reuse_checked is None for t in ph.turns)
    assert all(t.stop_kind == "unreported" and "no reused-token count" in t.reuse_unreported for t in ph.turns[1:])
    assert ph.summary.hit_rate is None and ph.summary.unreported == 3  # never taken for 0
    assert ph.summary.ttft_natural_s.median and ph.summary.ttft_emptied_s.median  # TTFT is measured all the same
    assert "reused unknown" in macprof("show", str(log)).stdout and "reuse unknown in 3 turns" in out


def test_plot_draws_a_conversation_s_ttft_per_turn_and_its_reuse(loopback, tmp_path):
    """The conversation panel: TTFT natural and emptied per turn in the order run, the reuse rate
    on a second axis; what it draws is the log's figures (an unreported reuse: a gap, not 0)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from macprof.render.conversation import _conversation, conversation_series

    _, _, _, log = _served(loopback, tmp_path, "two", "--apps", "2")
    m = runlog.load(log).models[0]
    series = conversation_series(m)
    turns = m.phases.conversation.turns
    assert series["turns"] == [f"app {t.app} turn {t.turn}" for t in turns]
    assert series["natural"] == [t.natural.ttft_s for t in turns] and series["emptied"] == [t.emptied.ttft_s for t in turns]
    assert series["reuse"] == [t.reuse_rate for t in turns] and series["unreported"] == 0
    fig, ax = plt.subplots()
    _conversation(ax, [("m", m)])
    natural, emptied = ax.lines
    (rate,) = [a for a in fig.axes if a is not ax][0].lines
    assert list(natural.get_ydata()) == series["natural"] and list(emptied.get_ydata()) == series["emptied"]
    assert list(rate.get_ydata()) == [100 * v for v in series["reuse"]]
    plt.close(fig)
    _, _, _, silent = _served(loopback, tmp_path, "silent", usage=False)
    quiet = runlog.load(silent).models[0]
    assert conversation_series(quiet)["unreported"] == 3
    fig, ax = plt.subplots()
    _conversation(ax, [("q", quiet)])
    (rate,) = [a for a in fig.axes if a is not ax][0].lines
    assert all(math.isnan(v) for v in rate.get_ydata()) and "not reported in 3 turns" in ax.get_title()
    plt.close(fig)
    out = tmp_path / "c.png"
    assert macprof("plot", str(log), "-o", str(out)).returncode == 0 and out.stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize("kind,model", [("llama.cpp", "gguf/demo-tiny-f16.gguf"), ("mlx", "mlx/demo-tiny-f16")])
def test_real_servers_report_what_they_reuse_and_another_app_evicts_it(tiny_dir, tmp_path, kind, model):
    """Through llama-cpp-python's server (its reuse read from its log) and mlx_lm.server (its
    usage's cached tokens), as macprof starts them (one conversation held): one app reuses its
    last prompt and reply, as far as the server says; two apps round-robin evict each other, and
    no token past the first difference (their system prompts) is ever reported reused."""
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    common = ["--phases", "conversation", "--turns", "3", "--gen-tokens", "8", "--turn-tokens", "16",
              "--system-tokens", "16", "--chat-template", str(template), "--threads", "1", "--timeout", "120"]
    runs = {}
    for apps in (1, 2):
        log = tmp_path / f"{apps}.json"
        out = macprof("run", "--serve", kind, str(tiny_dir / model), *common, "--apps", str(apps), "--log", str(log)).stdout
        runs[apps] = runlog.load(log).models[0].phases.conversation, out
    one, _ = runs[1]
    assert one.holds is None and len(one.turns) == 3
    for t in one.turns:
        assert t.reused_tokens is not None and t.natural.server.cached_tokens_source  # reported, and where from
        assert t.reuse_checked and t.check.passed and t.emptied.reused_tokens <= 1
    for prev, t in zip(one.turns, one.turns[1:]):
        assert prev.prompt_tokens <= t.reused_tokens <= t.reuse_bound == prev.prompt_tokens + prev.reply_tokens
        assert prev.reply_end in ("eos", "max_tokens") and prev.reply_tokens <= 8 + (prev.reply_end == "eos")
        assert t.stop_kind in ("none_lost", "reply_retokenized")
    two, out = runs[2]
    assert "more than the 1 conversation(s) the cache holds" in two.holds and "evict each other" in out
    for t in two.turns[1:]:
        assert t.stop_kind == "evicted" and t.reuse_checked and t.reused_tokens <= t.common_prefix == t.reuse_bound
    assert two.summary.hit_rate < 0.2 < two.summary.ideal_hit_rate


def test_through_a_chat_api_the_messages_go_as_they_are_and_the_server_s_counts_bound_its_reuse(loopback, tmp_path):
    """--api chat: each turn's messages are sent as they are (the server applies its own template):
    the ids are the server's, so what it reused is bounded by its own counts of what it held."""
    ph, state, _, _ = _served(loopback, tmp_path, "chat", "--api", "chat", "--apps", "2")
    assert ph.template_source == "server" and ph.template_sha256 is None and len(ph.turns) == 6
    timed = [b for b in state["bodies"] if b["path"] == "/v1/chat/completions" and b.get("stream") and b["max_tokens"] == 4]
    assert [m["role"] for m in timed[-1]["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert all("prompt" not in b for b in timed)
    for t in ph.turns:
        assert t.common_prefix is None and t.expected_reuse is None and t.ideal_reuse is None  # the server's ids
        assert t.reused_tokens == t.natural.server.cached_tokens and t.prompt_tokens > 0
    assert ph.turns[0].reuse_checked is None  # after the displacing request, whose count the server does not say
    assert all(t.stop_kind == "evicted" and t.reuse_checked for t in ph.turns[1:]) and ph.summary.ideal_hit_rate is None
    one, _, _, _ = _served(loopback, tmp_path, "chat1", "--api", "chat")
    for prev, t in zip(one.turns, one.turns[1:]):
        assert t.stop_kind == "none_lost" and t.reused_tokens == t.reuse_bound == prev.prompt_tokens + 4


def test_a_server_that_holds_every_app_s_conversation_serves_each_its_own(loopback, tmp_path):
    """A prompt cache of two entries (as `--serve mlx --serve-slots 2` starts mlx_lm.server): two
    apps round-robin each find their own last prompt and reply; the emptied half displaces both
    entries, and the natural state is both apps' requests sent again in their order."""
    from macprof.bench import fake_server as fakes
    from macprof.engines.openai import OpenAIEngine

    state = fakes.new_state(token_ms=0.5, prompt_ms=0.01, tokenizer="llama.cpp", cache=2)
    url = loopback(fakes.handler(state)) + "/v1"
    engine = OpenAIEngine()
    engine.load_model(Path("served"), EngineSettings(endpoint={"url": url, "model": "fake-model", "served": {
        "prompt_slots": 2, "prompt_slots_how": "the fake's prompt cache of two entries"}}))
    events, phase = _run(engine, apps=2)
    assert phase.holds is None and len(phase.turns) == 8  # two apps, two entries: nothing to say
    for t in phase.turns[2:]:
        assert t.held_by == t.app and t.stop_kind == "none_lost" and t.reuse_checked
        assert t.reused_tokens == t.reuse_bound == t.ideal_reuse and t.emptied.reused_tokens <= 1
    assert phase.summary.hit_rate == phase.summary.ideal_hit_rate > 0.5
    with pytest.raises(MacprofError, match="applies to --serve mlx"):
        from macprof.run.serve import command

        command("llama.cpp", tmp_path / "m.gguf", 1, 2048, None, slots=2)


@pytest.mark.slow
def test_mlx_server_with_a_prompt_cache_per_app_serves_each_its_own(tiny_dir, tmp_path):
    """`--serve mlx --serve-slots 2`: mlx_lm.server's prompt cache holds both apps' conversations,
    so each app finds its own (its trie serves the longest shared prefix), as far as it says."""
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    log = tmp_path / "slots.json"
    macprof("run", "--serve", "mlx", str(tiny_dir / "mlx/demo-tiny-f16"), "--phases", "conversation", "--turns", "3",
            "--apps", "2", "--serve-slots", "2", "--gen-tokens", "8", "--turn-tokens", "16", "--system-tokens", "16",
            "--chat-template", str(template), "--timeout", "120", "--log", str(log))
    m = runlog.load(log).models[0]
    ph = m.phases.conversation
    assert ph.holds is None and "--prompt-cache-size 2" in m.engine_versions["command"]
    for t in ph.turns[2:]:
        assert t.held_by == t.app and t.reuse_checked and t.stop_kind in ("none_lost", "reply_retokenized")
        assert t.reused_tokens >= t.held_tokens - 8 and t.emptied.reused_tokens <= 1
    assert ph.summary.hit_rate > 0.5
