"""`links`' configuration: the options of `run` less --algos."""
from __future__ import annotations

from allreduce_bench.core.config import RunConfig, RunOptions
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.config.launch import from_params
from allreduce_bench.core.config.run import run_config
from allreduce_bench.core.environment import Started
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import Hooks, Runnable


def links_config(params: dict, started: Started, host: Host, hooks: Hooks) -> RunConfig:
    """The options of `run` less --algos: the backend's AllReduce, or its call of --collective (one)."""
    collective = params.get("collective", "all_reduce")
    if "," in collective or collective == "all":
        raise UsageError(f"--collective {collective!r}: links measures one collective; name one")
    options = from_params(RunOptions, {**params, "algos": "native", "collectives": collective})
    return run_config(options, started, host, hooks)


RUNNABLE = Runnable("links", "links", links_config, without=("--algos",))  # always the backend's
