"""The backend's own AllReduce (NCCL on GPUs, gloo on CPUs): the reference to beat."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from allreduce_bench.measure.world import World


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    group = world.group.pg
    return lambda: dist.all_reduce(tensor, group=group)
