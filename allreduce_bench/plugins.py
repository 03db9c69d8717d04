"""The built-in features' hooks, in the order their report sections and `emulate` benchmarks
appear; `hooks()` adds those ALLREDUCE_BENCH_PLUGINS names (a site's or a test's own)."""
from __future__ import annotations

from allreduce_bench.core.cli import hooks as core
from allreduce_bench.core.hooks import Hooks
from allreduce_bench.ddp import hooks as ddp
from allreduce_bench.expect import hooks as expect
from allreduce_bench.hang import hooks as hang
from allreduce_bench.health import hooks as health
from allreduce_bench.links import hooks as links
from allreduce_bench.model import hooks as model
from allreduce_bench.nccl_log import hooks as nccl_log

FEATURES = (core, links, model, ddp, nccl_log, expect, hang, health)


def hooks() -> Hooks:
    return Hooks.with_user_plugins(FEATURES)
