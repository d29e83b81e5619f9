"""The progress display: the interface the orchestrator calls, plain lines on a stream that is
not a terminal, the rich bar, the ETA as a pure function of an injected clock, and the planned
request count against what the protocols really emit."""

import io
import itertools
import json

import pytest

from macprof import cases, config
from macprof.engines.capabilities import CAPABILITIES
from macprof.run.phases import PHASES, PhaseContext, planned_requests
from macprof.run.progress import Bar, Callback, Display, Lines, as_display, clock_text, eta_s, to_stream
from macprof.run.prompts import PromptBuilder
from tests.conftest import FIXTURES


class FakeClock:
    """Time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the ETA, pure ---------------------------------------------------------------------------
@pytest.mark.parametrize("done,total,elapsed,left", [
    (0, 10, 5.0, None),     # no pace yet
    (3, 0, 5.0, None),      # no plan
    (5, 20, 10.0, 30.0),    # 2 s a unit, 15 units to go
    (20, 20, 40.0, 0.0),
    (25, 20, 40.0, 0.0),    # more than planned: done, never negative
])
def test_eta_is_the_mean_pace_times_what_is_left(done, total, elapsed, left):
    assert eta_s(done, total, elapsed) == left


@pytest.mark.parametrize("seconds,text", [(None, "-:--"), (0, "0:00"), (42.4, "0:42"), (725, "12:05"), (3723, "1:02:03")])
def test_clock_text(seconds, text):
    assert clock_text(seconds) == text


def test_display_counts_with_an_injected_clock():
    clock = FakeClock()
    d = Display(clock)
    d.plan(10)
    assert d.eta() is None
    clock.now += 4
    d.advance("a")
    d.advance("b")
    assert (d.done, d.elapsed(), d.eta()) == (2, 4.0, 16.0)
    d.reach(5)  # a model failed: its remaining units will not come
    assert (d.done, d.eta()) == (5, 4.0)
    d.reach(3)  # never backwards
    assert d.done == 5


# -- what is shown ---------------------------------------------------------------------------
def test_plain_lines_on_a_stream_that_is_not_a_terminal():
    clock, stream = FakeClock(), io.StringIO()
    lines = Lines(stream, clock)
    lines.plan(3)
    lines.note("model: identifying")
    clock.now += 1.25
    lines.advance("model: warm 1/2: ok\x1b[2J")
    lines.reach(3)
    lines.close()
    assert stream.getvalue().split("\n") == ["[    0.0s] model: identifying", "[    1.2s] model: warm 1/2: ok", ""]


def test_to_stream_chooses_lines_off_a_terminal():
    assert isinstance(to_stream(io.StringIO()), Lines)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    bar = to_stream(Tty())
    assert isinstance(bar, Bar)
    bar.close()


def test_the_bar_counts_and_notes_stay():
    clock, stream = FakeClock(), io.StringIO()
    bar = Bar(stream, clock)
    bar.note("reading machine facts")
    bar.plan(3)
    for i in range(3):
        clock.now += 2
        bar.advance(f"model: warm {i + 1}/3: ok")
    bar.note("model: FAILED in warm: [red]not markup[/red]")
    bar.close()
    bar.close()  # twice is harmless (an interrupt, then the normal exit)
    out = stream.getvalue()
    assert "[    0.0s] reading machine facts" in out and "[    6.0s] model: FAILED in warm: [red]not markup[/red]" in out
    assert "3/3" in out and "0:06 elapsed" in out and "model: warm 3/3: ok" in out


def test_a_plain_function_gets_every_line():
    seen = []
    d = as_display(seen.append)
    assert isinstance(d, Callback)
    d.plan(2)
    d.note("n")
    d.advance("a")
    d("called")  # an older progress("...") call is a note
    assert seen == ["n", "a", "called"]
    silent = as_display(None)
    silent.advance("x")
    assert silent.done == 1 and type(silent) is Display


# -- the plan counts what the protocols emit -------------------------------------------------
class WordEngine:
    """Just enough engine for the protocols: one token per word, deterministic outputs."""

    vocab_size = 300
    kind = "in_process"
    capabilities = dict.fromkeys(CAPABILITIES)
    reused_tokens = 0
    reuse_refused = None  # its cache keeps whatever it is given

    def cut_refusal(self, n_tokens):
        return None

    def __init__(self) -> None:
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = [" " + a + b for a, b in itertools.islice(itertools.product(letters, letters), self.vocab_size)]
        self.ids = {w.strip(): i for i, w in enumerate(self.words)}

    def tokenize(self, text):
        return [self.ids[w] for w in text.split()]

    def detokenize(self, ids):
        return "".join(self.words[i] for i in ids)

    def generate(self, ids, n):
        for k in range(n):
            yield (sum(ids) + k) % self.vocab_size

    def generate_batch(self, ids_list, n):
        gens = [list(self.generate(ids, n)) for ids in ids_list]
        for k in range(n):
            yield [g[k] for g in gens]

    def reset(self):
        pass

    reset_peak_memory = close_batch = reset

    def truncate(self, d):
        pass

    def open_batch(self, size, n_ctx):
        pass

    def cached_tokens(self):
        return 0

    def kv_cache_bytes(self):
        return 0

    def memory(self):
        return {}


def test_planned_requests_is_what_the_protocols_emit():
    s = config.Settings(phases=("cold", "warm", "prefix", "grid", "depth", "batch"), prompt_tokens=8, gen_tokens=3,
                        prefix_tokens=4, reps=2, cold_trials=2, prompt_grid=(4, 8), gen_grid=(2, 3), depths=(0, 5),
                        batches=(1, 2))
    engine = WordEngine()
    builder, events = PromptBuilder(engine), []
    plan = cases.plan(s)
    for phase in s.phases:
        for trial in range(s.cold_trials if phase == "cold" else 1):
            PHASES[phase](PhaseContext(engine, builder, s, events.append, cases=plan.get(phase, []), trial=trial))
    assert sum(e.KIND == "request" for e in events) == planned_requests(s) == 2 * 2 + 3 + 6 + 4 * 3 + 2 * 3 + 2 * 3


def test_planned_requests_matches_a_recorded_run():
    for m in json.loads((FIXTURES / "runlogs" / "tiny-a.json").read_text())["models"]:
        ph = m["phases"]
        recorded = 2 * len(ph["cold"]["trials"]) + len(ph["warm"]["requests"]) + 2 * len(ph["prefix"]["pairs"])
        assert planned_requests(config.settings_from_dict(m["settings"])) == recorded
