"""Timeline math against docs/design.md's worked example, with an injected clock."""

import itertools

import pytest

from macprof.engines.capabilities import CAPABILITIES
from macprof.measure.timeline import derive
from macprof.run.phases.common import timed_request
from macprof.run.prompts import Prompt

S = 1_000_000_000


def worked_example_times():
    # t0 = 0, t_1 = 0.8 s, t_101 = 2.8 s, one token every 20 ms in between
    return [int(0.8 * S) + i * 20_000_000 for i in range(101)]


def test_worked_example():
    d = derive(0, int(0.1 * S), worked_example_times(), prompt_tokens=350)
    assert d.n_tokens == 101
    assert d.ttft_s == pytest.approx(0.8)
    assert sum(d.itl_s) / len(d.itl_s) == pytest.approx(0.02)
    assert d.decode_tok_s == pytest.approx(50.0)
    assert d.e2e_tok_s == pytest.approx(101 / 2.8)
    assert round(d.e2e_tok_s, 1) == 36.1
    assert d.prefill_tok_s == pytest.approx(350 / 0.7)
    assert d.tokenize_s == pytest.approx(0.1)


def test_single_token_has_no_decode_rate():
    d = derive(0, 10, [int(0.5 * S)], prompt_tokens=4)
    assert d.n_tokens == 1
    assert d.ttft_s == pytest.approx(0.5)
    assert d.decode_tok_s is None  # (n - 1) / (t_n - t_1) has no interval to measure
    assert d.itl_s == ()
    assert d.e2e_tok_s == pytest.approx(2.0)


def test_no_tokens_gives_no_figures():
    d = derive(0, 10, [], prompt_tokens=4)
    assert (d.n_tokens, d.ttft_s, d.decode_tok_s, d.e2e_tok_s, d.prefill_tok_s) == (0, None, None, None, None)


def test_failed_tokenization_has_no_prefill_rate():
    d = derive(0, None, [S], prompt_tokens=4)
    assert d.prefill_tok_s is None and d.ttft_s == pytest.approx(1.0)


class FakeEngine:
    """Pure-logic stand-in: yields fixed tokens; the injected clock makes timings exact."""

    reused_tokens = 0
    kind = "in_process"
    capabilities = dict.fromkeys(CAPABILITIES)

    def __init__(self, fail_after=None):
        self.fail_after = fail_after

    def tokenize(self, text):
        return [1, 2, 3]

    def generate(self, ids, n):
        for i in range(n):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("engine broke")
            yield 100 + i

    def cached_tokens(self):
        return 0

    def kv_cache_bytes(self):
        return None

    def reset_peak_memory(self):
        pass

    def memory(self):
        return {}


def fake_clock(ticks):
    it = iter(ticks)
    return lambda: next(it)


def test_timed_request_uses_the_callers_clock():
    # t0, t_tokenized, then one stamp per token
    ticks = [0, int(0.1 * S)] + worked_example_times()
    rec = timed_request(FakeEngine(), Prompt("x", (1, 2, 3)), 101, clock=fake_clock(ticks))
    assert rec["status"] == "ok"
    assert rec["token_times"] == worked_example_times()
    d = derive(rec["t0"], rec["t_tokenized"], rec["token_times"], rec["prompt_tokens"])
    assert d.decode_tok_s == pytest.approx(50.0)


def test_failed_request_keeps_its_timestamps():
    ticks = itertools.count(0, S)
    rec = timed_request(FakeEngine(fail_after=3), Prompt("x", (1, 2, 3)), 10, clock=lambda: next(ticks))
    assert rec["status"] == "error" and "engine broke" in rec["error"]
    assert len(rec["token_times"]) == 3 and rec["tokens"] == [100, 101, 102]
