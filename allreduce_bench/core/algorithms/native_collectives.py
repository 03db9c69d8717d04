"""The backend's own call for every collective but AllReduce (gloo's ReduceScatter runs as an AllReduce)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import alltoall, broadcast, reduce, ring
from allreduce_bench.core.algorithms.base import Algorithm, Step, traffic

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def _call(new: str, old: str) -> Callable:
    """torch's call by its current name, or by the one torch 2.1 knew it by."""
    import torch.distributed as dist

    return getattr(dist, new, None) or getattr(dist, old)


def build_all_gather(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    gather, group = _call("all_gather_single", "all_gather_into_tensor"), world.group.pg
    return lambda: gather(recv, send, group=group)


def build_reduce_scatter(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    scatter, group = _call("reduce_scatter_single", "reduce_scatter_tensor"), world.group.pg
    return lambda: scatter(recv, send, group=group)


def build_alltoall(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    import torch.distributed as dist

    group = world.group.pg
    return lambda: dist.all_to_all_single(recv, send, group=group)


def build_broadcast(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    import torch.distributed as dist

    root, group = world.group.ranks[0], world.group.pg
    return lambda: dist.broadcast(recv, src=root, group=group)


def build_reduce(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    import torch.distributed as dist

    root, group = world.group.ranks[0], world.group.pg
    return lambda: dist.reduce(recv, dst=root, group=group)


def build_sendrecv(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], object]:
    """nccl-tests' sendrecv: every rank sends to r+1 and receives from r-1 at once (one rank: a copy)."""
    from allreduce_bench.core.algorithms import p2p

    group = world.group
    if group.size == 1:
        return lambda: recv.copy_(send)
    ops = p2p.step(group, sends=[(send, group.peer(1))], recvs=[(recv, group.peer(-1))])
    return lambda: p2p.run(ops)


def cost_reduce_scatter(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Modelled as the ring ReduceScatter (what NCCL does for large sizes); see runs_as."""
    return ring.cost_reduce_scatter(size_bytes, world_size, ranks_per_node)


def cost_sendrecv(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """One step: S from every rank to the next."""
    n = world_size
    return [traffic([(q, (q + 1) % n, float(size_bytes)) for q in range(n)], ranks_per_node)] if n > 1 else []


def reduce_scatter_runs_as(backend: str) -> str:
    return "all_reduce" if backend == "gloo" else ""


def _native(collective: str, what: str, build, cost, runs_as=None) -> Algorithm:
    return Algorithm("native", f"the backend's own {what}", build, cost, collective=collective,
                     runs_as=runs_as)


ALGORITHMS = [
    _native("all_gather", "AllGather (all_gather_into_tensor)", build_all_gather, ring.cost_all_gather),
    _native("reduce_scatter", "ReduceScatter (reduce_scatter_tensor; on gloo an AllReduce of the "
            "whole input, see runs_as)", build_reduce_scatter, cost_reduce_scatter,
            reduce_scatter_runs_as),
    _native("alltoall", "AllToAll (all_to_all_single)", build_alltoall, alltoall.cost_pairwise),
    _native("broadcast", "Broadcast from rank 0", build_broadcast, broadcast.cost_binomial),
    _native("reduce", "Reduce to rank 0", build_reduce, reduce.cost_binomial),
    _native("sendrecv", "send to rank r+1 and receive from r-1 (batch_isend_irecv)",
            build_sendrecv, cost_sendrecv),
]
