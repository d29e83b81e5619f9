"""A conversation phase's reuse per turn beside the engine's own account of the same conversation.

    python benchmarks/conversation_replay.py RUN.json [--model NAME] [--flash-attn on|off] [--json]

RUN.json is a `macprof run --phases conversation` log of a model run in process (llama.cpp or MLX,
not through a server). The script replays the same seeded conversation with the engine library's
own API, and nothing of macprof's measuring path:

- the messages: the phase's inputs, as the phase made them: its seeded words (run/prompts.py
  PromptBuilder over this model's vocabulary, the phase's keys) and its schedule of apps and turns;
- the prompt: the messages rendered by the library's own template code (llama-cpp-python's
  Jinja2ChatFormatter, as its Llama builds one from the GGUF's template; transformers'
  apply_chat_template under mlx-lm), with the template the phase used (the model's own, the
  --chat-template file, or macprof's documented fallback where the model has none), and tokenized
  as the library's chat path tokenizes (llama-cpp-python: special tokens parsed, no BOS added;
  mlx-lm's stream_generate: BOS added unless the text starts with it);
- the reply: the library's greedy generation, ended at its end-of-generation id (Llama.generate at
  temperature 0 until llama_vocab_is_eog; mlx-lm's stream_generate with a greedy sampler, which
  stops at the tokenizer's EOS ids), or at the phase's --gen-tokens;
- the reuse: llama-cpp-python's Llama keeps one KV cache and its generate reuses the longest
  common prefix with what it holds (its own "Llama.generate: N prefix-match hit" line, read here,
  and its n_tokens before the request); mlx-lm's prompt cache (make_prompt_cache), cut back to the
  longest common prefix with the ids it holds by trim_prompt_cache as mlx_lm.server does, the
  cache's own offset read after the cut.

Each turn is run with the cache as the previous request left it (natural), then from an empty one
(emptied: llama-cpp-python's reset, a fresh mlx-lm prompt cache), after a discarded warm-up as the
phase does. Per turn it prints macprof's prompt tokens, held, reused, stop kind, reply and TTFT
natural / emptied beside the replay's, and says where they differ (prompt ids, replies, reuse).
TTFT here is tokenization to first token, as the phase times it; a shared machine moves both.
Not part of the test suite: it loads the model again and takes as long as the phase.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from macprof.run.chat import FALLBACK
from macprof.run.phases.conversation import schedule
from macprof.run.prompts import PromptBuilder
from macprof.model.log import ModelResult
from macprof.store.runlog import load

HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit")


@dataclass
class Turn:
    app: int
    turn: int
    prompt_tokens: int = 0
    held_tokens: int = 0  # what the engine's cache held before the natural request
    reused_tokens: int | None = None  # what the engine says it reused
    ttft_natural_s: float | None = None
    ttft_emptied_s: float | None = None
    reply: list[int] = field(default_factory=list)
    reply_end: str = ""
    ids: list[int] = field(default_factory=list)  # the prompt's


class LlamaCppReplay:
    """llama-cpp-python's Llama: one KV cache, reused by its generate's prefix matching."""

    kind = "in_process"  # what PromptBuilder asks of an engine: not a server's (whose words it offers)

    def __init__(self, path: str, threads: int | None, n_ctx: int, flash_attn: bool) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.lc = llama_cpp
        # n_batch as macprof's adapter (llama-bench's default, 2048 at most), its threads, flash attention
        # as asked (macprof leaves llama.cpp's auto, which resolves to on for a CPU)
        self.llm = llama_cpp.Llama(path, n_ctx=n_ctx, n_batch=min(2048, n_ctx), n_threads=threads,
                                   n_threads_batch=threads, flash_attn=flash_attn, verbose=False)
        self.vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self._formatter = Jinja2ChatFormatter
        eos, bos = self.llm.token_eos(), self.llm.token_bos()
        self.eos_text = self.llm._model.token_get_text(eos) if eos != -1 else ""
        self.bos_text = self.llm._model.token_get_text(bos) if bos != -1 else ""

    # -- what PromptBuilder reads (the phase's own seeded words, from this vocabulary) --
    @property
    def vocab_size(self) -> int:
        return self.llm.n_vocab()

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def detokenize(self, ids: list[int]) -> str:
        return self.llm.detokenize(ids).decode("utf-8", errors="replace")

    def own_template(self) -> str | None:
        return self.llm.metadata.get("tokenizer.chat_template")

    # -- the library's own chat path --
    def render(self, template: str, messages: list[dict]) -> list[int]:
        formatted = self._formatter(template=template, eos_token=self.eos_text, bos_token=self.bos_text)(
            messages=messages)
        return self.llm.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)

    def held(self) -> list[int]:
        return list(self.llm._input_ids)

    def empty(self) -> None:
        self.llm.reset()

    def generate(self, ids: list[int], n: int, clock) -> tuple[list[int], list[int], int]:
        """(reply, its stamps, the reuse the engine reported)."""
        self.llm.verbose = True  # its prefix-match line, printed to sys.stderr before the prompt is evaluated
        said = io.StringIO()
        out: list[int] = []
        times: list[int] = []
        try:
            with contextlib.redirect_stderr(said):
                gen = self.llm.generate(ids, temp=0.0, repeat_penalty=1.0)
                for token in gen:
                    times.append(clock())
                    out.append(int(token))
                    if self.lc.llama_vocab_is_eog(self.vocab, token) or len(out) >= n:
                        break
                gen.close()
        finally:
            self.llm.verbose = False
        hit = HIT.search(said.getvalue())
        return out, times, int(hit.group(1)) if hit else 0


class MlxReplay:
    """mlx-lm: one prompt cache, cut back to the longest common prefix with trim_prompt_cache."""

    kind = "in_process"  # what PromptBuilder asks of an engine: not a server's (whose words it offers)

    def __init__(self, path: str) -> None:
        import mlx_lm
        from mlx_lm.models.cache import make_prompt_cache

        self.path = Path(path)
        self.model, self.tokenizer = mlx_lm.load(path)
        self.make = make_prompt_cache
        self.cache = make_prompt_cache(self.model)
        self.ids: list[int] = []  # what the cache was fed, as far as its offset says

    @property
    def vocab_size(self) -> int:  # as the model's config declares it (the phase's words are drawn from it)
        config = json.loads((self.path / "config.json").read_text())
        return int(config.get("vocab_size") or config.get("text_config", {})["vocab_size"])

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def detokenize(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def own_template(self) -> str | None:
        return getattr(self.tokenizer, "chat_template", None)

    def render(self, template: str, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, chat_template=template, add_generation_prompt=True,
                                                  tokenize=False)
        bos = self.tokenizer.bos_token  # as stream_generate tokenizes a text prompt
        return list(self.tokenizer.encode(text, add_special_tokens=bos is None or not text.startswith(bos)))

    def _offset(self) -> int:
        return int(next(c.offset for c in self.cache if hasattr(c, "offset")))

    def held(self) -> list[int]:
        return self.ids[:self._offset()]

    def empty(self) -> None:
        self.cache, self.ids = self.make(self.model), []

    def generate(self, ids: list[int], n: int, clock) -> tuple[list[int], list[int], int]:
        from mlx_lm.generate import stream_generate
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache
        from mlx_lm.sample_utils import make_sampler

        held = self.held()
        keep = 0
        while keep < min(len(held), len(ids) - 1) and held[keep] == ids[keep]:
            keep += 1
        if keep and can_trim_prompt_cache(self.cache):
            trim_prompt_cache(self.cache, self._offset() - keep)
        else:
            self.empty()
        reused = self._offset()  # the cache's own word for what it kept
        out: list[int] = []
        times: list[int] = []
        for r in stream_generate(self.model, self.tokenizer, ids[reused:], max_tokens=n, prompt_cache=self.cache,
                                 sampler=make_sampler(temp=0.0)):
            times.append(clock())
            out.append(int(r.token))
        self.ids = list(ids) + out
        return out, times, reused


def replay(log_path: Path, name: str | None, flash_attn: bool) -> tuple[ModelResult, list[Turn]]:
    log = load(log_path)
    m = next((m for m in log.models if name in (None, m.identity.name)), None)
    if m is None or not m.phases.conversation:
        sys.exit(f"{log_path}: no model {name or ''} with a conversation phase")
    s, ph = m.settings, m.phases.conversation
    if ph.template_source == "server":
        sys.exit(f"{log_path}: the conversation ran through a server: replay an in-process run")
    longest = max((t.prompt_tokens for t in ph.turns), default=0) + s.gen_tokens + 64
    engine = (LlamaCppReplay(str(m.identity.path), s.threads, -(-longest // 256) * 256, flash_attn)
              if m.identity.engine == "llama.cpp" else MlxReplay(str(m.identity.path)))
    template = (Path(s.chat_template).read_text(encoding="utf-8") if s.chat_template else
                engine.own_template() or FALLBACK)
    builder = PromptBuilder(engine)  # the phase's own seeded words: its inputs
    messages = {a: [{"role": "system", "content": builder.words_text(f"conversation:system:{a}", s.system_tokens)}]
                for a in range(s.apps)}
    clock = time.perf_counter_ns
    first = messages[0] + [{"role": "user", "content": builder.words_text("conversation:user:0:0", s.turn_tokens)}]
    engine.empty()
    engine.generate(engine.render(template, first), s.gen_tokens, clock)  # the warm-up, discarded
    engine.empty()
    turns = []
    for a, t in schedule(s.apps, s.turns, s.app_order):
        if t > 0 and s.tool_tokens:
            messages[a].append({"role": "tool", "content": builder.words_text(f"conversation:tool:{a}:{t}",
                                                                                s.tool_tokens)})
        messages[a].append({"role": "user", "content": builder.words_text(f"conversation:user:{a}:{t}", s.turn_tokens)})
        t0 = clock()
        ids = engine.render(template, messages[a])
        held = engine.held()
        reply, times, reused = engine.generate(ids, s.gen_tokens, clock)
        turn = Turn(a, t, len(ids), len(held), reused, (times[0] - t0) / 1e9 if times else None, ids=ids)
        eos = reply and _ended(engine, reply[-1])
        turn.reply, turn.reply_end = reply, "eos" if eos else "max_tokens"
        engine.empty()
        t0 = clock()
        again, times, _ = engine.generate(engine.render(template, messages[a]), s.gen_tokens, clock)
        turn.ttft_emptied_s = (times[0] - t0) / 1e9 if times else None
        if again != reply:
            print(f"app {a} turn {t}: the emptied reply differs from the natural one", file=sys.stderr)
        content = reply[:-1] if eos else reply
        messages[a].append({"role": "assistant", "content": engine.detokenize(content)})
        turns.append(turn)
    return m, turns


def _ended(engine, token: int) -> bool:
    if isinstance(engine, LlamaCppReplay):
        return bool(engine.lc.llama_vocab_is_eog(engine.vocab, token))
    return token in set(engine.tokenizer.eos_token_ids)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--model", help="the model's name in the log (its first with a conversation by default)")
    ap.add_argument("--flash-attn", choices=("on", "off"), default="on",
                    help="llama.cpp: macprof leaves flash attention to llama.cpp's auto, on for a CPU [on]")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    m, turns = replay(a.log, a.model, a.flash_attn == "on")
    ours = {(t.app, t.turn): t for t in m.phases.conversation.turns}
    rows, differs = [], []
    for r in turns:
        t = ours.get((r.app, r.turn))
        if t is None:
            differs.append(f"app {r.app} turn {r.turn}: not in macprof's log")
            continue
        mine = list(t.natural.tokens) if t.natural else []
        rows.append({"app": r.app, "turn": r.turn, "macprof": {
            "prompt_tokens": t.prompt_tokens, "held_tokens": t.held_tokens, "reused_tokens": t.reused_tokens,
            "stop_kind": t.stop_kind, "reply_tokens": t.reply_tokens, "reply_end": t.reply_end,
            "ttft_natural_s": t.natural.ttft_s if t.natural else None,
            "ttft_emptied_s": t.emptied.ttft_s if t.emptied else None},
            "replay": {k: v for k, v in asdict(r).items() if k not in ("app", "turn", "reply", "ids")}
            | {"reply_tokens": len(r.reply)}})
        if r.prompt_tokens != t.prompt_tokens:
            differs.append(f"app {r.app} turn {r.turn}: prompt {r.prompt_tokens} tokens here, {t.prompt_tokens} in macprof's")
        if r.reply != mine:
            k = next((i for i, (x, y) in enumerate(zip(r.reply, mine)) if x != y), min(len(r.reply), len(mine)))
            differs.append(f"app {r.app} turn {r.turn}: the replies part at token {k} ({len(r.reply)} here, "
                           f"{len(mine)} in macprof's)")
        if r.held_tokens != t.held_tokens:  # each loop's own: what it fed of its last reply
            differs.append(f"app {r.app} turn {r.turn}: the cache held {r.held_tokens} tokens here, {t.held_tokens} "
                           f"in macprof's")
        if r.reused_tokens != t.reused_tokens:
            differs.append(f"app {r.app} turn {r.turn}: reused {r.reused_tokens} here, {t.reused_tokens} in macprof's")
    told = [r for r in turns if r.turn > 0]
    hit = sum(r.reused_tokens or 0 for r in told) / max(1, sum(r.prompt_tokens for r in told))
    if a.json:
        print(json.dumps({"model": m.identity.name, "engine": m.identity.engine, "turns": rows, "hit_rate": hit,
                          "macprof_hit_rate": m.phases.conversation.summary.hit_rate, "differs": differs}, indent=1))
        return
    print(f"{m.identity.name} ({m.identity.engine}): macprof's conversation | the engine's own replay")
    print(f"{'app':>3} {'turn':>4} | {'prompt':>6} {'held':>5} {'reused':>6} {'stop':<17} {'reply':>9} "
          f"{'TTFT nat':>9} {'TTFT emp':>9} | {'prompt':>6} {'held':>5} {'reused':>6} {'reply':>9} {'TTFT nat':>9} "
          f"{'TTFT emp':>9}")
    for row in rows:
        x, y = row["macprof"], row["replay"]
        ours_reply, their_reply = f"{x['reply_tokens']} {x['reply_end']}", f"{y['reply_tokens']} {y['reply_end']}"
        print(f"{row['app']:>3} {row['turn']:>4} | {x['prompt_tokens']:>6} {x['held_tokens']:>5} "
              f"{str(x['reused_tokens']):>6} {x['stop_kind']:<17} {ours_reply:>9} {_s(x['ttft_natural_s']):>9} "
              f"{_s(x['ttft_emptied_s']):>9} | {y['prompt_tokens']:>6} {y['held_tokens']:>5} {str(y['reused_tokens']):>6} "
              f"{their_reply:>9} {_s(y['ttft_natural_s']):>9} {_s(y['ttft_emptied_s']):>9}")
    print(f"hit rate (turns after the first): macprof {m.phases.conversation.summary.hit_rate:.4f}, replay {hit:.4f}")
    print("\n".join(differs) if differs else "the same prompts, cache, replies and reuse on every turn")


if __name__ == "__main__":
    main()
