"""A server's requests: one streamed request stamped chunk by chunk (what warm, prefix and grid
use through ``timed_request``), and the ``concurrency`` phase: closed-loop levels (C clients,
each sending its next request when its last one ended) and open-loop levels (seeded Poisson
arrivals at R requests/s), each bounded in count and in time.

t0 is stamped just before the request is sent (after the prompt text is ready: a server
tokenizes on its side, inside TTFT); t_i when the chunk carrying token i is received.
"""

from __future__ import annotations

import random
import threading
import time

from macprof.config import Settings
from macprof.engines.base import IN_PROCESS, Engine, ServerEngine
from macprof.errors import reason
from macprof.model import events as ev
from macprof.model.phase_events import LoadLevel
from macprof.model.serving import LoadLevelResult
from macprof.run.phases.common import ByKind, Clock, Emit, PhaseContext
from macprof.run.phases.server_request import finish, stream_request
from macprof.run.prompts import Prompt


# -- the concurrency phase -------------------------------------------------------------------
def _in_process(ctx: PhaseContext[Engine]) -> None:
    """An engine in this process serves no concurrent clients: each level refused, with why."""
    for case in load_cases(ctx.settings):
        ctx.emit(ev.CaseUnsupported(phase="concurrency", case=case["id"], batch=case.get("concurrency") or 0,
                                    reason=IN_PROCESS))


def _served(ctx: PhaseContext[ServerEngine]) -> None:
    """Every level of ``load_cases``: a closed loop of C clients or
    an open loop at R requests/s. The requests' timed parts are gathered as they end and recorded
    once the level has ended (their counts settled then, engines/openai.py ``settle``)."""
    engine, s = ctx.engine, ctx.settings
    lock = threading.Lock()

    def emit(event: ev.Event) -> None:
        with lock:
            ctx.emit(event)

    for case in load_cases(s):
        prompts = [ctx.builder.prompt(f"load:{case['id']}:{i}", s.prompt_tokens) for i in range(case["requests"])]
        counted = engine.prompt_tokens(prompts[0].text) if prompts else None
        t_start = ctx.clock()
        done: list[tuple[int, dict]] = []  # (prompt index, the timed part), as the requests end
        sent = _closed(engine, case, prompts, s.gen_tokens, done, lock, ctx.clock) if case["mode"] == "closed" \
            else _open(engine, case, prompts, s.gen_tokens, done, lock, ctx.clock)
        t_end = ctx.clock()
        # counted once the level has ended, so that no counting request joins the load it measures
        for i, raw in done:
            try:
                result = finish(engine, raw, prompts[i].text, s.gen_tokens, counted)
            except Exception as exc:  # noqa: BLE001 - what its settling raised (a server's count) fails that request alone
                result = {"status": "error", "error": reason(exc), "t0": raw["t0"], "token_times": raw["times"]}
            _emit_request(emit, case, i, result)
        level = LoadLevelResult(id=case["id"], mode=case["mode"], concurrency=case.get("concurrency"), rate=case.get("rate"),
                                planned=case["requests"], sent=sent, seed=case.get("seed"), time_limit_s=case["seconds"])
        emit(LoadLevel.of(level, phase="concurrency", case=case["id"], t_start=t_start, t_end=t_end))


run_concurrency = ByKind(_in_process, _served)


def _emit_request(emit: Emit, case: dict, index: int, result: dict) -> None:
    emit(ev.Request(phase="concurrency", index=index, kind="measured", case=case["id"], **result))


def _closed(engine: ServerEngine, case: dict, prompts: list[Prompt], n: int, done: list, lock: threading.Lock, clock: Clock) -> int:
    """C clients; each takes the next prompt when its last request ended, until the count or
    the level's time is used up (a request in flight at the time limit still completes)."""
    nxt = iter(range(len(prompts)))
    take = threading.Lock()
    end = time.monotonic() + case["seconds"]
    sent = [0]

    def client() -> None:
        while time.monotonic() < end:
            with take:
                i = next(nxt, None)
                if i is None:
                    return
                sent[0] += 1
            raw = stream_request(engine, prompts[i].text, n, clock)
            with lock:
                done.append((i, raw))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(case["concurrency"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent[0]


def _open(engine: ServerEngine, case: dict, prompts: list[Prompt], n: int, done: list, lock: threading.Lock, clock: Clock) -> int:
    """Seeded Poisson arrivals: exponential gaps of mean 1/R from ``random.Random(seed)``; each
    request starts on its own thread at its arrival time, whatever is in flight."""
    rng = random.Random(case["seed"])
    arrivals, at = [], 0.0
    for _ in prompts:
        at += rng.expovariate(case["rate"])
        if at > case["seconds"]:
            break
        arrivals.append(at)
    start = time.monotonic()
    threads = []

    def one(i: int) -> None:
        raw = stream_request(engine, prompts[i].text, n, clock)
        with lock:
            done.append((i, raw))

    for i, at in enumerate(arrivals):
        time.sleep(max(0.0, start + at - time.monotonic()))
        t = threading.Thread(target=one, args=(i,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return len(arrivals)


def load_cases(s: Settings) -> list[dict]:
    """The levels of the concurrency phase: each closed-loop C of ``concurrency`` (``load_requests``
    requests, else 2 × C and at least ``reps``), then each open-loop rate of ``rates`` (as many
    requests, else 2 × ``reps``), each bounded by ``load_seconds``; arrivals seeded per level."""
    cases = [{"id": f"c{c}", "mode": "closed", "concurrency": c, "rate": None, "seed": None,
              "requests": s.load_requests or max(2 * c, s.reps), "seconds": s.load_seconds} for c in s.concurrency]
    cases += [{"id": f"r{r:g}", "mode": "open", "concurrency": None, "rate": r, "seed": i,
               "requests": s.load_requests or 2 * s.reps, "seconds": s.load_seconds} for i, r in enumerate(s.rates)]
    return cases
