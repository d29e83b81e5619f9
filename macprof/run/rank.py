"""A worker as one rank of an MLX distributed group (started by ``mlx.launch``, run/distributed.py).

Every rank runs the job's phases alike, since the collectives pair the ranks' requests up; only
rank 0 writes to the event stream (mlx.launch merges every rank's stdout into its own). The
other ranks keep their request stamps in memory, and at the end of each phase, outside every
timed request, the group gathers them to rank 0 (``all_gather`` of each rank's JSON, padded
to the longest), which streams them as ``rank_timeline`` events. Gathering over the group
rather than writing per-rank files is what works across machines: a remote rank's files would
be on another Mac. A rank that dies loses only the stamps of its phase in flight; rank 0's own
events are already with the parent.

After the phases, an untimed diagnostic pass (``comm_pass``) decodes the warm request's shape
once more with every collective evaluated on its own (inputs first, then the collective), so
the time inside the collectives (waiting for the slowest rank included) is told apart from
compute, step by step. Synchronising per collective removes the overlap the timed decode has,
so the pass says where the time goes, not how fast decoding is; it is recorded as such.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

COLLECTIVES = ("all_sum", "all_gather", "send", "recv", "recv_like")


@dataclass
class RankContext:
    group: Any
    rank: int
    size: int
    spec: dict  # the job's "distributed": hosts, backend, parallel
    held: list[dict] = field(default_factory=list)  # this rank's request stamps of the phase in flight

    def keep(self, emit: Callable) -> Callable:
        """Rank 0: streams, and keeps nothing (its stamps are the request events themselves).
        Other ranks: keep the request stamps; ``emit`` there writes nothing (worker._silent)."""
        if self.rank == 0:
            return emit

        def held(event) -> None:
            if event.KIND == "request":
                self.held.append({k: getattr(event, k) for k in ("phase", "index", "kind", "case", "mode", "status",
                                                                 "t0", "t_tokenized", "token_times", "tokens")})
            emit(event)
        return held

    def gather(self, payload: Any) -> list[Any] | None:
        """Every rank's ``payload`` at rank 0 (None on the others); all ranks must call it."""
        import mlx.core as mx

        data = json.dumps(payload, separators=(",", ":")).encode()
        longest = int(mx.distributed.all_max(mx.array([len(data)]), group=self.group, stream=mx.cpu).item())  # type: ignore[arg-type]  # an int array's item
        padded = mx.array(list(data) + [0x20] * (longest - len(data)), dtype=mx.uint8)
        rows = mx.distributed.all_gather(padded[None], group=self.group, stream=mx.cpu)
        mx.eval(rows)
        if self.rank != 0:
            return None
        return [json.loads(bytes(bytearray(r.tolist())).decode()) for r in rows]  # type: ignore[arg-type]  # a uint8 row: ints

    def phase_end(self, phase: str, emit: Callable) -> None:
        from macprof.model import events as ev

        mine, self.held = self.held, []
        every = self.gather(mine)
        for r, requests in enumerate(every or []):
            if r != 0:
                emit(ev.RankTimeline(phase=phase, rank=r, requests=tuple(requests)))


def open_group(spec: dict) -> RankContext:
    import mlx.core as mx

    from macprof.errors import MacprofError

    try:
        group = mx.distributed.init(strict=True, backend=spec["backend"])
    except RuntimeError as exc:
        raise MacprofError(f"backend {spec['backend']!r} could not form the group: {exc}") from None
    expected = len(spec["hosts"])
    if group.size() != expected:
        raise MacprofError(f"the group has {group.size()} ranks, the hosts list {expected}")
    return RankContext(group, group.rank(), group.size(), spec)


def sharded(engine: str, ctx: RankContext) -> Any:
    from macprof import engines
    from macprof.errors import MacprofError

    if engine != "mlx":
        raise MacprofError(f"engine {engine!r} cannot be sharded: only mlx runs over MLX's distributed runtime")
    engines.require("mlx")
    from macprof.engines.mlx_shard import ShardedMlxEngine

    return ShardedMlxEngine(ctx.group, ctx.spec["parallel"])


def facts(ctx: RankContext) -> dict:
    import mlx.core as mx

    from macprof.collect.machine import collect_machine

    machine = collect_machine()
    keep = ("host_id", "os", "os_version", "arch", "cpu_model", "cpu_cores", "memory_total_bytes", "chip", "gpu_cores")
    return {"rank": ctx.rank, "pid": os.getpid(), "device": str(mx.default_device()), "mlx": getattr(mx, "__version__", None),
            **{k: machine.get(k) for k in keep if k in machine}}


def group_event(ctx: RankContext, emit: Callable) -> None:
    """Every rank's machine facts, gathered once the model is loaded."""
    from macprof.model import events as ev
    from macprof.model.distributed import GroupResult

    every = ctx.gather(facts(ctx))
    if every is not None:
        emit(ev.RankGroup.of(GroupResult(size=ctx.size, backend=ctx.spec["backend"], parallel=ctx.spec["parallel"],
                                         hosts=tuple(ctx.spec["hosts"]), ranks=tuple(every))))


class _Timer:
    """Wraps mx.distributed's collectives: each one's inputs are evaluated first, then the
    collective alone, and the time and the bytes it was given are added up."""

    def __init__(self, mx: Any) -> None:
        self.mx, self.saved = mx, {name: getattr(mx.distributed, name) for name in COLLECTIVES}
        self.comm_ns = self.calls = self.payload = 0

    def __enter__(self) -> _Timer:
        for name, fn in self.saved.items():
            setattr(self.mx.distributed, name, self._timed(fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self.saved.items():
            setattr(self.mx.distributed, name, fn)

    def _timed(self, fn: Callable) -> Callable:
        mx = self.mx

        def timed(*args: Any, **kwargs: Any) -> Any:
            arrays = [a for a in args if isinstance(a, mx.array)]
            mx.eval(arrays)
            t = time.perf_counter_ns()
            out = fn(*args, **kwargs)
            mx.eval(out)
            self.comm_ns += time.perf_counter_ns() - t
            self.calls += 1
            self.payload += sum(a.nbytes for a in arrays) or int(out.nbytes)
            return out
        return timed


def comm_pass(ctx: RankContext, engine: Any, ids: list[int], n: int) -> dict:
    """One request's decode, every collective timed on its own (see the module's note)."""
    import mlx.core as mx

    engine.reset()
    model, cache = engine.model, engine._cache
    steps = []
    with mx.stream(engine._stream), _Timer(mx) as timer:
        mx.eval(model(mx.array(ids, dtype=mx.uint32)[None], cache=cache)[:, -1, :])
        prefill = {"comm_ns": timer.comm_ns, "collectives": timer.calls, "payload_bytes": timer.payload}
        y = mx.array([ids[-1]], dtype=mx.uint32)
        for _ in range(n):
            timer.comm_ns = timer.calls = timer.payload = 0
            t = time.perf_counter_ns()
            y = mx.argmax(model(y[None], cache=cache)[:, -1, :], axis=-1)
            mx.eval(y)
            steps.append({"step_ns": time.perf_counter_ns() - t, "comm_ns": timer.comm_ns,
                          "collectives": timer.calls, "payload_bytes": timer.payload})
    engine.reset()
    return {"rank": ctx.rank, "prompt_tokens": len(ids), "prefill": prefill, "steps": steps}


def finish(ctx: RankContext, engine: Any, builder: Any, settings: Any, emit: Callable) -> None:
    """The diagnostic pass on every rank, gathered to rank 0 as one comm_profile event."""
    from macprof.model import events as ev

    ids = list(builder.prompt("comm-pass", settings.prompt_tokens).ids)
    mine = comm_pass(ctx, engine, ids, settings.gen_tokens)
    every = ctx.gather(mine)
    if every is not None:
        emit(ev.CommProfile(parallel=ctx.spec["parallel"], prompt_tokens=len(ids), gen_tokens=settings.gen_tokens,
                            method="diagnostic pass: each collective's inputs evaluated, then the collective alone; "
                                   "comm = time inside the collectives (waiting for the slowest rank included), "
                                   "compute = step - comm; untimed, not the decode rate",
                            ranks=tuple(every)))

