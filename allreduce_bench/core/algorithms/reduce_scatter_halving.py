"""Recursive-halving ReduceScatter: log2 p steps, each halving the window a rank sums (other N folded), out of
place: the ring's bandwidth term in log2 p latencies."""
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


def build(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], object]:
    group, n, me = world.group, world.size, world.rank
    _, extra = fold(n)
    if n == 1:
        return (lambda: None) if same_memory(send, recv) else partial(recv.copy_, send)
    if me < 2 * extra and me % 2 == 0:  # folded out: hand the input over, get my chunk back
        return p2p.hand_over(group, send, recv, group.ranks[me + 1])
    acc, buffer = send.new_empty(send.numel()), send.new_empty(send.numel())
    bounds = chunk_bounds(send.numel(), n)
    sums, received, source = parts(acc, bounds), parts(buffer, bounds), parts(send, bounds)
    calls: list[Callable[[], object]] = []
    if me < 2 * extra:  # the odd one of a pair: add the partner's whole input first
        calls.append(p2p.ReduceStep(group, [], [(send, buffer, group.ranks[me - 1], acc)]))
        source = sums
    steps = partner_windows(group, me, n)
    for index, (peer, keep, give) in enumerate(steps):
        last = index == len(steps) - 1  # the chunk kept last is this rank's: into `recv`
        out = {q: recv if last and q == me else sums[q] for q in keep}
        calls.append(p2p.ReduceStep(group, [(source[q], peer) for q in give],
                                    [(source[q], received[q], peer, out[q]) for q in keep]))
        source = sums
    if me < 2 * extra:  # the even partner's summed chunk
        calls.append(partial(p2p.run, p2p.step(group, [(sums[me - 1], group.ranks[me - 1])], [])))
    return p2p.in_order(calls)


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Fold in (S), log2 p halving steps (S/N per real chunk given up, the kept half added), fold out (S/N)."""
    s = float(size_bytes)
    into, back = fold_steps(s, world_size, ranks_per_node, back_bytes=s / world_size)
    halving = [traffic([(a, b, given) for a, b, _, given in step], ranks_per_node,
                       reduced=max(kept for _, _, kept, _ in step))
               for step in window_transfers(world_size, s / world_size)]
    return into + halving + back


ALGORITHM = Algorithm("recursive-halving", "log2 N steps with rank XOR 2^j, each halving the "
                      "window summed: fewest latencies, the ring's bandwidth (power of two)",
                      build, cost, collective="reduce_scatter")
