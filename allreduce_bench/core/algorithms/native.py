"""The backend's own AllReduce (NCCL on GPUs, gloo on CPUs): the reference to beat."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import ring
from allreduce_bench.core.algorithms.base import Algorithm

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    import torch.distributed as dist

    group = world.group.pg
    return lambda: dist.all_reduce(tensor, group=group)


# Modelled as a ring (what NCCL and gloo do for large sizes); `model fit --native-as` changes it.
ALGORITHM = Algorithm("native", "the backend's own AllReduce (NCCL on GPUs, gloo on CPUs)",
                      build, ring.cost)
