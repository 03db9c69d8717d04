"""Configs built from a command's params, as click hands them over (the tests give a few)."""
from __future__ import annotations

from allreduce_bench.core.config import RunConfig, RunOptions
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.config.launch import from_params
from allreduce_bench.core.config.run import run_config
from allreduce_bench.core.environment import Started, how_started
from allreduce_bench.core.hooks import NONE


def run_config_of(started: Started | None = None, host: Host | None = None, **params) -> RunConfig:
    """`run`'s config of `params` (the rest at their defaults); this process's start and host."""
    if host is None:
        from allreduce_bench.core.measure.device import this_host
        host = this_host()
    return run_config(from_params(RunOptions, params), started or how_started(), host, NONE)
