"""The command line's options for a model sharded over several machines: `run --hosts ...` and
`estimate --hosts N --link-gbs X` (kept here: cli.py holds the commands)."""

from __future__ import annotations

import click

from macprof.config_dist import BACKENDS, PARALLEL, from_cli


def run_options(f):
    """--hosts / --backend / --parallel / --link-gbs for `macprof run`."""
    for option in reversed([
        click.option("--hosts", "dist_hosts", help="Shard each model over an MLX distributed group launched by mlx.launch: "
                                                 "one host per rank, comma-separated (127.0.0.1,127.0.0.1: two local ranks), "
                                                 "or N for N local ranks."),
        click.option("--backend", "dist_backend", type=click.Choice(BACKENDS), help="MLX distributed backend [ring]."),
        click.option("--parallel", "dist_parallel", type=click.Choice(PARALLEL), help="tensor or pipeline parallel [tensor]."),
        click.option("--link-gbs", "dist_link_gbs", type=float, help="The link's bandwidth for the group's prediction, GB/s "
                                                                     "[the communication pass's measured time]."),
    ]):
        f = option(f)
    return f


def run_override(dist_hosts=None, dist_backend=None, dist_parallel=None, dist_link_gbs=None) -> dict | None:
    return from_cli(dist_hosts, dist_backend, dist_parallel, dist_link_gbs)


def estimate_options(f):
    """--hosts N / --link-gbs / --latency-us / --hidden for `macprof estimate`."""
    for option in reversed([
        click.option("--hosts", "group_hosts", type=int, help="Machines sharing the model (each one rank, each with --bandwidth)."),
        click.option("--link-gbs", "group_link_gbs", type=float, help="Link bandwidth between them, GB/s."),
        click.option("--latency-us", "group_latency_us", type=float, default=0.0, show_default=True,
                     help="Latency per collective, microseconds."),
        click.option("--hidden", "group_hidden", type=int, help="Hidden size (read from MODEL when given)."),
    ]):
        f = option(f)
    return f


def with_group(result: dict, group_hosts=None, group_link_gbs=None, group_latency_us=0.0, group_hidden=None) -> dict:
    if group_hosts is None:
        return result
    from macprof.analyse.estimate_group import group

    return {**result, "group": group(result, group_hosts, group_link_gbs, group_hidden, group_latency_us)}
