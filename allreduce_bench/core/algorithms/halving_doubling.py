"""Halving-doubling (Rabenseifner): recursive-halving ReduceScatter, then recursive-doubling AllGather; other
N folded. 2 log2 p latencies with the ring's bandwidth term."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import (
    Algorithm,
    Step,
    chunk_bounds,
    fold,
    fold_steps,
    real_rank,
    traffic,
    virtual_rank,
    window_ranks,
)

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def windows(v: int, p: int) -> list[tuple[int, tuple[int, int], tuple[int, int]]]:
    """ReduceScatter steps of virtual rank v: (distance m, chunks kept [a, b), chunks sent [a, b))."""
    lo, hi, out = 0, p, []
    m = p // 2
    while m >= 1:
        mid = (lo + hi) // 2
        keep, send = ((mid, hi), (lo, mid)) if v & m else ((lo, mid), (mid, hi))
        out.append((m, keep, send))
        lo, hi = keep
        m //= 2
    return out


def partner_windows(group, me: int, n: int) -> list[tuple[int, list[int], list[int]]]:
    """Per halving step of real rank `me`: (partner's global rank, real ranks it keeps, those it gives)."""
    v, (p, _) = virtual_rank(me, n), fold(n)
    assert v is not None, "a rank folded out has no halving steps"
    return [(group.ranks[real_rank(v ^ m, n)], window_ranks(keep, n), window_ranks(give, n))
            for m, keep, give in windows(v, p)]


def every_rank_windows(p: int) -> list[tuple]:
    return list(zip(*(windows(v, p) for v in range(p))))


def window_transfers(world_size: int, part: float) -> list[list[tuple[int, int, float, float]]]:
    """Per halving step, every virtual rank's (rank, partner, bytes kept, bytes given up)."""
    n, (p, _) = world_size, fold(world_size)
    return [[(real_rank(v, n), real_rank(v ^ m, n), len(window_ranks(keep, n)) * part,
              len(window_ranks(give, n)) * part) for v, (m, keep, give) in enumerate(v_windows)]
            for v_windows in every_rank_windows(p)]


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    flat, v, fold_in, fold_out = p2p.power_of_two_part(tensor, world)
    group, n, (p, _) = world.group, world.size, fold(world.size)
    calls = list(fold_in)
    if v is not None:
        starts = [a for a, _ in chunk_bounds(flat.numel(), p)] + [flat.numel()]

        def view(chunks: tuple[int, int]) -> torch.Tensor:
            return flat[starts[chunks[0]]:starts[chunks[1]]]

        steps = windows(v, p)
        buffer = flat.new_empty(max(view(keep).numel() for _, keep, _ in steps))
        for m, keep, send in steps:
            peer = group.ranks[real_rank(v ^ m, n)]
            kept = view(keep)
            calls.append(p2p.ReduceStep(group, [(view(send), peer)],
                                        [(kept, buffer[:kept.numel()], peer)]))
        for m, keep, send in reversed(steps):  # my window is `keep`, the partner's is `send`
            peer = group.ranks[real_rank(v ^ m, n)]
            calls.append(partial(p2p.run, p2p.step(group, [(view(keep), peer)], [(view(send), peer)])))
    calls += fold_out

    return p2p.in_order(calls)


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Fold in, log2 p halving steps of S m/p (sent and added), log2 p doubling steps, fold out."""
    s, n = float(size_bytes), world_size
    p, _ = fold(n)
    into, back = fold_steps(s, n, ranks_per_node)
    halving, m = [], p // 2
    while m >= 1:
        part = s * m / p
        pairs = [(real_rank(v, n), real_rank(v ^ m, n), part) for v in range(p)]
        halving.append((pairs, part))
        m //= 2
    reduce_scatter = [traffic(pairs, ranks_per_node, reduced=part) for pairs, part in halving]
    all_gather = [traffic(pairs, ranks_per_node) for pairs, _ in reversed(halving)]
    return into + reduce_scatter + all_gather + back


ALGORITHM = Algorithm("halving-doubling", "Rabenseifner: recursive-halving ReduceScatter, "
                      "recursive-doubling AllGather: 2 log2 N latencies, the ring's bandwidth",
                      build, cost)
