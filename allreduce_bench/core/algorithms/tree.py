"""Binary tree (a heap): reduce to rank 0 and broadcast from it, pipelined in chunks in global ticks so chunk
c goes down while c+1 still goes up: C + H + D - 1 ticks (H the root's height, D the deepest depth)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import Algorithm, Step, chunk_bounds, traffic

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World

CHUNK_BYTES = 1 << 20
MAX_CHUNKS = 16


def children(i: int, n: int) -> list[int]:
    return [c for c in (2 * i + 1, 2 * i + 2) if c < n]


def height(i: int, n: int) -> int:
    below = children(i, n)
    return 1 + max(height(c, n) for c in below) if below else 0


def depth(i: int) -> int:
    return (i + 1).bit_length() - 1


def chunk_count(size_bytes: float, numel: int) -> int:
    return max(1, min(MAX_CHUNKS, numel, int(size_bytes // CHUNK_BYTES)))


def ticks(n: int, chunks: int) -> int:
    return chunks + height(0, n) + depth(n - 1) - 1


def schedule(me: int, n: int, chunks: int) -> dict[int, list[tuple[str, int, int]]]:
    """tick -> this rank's (what, chunk, peer), what one of up-recv, up-send, down-recv, down-send."""
    plan = defaultdict(list)
    top = height(0, n)
    for c in range(chunks):
        for child in children(me, n):
            plan[c + height(child, n)].append(("up-recv", c, child))
            plan[c + top + depth(me)].append(("down-send", c, child))
        if me:
            parent = (me - 1) // 2
            plan[c + height(me, n)].append(("up-send", c, parent))
            plan[c + top + depth(me) - 1].append(("down-recv", c, parent))
    return plan


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    flat = tensor.view(-1)
    group, n, me = world.group, world.size, world.rank
    chunks = chunk_count(flat.numel() * flat.element_size(), flat.numel())
    views = [flat[a:b] for a, b in chunk_bounds(flat.numel(), chunks)]
    longest = max(v.numel() for v in views)
    buffers = {child: flat.new_empty(longest) for child in children(me, n)}  # one per child
    calls: list[Callable[[], object]] = []
    for tick in sorted(plan := schedule(me, n, chunks)):
        sends, receives, plain = [], [], []
        for what, c, peer in plan[tick]:
            view, peer_rank = views[c], group.ranks[peer]
            if what == "up-recv":
                receives.append((view, buffers[peer][:view.numel()], peer_rank))
            elif what == "down-recv":
                plain.append((view, peer_rank))
            else:
                sends.append((view, peer_rank))
        if receives:  # the chunks sent up in this tick are not the ones being added (earlier ticks)
            calls.append(p2p.ReduceStep(group, sends, receives, plain))
        else:
            calls.append(partial(p2p.run, p2p.step(group, sends, plain)))

    return p2p.in_order(calls)


def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """C + H + D - 1 ticks, each edge carrying S/C both ways, a rank with two children adding two chunks."""
    n, s = world_size, float(size_bytes)
    if n < 2:
        return []
    chunks = chunk_count(s, max(1, int(s)))
    part = s / chunks
    edges = [(i, (i - 1) // 2, part) for i in range(1, n)]
    edges += [(b, a, size) for a, b, size in edges]
    return [traffic(edges, ranks_per_node, reduced=len(children(0, n)) * part,
                    repeat=ticks(n, chunks))]


ALGORITHM = Algorithm("tree", "binary-tree reduce to rank 0 and broadcast from it, pipelined in "
                      "chunks: 2 log2 N + C ticks", build, cost)
