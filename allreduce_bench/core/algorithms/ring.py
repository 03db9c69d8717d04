"""Ring ReduceScatter and AllGather (N-1 steps each) and the ring AllReduce of the two: `ring-steps` one whole step
after another, `ring` pipelined in slices as NCCL's ring (gloo; NCCL runs the steps). doc/algorithms.md."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import p2p
from allreduce_bench.core.algorithms.base import INTER, INTRA, Algorithm, Step, chunk_bounds, in_sequence

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import CommGroup, World

__all__ = ["ALGORITHM", "ALL_GATHER", "REDUCE_SCATTER", "STEPS", "PipelinedRing", "RingPlan", "build",
           "chunk_bounds", "cost", "plan"]


def parts(flat: torch.Tensor, bounds: list[tuple[int, int]]) -> list[torch.Tensor]:
    return [flat[a:b] for a, b in bounds]


def flat_parts(tensor: torch.Tensor, n: int) -> tuple[torch.Tensor, list[tuple[int, int]], list[torch.Tensor]]:
    flat = tensor.view(-1)
    bounds = chunk_bounds(flat.numel(), n)
    return flat, bounds, parts(flat, bounds)


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() == 0 or (a.data_ptr() == b.data_ptr() and a.numel() == b.numel())


class ReduceScatterPlan:

    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        n, r = group.size, group.rank
        chunks = parts(send, bounds)
        longest = max(c.numel() for c in chunks)
        scratch = [send.new_empty(longest) for _ in range(min(2, n - 1))]
        nxt, prv = group.peer(1), group.peer(-1)
        outgoing, self._steps = chunks[(r - 1) % n], []
        for s in range(n - 1):
            mine = chunks[(r - s - 2) % n]
            partial = recv if s == n - 2 else scratch[s % 2][:mine.numel()]
            self._steps.append(p2p.ReduceStep(
                group, sends=[(outgoing, nxt)],
                receives=[(mine, scratch[s % 2][:mine.numel()], prv, partial)]))
            outgoing = partial  # the next step passes this partial sum on
        self._copy = None if n > 1 or same_memory(chunks[r], recv) else (recv, chunks[r])

    def __call__(self) -> None:
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        for reduce in self._steps:
            reduce()


class AllGatherPlan:
    """Ring AllGather of `send` into `recv` cut at `bounds`; the local copy runs during the first step."""

    def __init__(self, send: torch.Tensor, recv: torch.Tensor, bounds: list[tuple[int, int]],
                 group: CommGroup):
        n, r = group.size, group.rank
        chunks = parts(recv, bounds)
        nxt, prv = group.peer(1), group.peer(-1)
        self._copy = None if same_memory(send, chunks[r]) else (chunks[r], send)
        self._steps = [
            p2p.step(group, sends=[(send if s == 0 else chunks[(r - s) % n], nxt)],
                     recvs=[(chunks[(r - s - 1) % n], prv)])
            for s in range(n - 1)]

    def __call__(self) -> None:
        requests = p2p.start(self._steps[0]) if self._steps else []
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        for request in requests:
            request.wait()
        for ops in self._steps[1:]:
            p2p.run(ops)


class RingPlan:
    """The ring AllReduce of one tensor, step by step, in place; `owned`: the chunk reduced here."""

    def __init__(self, tensor: torch.Tensor, group: CommGroup):
        flat, bounds, views = flat_parts(tensor, group.size)
        self.owned = views[group.rank]
        self.reduce_scatter = ReduceScatterPlan(flat, self.owned, bounds, group)
        self.all_gather = AllGatherPlan(self.owned, flat, bounds, group)
        self.all_reduce = p2p.in_order([self.reduce_scatter, self.all_gather])


# the pipelined ring's slice and receives posted ahead (scripts/perf_ring.py; doc/algorithms.md)
SLICE_BYTES = 1 << 20
WINDOW = 8

# (send, chunk, partial) of one ring step: the chunk arriving is received into `chunk` when
# `partial` is None (AllGather), else added to `chunk` (this rank's part) into `partial`
RingStep = tuple


def reduce_scatter_steps(chunks: list[torch.Tensor], out: torch.Tensor, group: CommGroup,
                         keep_input: bool) -> list[RingStep]:
    """The ReduceScatter's steps into `out`: partial sums in the chunks, or in scratch (`keep_input`)."""
    n, r = group.size, group.rank
    longest = max(c.numel() for c in chunks)
    scratch = [chunks[0].new_empty(longest) for _ in range(n - 2)] if keep_input else []
    steps, outgoing = [], chunks[(r - 1) % n]
    for t in range(n - 1):
        mine = chunks[(r - t - 2) % n]
        partial = out if t == n - 2 else scratch[t][:mine.numel()] if keep_input else mine
        steps.append((outgoing, mine, partial))
        outgoing = partial
    return steps


def all_gather_steps(send: torch.Tensor, chunks: list[torch.Tensor], group: CommGroup) -> list[RingStep]:
    """The AllGather's steps: `send` first, then each chunk as it arrives."""
    n, r = group.size, group.rank
    return [(send if s == 0 else chunks[(r - s) % n], chunks[(r - s - 1) % n], None)
            for s in range(n - 1)]


class Pipeline:
    """Ring steps run slice by slice, a slice passed on as soon as it arrived and was added. Sender's and
    receiver's slices match one to one; receives are posted `window` ahead into slice buffers reused in turn
    (cached for the add). `copy` (to, from) runs while the first slices are in flight."""

    def __init__(self, group: CommGroup, steps: list[RingStep], slice_bytes: int = SLICE_BYTES,
                 copy: tuple[torch.Tensor, torch.Tensor] | None = None, window: int = WINDOW):
        import torch
        import torch.distributed as dist

        self._torch, self._dist, self._pg = torch, dist, group.pg
        self._next, self._prev, self._copy, self._window = group.peer(1), group.peer(-1), copy, window
        longest = max((v.numel() * v.element_size() for step in steps for v in step[:2]), default=0)
        count = max(1, -(-longest // max(1, slice_bytes)))

        def cut(view: torch.Tensor) -> list[torch.Tensor]:
            return [view[a:b] for a, b in chunk_bounds(view.numel(), count)]

        self._first = [v for v in cut(steps[0][0]) if v.numel()] if steps else []
        reducing = [step[1] for step in steps if step[2] is not None]
        buffers = [reducing[0].new_empty(max(v.numel() for c in reducing for v in cut(c)))
                   for _ in range(window)] if reducing else []
        # (receive into, None or (addend, out), None or the onward send) of every non-empty slice, in order
        self._slices: list[tuple] = []
        added = 0
        for t, (_, chunk, partial) in enumerate(steps):
            onward = cut(steps[t + 1][0]) if t + 1 < len(steps) else [None] * count
            outs = cut(partial) if partial is not None else [None] * count
            for view, out, send in zip(cut(chunk), outs, onward):
                if not view.numel():
                    continue
                if out is None:
                    self._slices.append((view, None, send))
                else:
                    self._slices.append((buffers[added % window][:view.numel()], (view, out), send))
                    added += 1

    def _receive(self, i: int):
        return self._dist.irecv(self._slices[i][0], self._prev, group=self._pg)

    def _send(self, view: torch.Tensor):
        return self._dist.isend(view, self._next, group=self._pg)

    def __call__(self) -> None:
        sends = [self._send(view) for view in self._first]
        posted = [self._receive(i) for i in range(min(self._window, len(self._slices)))]
        if self._copy:
            self._copy[0].copy_(self._copy[1])
        for i, (into, add, onward) in enumerate(self._slices):
            posted[i].wait()
            if add:
                self._torch.add(add[0], into, out=add[1])
            if onward is not None:
                sends.append(self._send(onward))
            if i + self._window < len(self._slices):  # slice i's buffer is free again
                posted.append(self._receive(i + self._window))
        for request in sends:
            request.wait()


class PipelinedRing:
    """The pipelined ring AllReduce of one tensor, in place, with its two phases on their own too."""

    def __init__(self, tensor: torch.Tensor, group: CommGroup, slice_bytes: int = SLICE_BYTES,
                 window: int = WINDOW):
        _, _, chunks = flat_parts(tensor, group.size)
        self.owned = chunks[group.rank]
        reduce_scatter = reduce_scatter_steps(chunks, self.owned, group, keep_input=False)
        all_gather = all_gather_steps(self.owned, chunks, group)
        self.reduce_scatter = Pipeline(group, reduce_scatter, slice_bytes, window=window)
        self.all_gather = Pipeline(group, all_gather, slice_bytes, window=window)
        self.all_reduce = Pipeline(group, reduce_scatter + all_gather, slice_bytes, window=window)


def plan(tensor: torch.Tensor, group: CommGroup, world: World, slice_bytes: int = SLICE_BYTES,
         window: int = WINDOW):
    """The pipelined ring where the backend has a request per send and receive (gloo), else the steps (NCCL)."""
    if world.device.kind == "cpu":
        return PipelinedRing(tensor, group, slice_bytes, window)
    return RingPlan(tensor, group)


def build(tensor: torch.Tensor, world: World, slice_bytes: int = SLICE_BYTES,
          window: int = WINDOW) -> Callable[[], None]:
    return plan(tensor, world.group, world, slice_bytes, window).all_reduce


def build_steps(tensor: torch.Tensor, world: World) -> Callable[[], None]:
    return RingPlan(tensor, world.group).all_reduce


def build_reduce_scatter(send: torch.Tensor, recv: torch.Tensor, world: World,
                         slice_bytes: int = SLICE_BYTES) -> Callable[[], None]:
    bounds = chunk_bounds(send.numel(), world.size)
    if world.device.kind != "cpu":
        return ReduceScatterPlan(send, recv, bounds, world.group)
    chunks, r = parts(send, bounds), world.rank
    copy = None if world.size > 1 or same_memory(chunks[r], recv) else (recv, chunks[r])
    return Pipeline(world.group, reduce_scatter_steps(chunks, recv, world.group, keep_input=True),
                    slice_bytes, copy)


def build_all_gather(send: torch.Tensor, recv: torch.Tensor, world: World,
                     slice_bytes: int = SLICE_BYTES) -> Callable[[], None]:
    bounds = chunk_bounds(recv.numel(), world.size)
    if world.device.kind != "cpu":
        return AllGatherPlan(send, recv, bounds, world.group)
    chunks = parts(recv, bounds)
    copy = None if same_memory(send, chunks[world.rank]) else (chunks[world.rank], send)
    return Pipeline(world.group, all_gather_steps(send, chunks, world.group), slice_bytes, copy)


def ring_paths(world_size: int, ranks_per_node: int, part: float) -> dict[str, tuple[float, float]]:
    """One message of `part` bytes over each link class the ring's edges use."""
    return {c: (1.0, part) for c, used in ((INTRA, ranks_per_node > 1),
                                            (INTER, world_size > ranks_per_node)) if used}


def cost_reduce_scatter(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """N-1 steps of S/N (S the whole buffer), S/N added in each."""
    n, s = world_size, float(size_bytes)
    return [Step(n - 1, ring_paths(n, ranks_per_node, s / n), s / n)] if n > 1 else []


def cost_all_gather(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
    """N-1 steps of S/N, nothing added."""
    n, s = world_size, float(size_bytes)
    return [Step(n - 1, ring_paths(n, ranks_per_node, s / n))] if n > 1 else []


# The ReduceScatter's N-1 steps of S/N, then the AllGather's: 2(N-1) steps of S/N.
cost = in_sequence(cost_reduce_scatter, cost_all_gather)


ALGORITHM = Algorithm("ring", "ReduceScatter then AllGather around a ring: 2(N-1) steps of S/N, "
                      "bandwidth-optimal, each step's chunk pipelined in slices", build, cost)
STEPS = Algorithm("ring-steps", "the ring one whole step after another, unpipelined: the "
                  "seed's step-by-step picture", build_steps, cost)
REDUCE_SCATTER = Algorithm("ring", "N-1 steps of S/N around a ring, each partial sum passed on: "
                           "bandwidth-optimal, pipelined in slices", build_reduce_scatter, cost_reduce_scatter,
                           collective="reduce_scatter")
ALL_GATHER = Algorithm("ring", "N-1 steps of S/N around a ring: bandwidth-optimal, pipelined in slices",
                       build_all_gather, cost_all_gather, collective="all_gather")
