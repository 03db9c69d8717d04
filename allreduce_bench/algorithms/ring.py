"""Ring AllReduce from point-to-point steps: ReduceScatter (N-1 steps), then AllGather (N-1).

The tensor is cut into N chunks (sizes differ by at most one element; some are empty when there
are fewer elements than ranks). In ReduceScatter step s, rank r sends chunk (r-s) mod N to
r+1, receives chunk (r-s-1) mod N from r-1 and adds it in; afterwards rank r holds the full sum
of chunk (r+1) mod N. In AllGather step s it sends chunk (r+1-s) mod N and receives chunk
(r-s) mod N straight into place. Each rank sends 2(N-1)/N of the tensor in all, whatever N.

`RingPlan` works on any group, so the hierarchical scheme reuses its two phases inside a node.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from allreduce_bench.algorithms import p2p
from allreduce_bench.measure.world import CommGroup, World


def chunk_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of `parts` chunks covering `numel` elements, the first numel % parts longer."""
    base, extra = divmod(numel, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# ReduceScatter steps are cut into segments of about this size, so that where the backend gives
# one request per receive (gloo), adding segment k overlaps receiving segment k+1.
SEGMENT_BYTES = 1 << 20
MAX_SEGMENTS = 8


def segments(view: torch.Tensor) -> list[torch.Tensor]:
    parts = max(1, min(MAX_SEGMENTS, view.numel() * view.element_size() // SEGMENT_BYTES))
    return [view[a:b] for a, b in chunk_bounds(view.numel(), parts)]


class RingPlan:
    """Chunk views, the receive buffer and every step's ops for one tensor on one group.

    Everything is allocated here, once per size, so the phases themselves only post, wait and add.
    """

    def __init__(self, tensor: torch.Tensor, group: CommGroup):
        n, r = group.size, group.rank
        flat = tensor.view(-1)
        chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
        self.owned = chunks[(r + 1) % n]  # fully reduced here after reduce_scatter()
        longest = max(c.numel() for c in chunks)
        self._recv = torch.empty(longest, dtype=tensor.dtype, device=tensor.device)
        nxt, prv = group.peer(1), group.peer(-1)
        self._reduce_steps = []
        for s in range(n - 1):
            # Sender and receiver cut the same chunk, so their segments match one to one.
            into = segments(chunks[(r - s - 1) % n])
            buffers = segments(self._recv[:chunks[(r - s - 1) % n].numel()])
            sends = segments(chunks[(r - s) % n])
            ops = p2p.step(group, sends=[(t, nxt) for t in sends], recvs=[(b, prv) for b in buffers])
            pairs = [(i, b) for i, b in zip(into, buffers) if b.numel()]
            self._reduce_steps.append((ops, pairs))
        self._gather_steps = [
            p2p.step(group, sends=[(chunks[(r + 1 - s) % n], nxt)], recvs=[(chunks[(r - s) % n], prv)])
            for s in range(n - 1)]

    def reduce_scatter(self) -> None:
        for ops, pairs in self._reduce_steps:
            requests = p2p.start(ops)
            if len(requests) == len(ops):  # receives come first, one request each
                for request, (into, buffer) in zip(requests, pairs):
                    request.wait()
                    into.add_(buffer)
                for request in requests[len(pairs):]:
                    request.wait()
            else:  # one request for the whole batch (NCCL): the adds queue behind it
                for request in requests:
                    request.wait()
                for into, buffer in pairs:
                    into.add_(buffer)

    def all_gather(self) -> None:
        for ops in self._gather_steps:
            p2p.run(ops)


def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    plan = RingPlan(tensor, world.group)

    def allreduce() -> None:
        plan.reduce_scatter()
        plan.all_gather()

    return allreduce
