"""Point-to-point steps through `batch_isend_irecv` (separate isend/irecv can deadlock NCCL), receives first;
torch imported inside the functions, so costs are read without it."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms.base import chunk_bounds, fold, virtual_rank

if TYPE_CHECKING:
    import torch

    from allreduce_bench.core.measure.world import CommGroup, World

class Ops(list):
    """One step's P2POps, with torch's batch call bound at build, so the timed calls import nothing."""

    post: Callable[[list], list]


def step(group: CommGroup, sends: list[tuple[torch.Tensor, int]],
         recvs: list[tuple[torch.Tensor, int]]) -> Ops:
    """One step's ops (peers as global ranks, empty tensors skipped), built once per size."""
    import torch.distributed as dist

    ops = Ops(dist.P2POp(dist.irecv, t, peer, group=group.pg) for t, peer in recvs if t.numel())
    ops += [dist.P2POp(dist.isend, t, peer, group=group.pg) for t, peer in sends if t.numel()]
    ops.post = dist.batch_isend_irecv
    return ops


def start(ops: Ops) -> list:
    """Post the ops; one request per op (gloo) or a single one for the batch (NCCL)."""
    return ops.post(ops) if ops else []


def in_order(calls: list) -> Callable[[], None]:
    """One call that runs the built steps one after another: what an algorithm times."""
    def allreduce() -> None:
        for call in calls:
            call()
    return allreduce


def hand_over(group: CommGroup, out: torch.Tensor, back: torch.Tensor, partner: int) -> Callable[[], None]:
    """A rank folded out of a power-of-two scheme: send `out` to its partner, then receive `back`."""
    return in_order([partial(run, step(group, [(out, partner)], [])),
                     partial(run, step(group, [], [(back, partner)]))])


def run(ops: Ops) -> None:
    for request in start(ops):
        request.wait()


# reducing steps' segments: with a request per receive (gloo), adding one overlaps receiving the next
SEGMENT_BYTES = 1 << 20
MAX_SEGMENTS = 8


def segments(view: torch.Tensor) -> list[torch.Tensor]:
    parts = max(1, min(MAX_SEGMENTS, view.numel() * view.element_size() // SEGMENT_BYTES))
    return [view[a:b] for a, b in chunk_bounds(view.numel(), parts)]


class ReduceStep:
    """One step that receives into buffers and adds into place while sending. `receives`: (into, buffer, peer)
    or (addend, buffer, peer, out); `plain`: receives with nothing to add. Receives are cut into segments,
    each added as it arrives where the backend gives one request each."""

    def __init__(self, group: CommGroup, sends: list[tuple[torch.Tensor, int]],
                 receives: list[tuple],  # (into, buffer, peer) or (addend, buffer, peer, out)
                 plain: Sequence[tuple[torch.Tensor, int]] = ()):
        recvs, self.pairs = list(plain), []
        self.plain = sum(1 for view, _ in plain if view.numel())
        for into, buffer, peer, *out in receives:
            addends = segments(into)
            for i, b, o in zip(addends, segments(buffer), segments(out[0]) if out and out[0] is not into else addends):
                recvs.append((b, peer))
                if b.numel():
                    self.pairs.append((i, b, o))
        self.ops = step(group, [(s, peer) for view, peer in sends for s in segments(view)], recvs)
        import torch
        self._sum = torch.add  # bound now: the timed call imports nothing

    def __call__(self) -> None:
        requests = start(self.ops)
        if len(requests) == len(self.ops):  # receives come first, one request each
            adding = requests[self.plain:self.plain + len(self.pairs)]
            for request, pair in zip(adding, self.pairs):
                request.wait()
                self._add(*pair)
            for request in requests[:self.plain] + requests[self.plain + len(self.pairs):]:
                request.wait()
        else:  # one request for the whole batch (NCCL): the adds queue behind it
            for request in requests:
                request.wait()
            for pair in self.pairs:
                self._add(*pair)

    def _add(self, addend: torch.Tensor, buffer: torch.Tensor, out: torch.Tensor) -> None:
        if out is addend:
            addend.add_(buffer)
        else:
            self._sum(addend, buffer, out=out)


def folded(flat: torch.Tensor, world: World) -> tuple[list[Callable[[], None]], list[Callable[[], None]]]:
    """(fold-in, fold-out) calls of this rank for any N: empty for a power of two; see base.fold."""
    group, n, me = world.group, world.size, world.rank
    _, extra = fold(n)
    if me >= 2 * extra:
        return [], []
    partner = group.ranks[me + 1 if me % 2 == 0 else me - 1]
    if me % 2 == 0:  # folded out: hand the vector over, get the sum back
        return ([partial(run, step(group, [(flat, partner)], []))],
                [partial(run, step(group, [], [(flat, partner)]))])
    into = ReduceStep(group, [], [(flat, flat.new_empty(flat.numel()), partner)])
    back = step(group, [(flat, partner)], [])
    return [into], [partial(run, back)]


def power_of_two_part(tensor: torch.Tensor, world: World) -> tuple[torch.Tensor, int | None, list, list]:
    """(flat tensor, virtual rank or None without steps there, fold-in calls, fold-out calls)."""
    flat = tensor.view(-1)
    fold_in, fold_out = folded(flat, world)
    v = virtual_rank(world.rank, world.size) if world.size > 1 else None
    return flat, v, fold_in, fold_out
