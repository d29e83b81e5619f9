"""The command line's options for the group of machines `estimate --hosts N --link-gbs X`
predicts (kept here: cli/__init__.py holds the commands). `run --hosts ...` shards a model: that is the
``distributed`` setting, declared with its flags in macprof/config/settings.py."""

from __future__ import annotations

import click

from macprof.cli.options import declared_option


def estimate_options(f):
    """--hosts N / --link-gbs / --latency-us / --hidden for `macprof estimate`."""
    for option in reversed([
        click.option("--hosts", "group_hosts", type=int, help="Machines sharing the model (each one rank, each with --bandwidth)."),
        declared_option("distributed", "--link-gbs", "group_link_gbs", help="Link bandwidth between them, GB/s.",
                        why="a prediction: no communication pass measures the link when it is not given"),
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
