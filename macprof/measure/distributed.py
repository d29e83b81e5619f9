"""The ceiling of a group of machines (pure): one model sharded over N ranks with MLX's
distributed runtime (docs/design.md "The ceiling of a group").

Tensor parallel (mlx-lm's ``shard``): every rank holds 1/N of each sharded matrix and reads it
for every token; after each attention block and each MLP the partial outputs are summed over
the ranks (``all_sum``, two per layer), so the step is the slowest rank's read plus the
collectives:

  step_tensor   = max_r (W / N + kv(c) / N) / bw_r + collectives x latency + wire_bytes / link
  payload/token = 2 x layers x hidden x e                 (the all_sum inputs of one token)
  wire/rank     = 2 x (N - 1) / N x payload               (a ring all_sum: reduce-scatter + all-gather)

Pipeline parallel (mlx-lm's ``pipeline``): rank r holds layers_r and the ranks run in turn, so
for one sequence nothing overlaps:

  step_pipeline = sum_r (W x layers_r / layers) / bw_r + hops x (latency + hidden x e / link)
  hops          = N - 1 activations sent on, plus 1 all_gather of the result (N - 1 wire copies)

Embeddings and the output head are counted in W as for one machine and spread like the
layers: a simplification (mlx-lm keeps them whole on every rank), said so in the result.
Ranks on one host share its memory bandwidth: bw_r = host bandwidth / ranks on that host.
Units: bytes, bytes/s, seconds. ``latency`` is per collective; 0 leaves it out of the model, and
an infinite ``link`` leaves the bytes out (a latency-only model).
"""

from __future__ import annotations

from dataclasses import dataclass

from macprof.measure.words import PARALLEL  # noqa: F401  # the layouts computed here; readers import it here


@dataclass(frozen=True)
class Group:
    weight_bytes: float  # W: weights one token reads on one machine
    layers: int
    hidden: int
    element_bytes: float  # e: bytes per activation element (2 for f16 / bf16)
    rank_bandwidth: tuple[float, ...]  # bytes/s each rank reads its weights at
    link: float  # bytes/s between ranks
    kv_bytes: float = 0.0  # K/V read per token at the mean context, whole model
    latency: float = 0.0  # seconds per collective / hop

    @property
    def size(self) -> int:
        return len(self.rank_bandwidth)


def tensor_payload_bytes(layers: int, hidden: int, element_bytes: float) -> float:
    """The bytes all_sum is given per generated token: two sums of one hidden vector per layer."""
    return 2 * layers * hidden * element_bytes


def ring_wire_bytes(payload: float, size: int) -> float:
    """What each rank sends (and receives) for a ring all_sum of ``payload`` bytes."""
    return 2 * (size - 1) / size * payload if size > 1 else 0.0


def tensor_step_s(g: Group) -> dict:
    n = g.size
    read = max((g.weight_bytes + g.kv_bytes) / n / bw for bw in g.rank_bandwidth)
    collectives = 2 * g.layers if n > 1 else 0
    wire = ring_wire_bytes(tensor_payload_bytes(g.layers, g.hidden, g.element_bytes), n)
    comm = _comm(wire, g.link, collectives, g.latency) if n > 1 else 0.0
    return _result(read, comm, collectives, wire)


def _comm(wire: float, link: float, collectives: int, latency: float) -> float:
    return wire / link + collectives * latency


def layer_split(layers: int, size: int) -> list[int]:
    """mlx-lm's even split (``PipelineMixin.pipeline``): the low ranks get the extra layers."""
    base, extra = divmod(layers, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


def pipeline_step_s(g: Group) -> dict:
    n = g.size
    split = layer_split(g.layers, n)
    read = sum((g.weight_bytes + g.kv_bytes) * k / g.layers / bw for k, bw in zip(split, g.rank_bandwidth))
    activation = g.hidden * g.element_bytes
    hops = n - 1
    # the result's all_gather: every rank's copy of the last hidden state, once per token
    wire = hops * activation + (n - 1) * activation
    collectives = hops + (1 if n > 1 else 0)
    comm = _comm(wire, g.link, collectives, g.latency) if n > 1 else 0.0
    return {**_result(read, comm, collectives, wire), "layers_per_rank": split}


def _result(read: float, comm: float, collectives: int, wire: float) -> dict:
    step = read + comm
    return {"read_s": read, "comm_s": comm, "step_s": step, "tok_s": 1 / step if step > 0 else None,
            "comm_share": comm / step if step > 0 else None, "collectives_per_token": collectives,
            "wire_bytes_per_token": wire}


def predict(g: Group) -> dict:
    """Both layouts for one group, with the model's terms spelled out."""
    return {"tensor": tensor_step_s(g), "pipeline": pipeline_step_s(g), "size": g.size,
            "link_gbs": g.link / 1e9 if g.link != float("inf") else None, "rank_bandwidth_gbs": [bw / 1e9 for bw in g.rank_bandwidth],
            "latency_s": g.latency,
            "payload_bytes_per_token": tensor_payload_bytes(g.layers, g.hidden, g.element_bytes),
            "model": "tensor: max_r (W + kv) / N / bw_r + wire / link + 2 x layers x latency, wire = "
                     "2 (N-1)/N x 2 x layers x hidden x e; pipeline: sum_r (W + kv) x layers_r / layers / bw_r"
                     " + 2 (N-1) x hidden x e / link; embeddings and head spread like the layers"}


def rank_bandwidths(hosts: list[str] | tuple[str, ...], host_bandwidth: float) -> tuple[float, ...]:
    """Each rank's share of its host's bandwidth: ranks on one host share one memory system."""
    return tuple(host_bandwidth / hosts.count(h) for h in hosts)
