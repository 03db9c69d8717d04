"""What health lends the core: `emulate --benchmarks health`, which watches its hosts itself."""
from __future__ import annotations

from allreduce_bench.core.hooks import Runnable, hookimpl


@hookimpl
def emulate_runnables() -> list[Runnable]:
    from allreduce_bench.health.config import RUNNABLE
    return [RUNNABLE]
