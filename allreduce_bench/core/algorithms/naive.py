"""Naive AllReduce: everyone sends to rank 0, which adds and sends the sum back (the ring's baseline)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import Algorithm, Step, traffic

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    group = world.group
    flat = tensor.view(-1)
    if group.size == 1:
        return lambda: None
    if group.rank == 0:
        peers = group.ranks[1:]
        buffers = [flat.new_empty(flat.numel()) for _ in peers]
        gather = p2p.step(group, sends=[], recvs=list(zip(buffers, peers)))
        scatter = p2p.step(group, sends=[(flat, peer) for peer in peers], recvs=[])

        def allreduce() -> None:
            p2p.run(gather)
            for buffer in buffers:
                flat.add_(buffer)
            p2p.run(scatter)
    else:
        root = group.ranks[0]
        send = p2p.step(group, sends=[(flat, root)], recvs=[])
        receive = p2p.step(group, sends=[], recvs=[(flat, root)])

        def allreduce() -> None:
            p2p.run(send)  # the tensor is the receive buffer too: the send must finish first
            p2p.run(receive)

    return allreduce


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Rank 0 receives N-1 whole tensors and adds them, then sends as many back."""
    if world_size < 2:
        return []
    s = float(size_bytes)
    peers = range(1, world_size)
    return [traffic([(q, 0, s) for q in peers], ranks_per_node, reduced=(world_size - 1) * s),
            traffic([(0, q, s) for q in peers], ranks_per_node)]


ALGORITHM = Algorithm("naive", "everyone sends to rank 0, which adds and sends the sum back: "
                      "the baseline, rank 0 moves (N-1) x S each way", build, cost)
