"""Recursive-doubling AllGather: the recursive-halving windows retraced, partners swapping what they hold
(other N folded, `base.fold`): log2 p latencies instead of the ring's N-1, the same bytes."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import Algorithm, Step, chunk_bounds, fold, fold_steps, traffic
from allreduce_bench.core.algorithms.halving_doubling import partner_windows, window_transfers
from allreduce_bench.core.algorithms.ring import parts, same_memory

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def build(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, n, me = world.group, world.size, world.rank
    chunks = parts(recv, chunk_bounds(recv.numel(), n))
    _, extra = fold(n)
    calls: list[Callable[[], object]] = [] if same_memory(send, chunks[me]) else [partial(chunks[me].copy_, send)]
    if me < 2 * extra and me % 2 == 0:  # folded out: hand my part over, get everything back
        return p2p.hand_over(group, send, recv, group.ranks[me + 1])
    if me < 2 * extra:
        calls.append(partial(p2p.run, p2p.step(group, [], [(chunks[me - 1], group.ranks[me - 1])])))
    for peer, keep, give in reversed(partner_windows(group, me, n)):  # I hold `keep`, the partner `give`
        ops = p2p.step(group, [(chunks[q], peer) for q in keep], [(chunks[q], peer) for q in give])
        calls.append(partial(p2p.run, ops))
    if me < 2 * extra:
        calls.append(partial(p2p.run, p2p.step(group, [(recv, group.ranks[me - 1])], [])))
    return p2p.in_order(calls)


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Fold in (S/N), log2 p doubling steps (the window held, S/N per real chunk), fold out (S)."""
    s = float(size_bytes)
    into, back = fold_steps(s / world_size, world_size, ranks_per_node, back_bytes=s, reduced=0.0)
    doubling = [traffic([(a, b, kept) for a, b, kept, _ in step], ranks_per_node)
                for step in reversed(window_transfers(world_size, s / world_size))]
    return into + doubling + back


ALGORITHM = Algorithm("recursive-doubling", "log2 N steps with rank XOR 2^j, each doubling the "
                      "window held: fewest latencies, the ring's bandwidth (power of two)",
                      build, cost, collective="all_gather")
