"""The parent's side of a distributed model: launching its ranks through MLX's own ``mlx.launch``
(never a launcher or transport of macprof's), checking before that the backend, the layout and
the hosts can work, and naming the rank when one dies.

``mlx.launch --backend ring --hosts H1,H2,...`` starts one process per host entry (a local one
for 127.0.0.1, over ssh otherwise), gives each its rank (MLX_RANK) and the ring's addresses
(MLX_HOSTFILE), merges their stdout and stderr into its own and forwards its stdin to every
rank. So the worker's job, written once, reaches every rank; the stdin pipe stays open while
the ranks run, since mlx.launch keeps reading it. When a rank exits with an error mlx.launch
ends the others and says "Node with rank R exited with code C" on stderr.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
from pathlib import Path

from macprof.config import ModelSpec
from macprof.config.dist import Distributed, check_hosts, host_refusal
from macprof.collect import lifeline

LOCAL = "127.0.0.1"  # the one address mlx.launch starts without ssh
PREFLIGHT_TIMEOUT_S = 120.0
SSH_TIMEOUT_S = 5

_PROBE = """
from macprof.collect import lifeline; lifeline.hold()  # ends with macprof, however it ends
import json, sys
import mlx.core as mx
backend, path, parallel = sys.argv[1:4]
out = {"available": mx.distributed.is_available(backend), "support": None}
if out["available"]:
    from mlx_lm.utils import load_model
    from macprof.engines.mlx_shard import support
    model, _ = load_model(__import__("pathlib").Path(path), lazy=True, strict=False)
    out["support"] = support(model)[parallel]
print(json.dumps(out))
"""


def launcher(python: str) -> list[str]:
    """mlx.launch as installed beside this Python (its console script), else its entry point."""
    script = Path(python).parent / "mlx.launch"
    if script.exists():
        return [str(script)]
    return [python, "-c", "import sys; from mlx._distributed_utils.launch import main; sys.exit(main())"]


def free_port(count: int) -> int:
    """A first port with ``count`` free ports after it on loopback: the ring listens on port + rank."""
    for _ in range(50):
        base = random.randrange(20000, 60000)
        try:
            for p in range(base, base + count):
                with socket.socket() as s:
                    s.bind((LOCAL, p))
            return base
        except OSError:
            continue
    return 32323  # mlx.launch's default


def command(python: str, spec: Distributed) -> list[str]:
    """mlx.launch's command line. Every value is joined to its option by "=", so none can be
    read as an option of its own; the hosts are checked again here (config/dist.py check_hosts):
    mlx.launch hands each to ssh with no "--" before it."""
    check_hosts("distributed.hosts", spec.hosts)
    env = [f"--env=PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    return [*launcher(python), f"--backend={spec.backend}", f"--hosts={','.join(spec.hosts)}",
            f"--starting-port={free_port(len(spec.hosts))}", *env, "--", python, "-m", "macprof.run.worker"]


def preflight(python: str, model: ModelSpec) -> str | None:
    """Why this model cannot run as asked, before any rank starts (one line), or None."""
    spec = model.settings.distributed
    assert spec is not None
    if model.engine != "mlx":
        return f"engine {model.engine!r} cannot be sharded: only mlx runs over MLX's distributed runtime"
    for host in spec.hosts:  # checked where they were read; again before ssh sees any
        refusal = host_refusal(host)
        if refusal:
            return f"distributed.hosts: {refusal}"
    for host in dict.fromkeys(spec.hosts):
        if host != LOCAL:
            refusal = _ssh_refusal(host)
            if refusal:
                return refusal
    try:
        probe = subprocess.run([python, "-c", _PROBE, spec.backend, str(model.path), spec.parallel], capture_output=True,
                               text=True, timeout=PREFLIGHT_TIMEOUT_S,
                               **lifeline.popen_args({**os.environ, "HF_HUB_OFFLINE": "1"}))
        facts = json.loads(probe.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as exc:
        return f"could not check the {spec.backend} backend and the model's layouts: {type(exc).__name__}: {exc}"
    if not facts["available"]:
        return (f"backend {spec.backend!r} is not available in this MLX build "
                f"(mx.distributed.is_available({spec.backend!r}) is False)")
    if facts["support"]:
        return f"{spec.parallel} parallel is not supported for this model: {facts['support']}"
    return None


def _ssh_refusal(host: str) -> str | None:
    """mlx.launch reaches every host but 127.0.0.1 over ssh: one that does not answer is said so
    now, in one line, instead of a rank that never joins the ring."""
    try:
        # "--": whatever the host is, ssh reads it as the destination, never as an option
        done = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_TIMEOUT_S}", "--", host, "true"],
                              capture_output=True, text=True, timeout=SSH_TIMEOUT_S * 3)
    except FileNotFoundError:
        return f"host {host} cannot be reached: mlx.launch needs ssh, and there is none"
    except subprocess.TimeoutExpired:
        return f"host {host} does not answer (ssh gave no answer in {SSH_TIMEOUT_S * 3} s)"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"host {host} does not answer: {why}"
    return None


_NODE = re.compile(r"Node with rank (\d+) (exited with code (-?\d+)|was killed)")


def rank_reason(stderr_tail: str, size: int) -> str | None:
    """The rank that failed first, as mlx.launch reported it, and its own last words."""
    m = _NODE.search(stderr_tail)
    if not m:
        return None
    rank = int(m.group(1))
    how = "was ended by mlx.launch" if m.group(2) == "was killed" else _exit(int(m.group(3)))
    said = [line for line in stderr_tail.splitlines() if line.startswith(f"rank {rank}: ")]
    return f"rank {rank} of {size} {how}" + (f" ({said[-1][len(f'rank {rank}: '):]})" if said else "")


def _exit(code: int) -> str:
    if code < 0:
        import signal

        return f"died from {signal.Signals(-code).name}"
    return f"exited with code {code}"
