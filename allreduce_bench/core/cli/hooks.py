"""The core's own hooks: `run` is what `emulate --benchmarks allreduce` starts."""
from __future__ import annotations

from allreduce_bench.core.hooks import Runnable, hookimpl


@hookimpl
def emulate_runnables() -> list[Runnable]:
    from allreduce_bench.core.config.run import RUNNABLE
    return [RUNNABLE]
