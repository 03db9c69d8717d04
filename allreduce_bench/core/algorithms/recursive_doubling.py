"""Recursive doubling: log2 N exchanges of the whole vector with rank XOR 2^j, each added (same bits on every
rank); other N folded. Fewest latencies at S bytes a step: it wins at small sizes."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import Algorithm, Step, fold, fold_steps, real_rank, traffic

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def exchange(ops: p2p.Ops, flat: torch.Tensor, buffer: torch.Tensor) -> Callable[[], None]:
    def call() -> None:
        p2p.run(ops)  # the send reads `flat`: add only once it has left
        flat.add_(buffer)
    return call


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    flat, v, fold_in, fold_out = p2p.power_of_two_part(tensor, world)
    group, n, (p, _) = world.group, world.size, fold(world.size)
    steps = []
    if v is not None:
        buffer = flat.new_empty(flat.numel())
        for j in range(p.bit_length() - 1):
            peer = group.ranks[real_rank(v ^ (1 << j), n)]
            steps.append(exchange(p2p.step(group, [(flat, peer)], [(buffer, peer)]), flat, buffer))
    calls = fold_in + steps + fold_out

    return p2p.in_order(calls)


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Fold in (S sent and added by the odd ranks), log2 p exchanges of S (each added), fold out."""
    s, n = float(size_bytes), world_size
    p, _ = fold(n)
    into, back = fold_steps(s, n, ranks_per_node)
    exchanges = []
    for j in range(p.bit_length() - 1):
        pairs = [(real_rank(v, n), real_rank(v ^ (1 << j), n), s) for v in range(p)]
        exchanges.append(traffic(pairs, ranks_per_node, reduced=s))
    return into + exchanges + back


ALGORITHM = Algorithm("recursive-doubling", "log2 N exchanges of the whole vector with rank "
                      "XOR 2^j: fewest latencies, wins at small sizes", build, cost)
