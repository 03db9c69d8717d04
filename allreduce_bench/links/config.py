"""`links`' configuration: the options of `run` less --algos (emulate builds it from the same
options as the command)."""
from __future__ import annotations

from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.config.run import run_config
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.extensions import Runnable


def links_config(collective: str = "all_reduce", **options) -> RunConfig:
    """`links`: the options of `run` less --algos; it measures the backend's AllReduce, or the
    backend's call of --collective (exactly one)."""
    if "," in collective or collective == "all":
        raise UsageError(f"--collective {collective!r}: links measures one collective; name one")
    return run_config(algos="native", collectives=collective, **options)


RUNNABLE = Runnable("links", "links", links_config, without=("--algos",))  # always the backend's
