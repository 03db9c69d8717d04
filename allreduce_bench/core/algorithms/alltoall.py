"""AllToAll from point-to-point steps: pairwise exchange (step s: to r+s, from r-s, no rank the target of two
transfers) and direct (every transfer at once, for fully connected nodes)."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import Algorithm, Step, chunk_bounds, traffic

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import World


def _parts(send: torch.Tensor, recv: torch.Tensor, n: int) -> tuple[list, list]:
    bounds = chunk_bounds(send.numel(), n)
    return [send[a:b] for a, b in bounds], [recv[a:b] for a, b in bounds]


def build_pairwise(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, n, r = world.group, world.size, world.rank
    out, into = _parts(send, recv, n)
    steps = [p2p.step(group, sends=[(out[(r + s) % n], group.ranks[(r + s) % n])],
                      recvs=[(into[(r - s) % n], group.ranks[(r - s) % n])]) for s in range(1, n)]
    own = partial(into[r].copy_, out[r])
    return p2p.in_order([_overlapped(steps[0], own) if steps else own,
                         *(partial(p2p.run, ops) for ops in steps[1:])])


def _overlapped(ops: p2p.Ops, local: Callable[[], None]) -> Callable[[], None]:
    """Post a step's transfers, do the local copy while they are in flight, then wait."""
    def call() -> None:
        requests = p2p.start(ops)
        local()
        for request in requests:
            request.wait()
    return call


def build_direct(send: torch.Tensor, recv: torch.Tensor, world: World) -> Callable[[], None]:
    group, n, r = world.group, world.size, world.rank
    out, into = _parts(send, recv, n)
    peers = [q for q in range(n) if q != r]
    ops = p2p.step(group, sends=[(out[q], group.ranks[q]) for q in peers],
                   recvs=[(into[q], group.ranks[q]) for q in peers])
    return _overlapped(ops, partial(into[r].copy_, out[r]))


def cost_pairwise(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """Step s: every rank q sends S/N to q+s; N-1 steps (S the whole send buffer)."""
    n, part = world_size, float(size_bytes) / world_size
    return [traffic([(q, (q + s) % n, part) for q in range(n)], ranks_per_node)
            for s in range(1, n)]


def cost_direct(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """One step: every rank sends S/N to each of its N-1 peers."""
    n, part = world_size, float(size_bytes) / world_size
    if n < 2:
        return []
    return [traffic([(q, t, part) for q in range(n) for t in range(n) if t != q], ranks_per_node)]


PAIRWISE = Algorithm("pairwise", "N-1 steps; in step s rank r sends its part for r+s and receives "
                     "the part from r-s", build_pairwise, cost_pairwise, collective="alltoall")
DIRECT = Algorithm("direct", "every part sent at once: 1 latency, N-1 concurrent transfers per "
                   "rank", build_direct, cost_direct, collective="alltoall")
