"""One measurement of any collective: nccl-tests' buffers (zeros, so sums never grow), the timed loop, then
the check of the very call timed (doc/methodology.md, "Checking every result")."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from allreduce_bench.core.algorithms import Algorithm
from allreduce_bench.core.measure import patterns, timing
from allreduce_bench.core.measure.world import World

# collective -> the in-place modes it is measured and checked in (False: out of place)
MODES = {"all_gather": (False, True), "reduce_scatter": (False, True), "alltoall": (False,),
         "broadcast": (True,), "reduce": (True,), "sendrecv": (False,)}


def buffers(collective: str, count: int, world: World, dtype: torch.dtype,
            in_place: bool) -> tuple[torch.Tensor, torch.Tensor]:
    n, r, device = world.size, world.rank, world.device.torch_device
    whole = count * n
    if collective == "all_gather":
        recv = torch.zeros(whole, dtype=dtype, device=device)
        send = recv[r * count:(r + 1) * count] if in_place else torch.zeros(count, dtype=dtype, device=device)
    elif collective == "reduce_scatter":
        send = torch.zeros(whole, dtype=dtype, device=device)
        recv = send[r * count:(r + 1) * count] if in_place else torch.zeros(count, dtype=dtype, device=device)
    elif collective == "alltoall":
        send, recv = (torch.zeros(whole, dtype=dtype, device=device) for _ in range(2))
    elif collective == "sendrecv":
        send, recv = (torch.zeros(count, dtype=dtype, device=device) for _ in range(2))
    else:  # all_reduce, broadcast, reduce: one tensor
        send = recv = torch.zeros(count, dtype=dtype, device=device)
    return send, recv


def count_wrong(collective: str, call, send: torch.Tensor, recv: torch.Tensor, count: int,
                world: World) -> int:
    """Junk in the output, the pattern in the input, the timed call once more: this rank's wrong elements."""
    n, r = world.size, world.rank
    device, dtype = send.device, send.dtype
    patterns.junk(recv)
    send.copy_(patterns.collective_input(collective, count, r, n, dtype, device))
    call()
    world.device.synchronize()  # the checked call within --timeout: count_wrong reads its result
    expected = patterns.collective_expected(collective, count, r, n, dtype, device)
    return 0 if expected is None else patterns.count_wrong(recv, expected)


@dataclass(frozen=True)
class Payload:
    """What a call moves: `count` elements of `dtype` (metrics.collective_counts), in place or not."""

    count: int
    dtype: torch.dtype
    in_place: bool = False


def measure(algorithm: Algorithm, world: World, payload: Payload, sampling: timing.Sampling,
            check: bool = True, together: timing.Together = timing.ALONE) -> tuple[timing.Measured, int]:
    """(every rank's samples, #wrong summed) of one algorithm at one size; without `check` #wrong is 0."""
    collective, count = algorithm.collective, payload.count
    send, recv = buffers(collective, count, world, payload.dtype, payload.in_place)
    # AllReduce's algorithms build on one buffer (in place), the others' on send and receive
    call = algorithm.build(send, world) if collective == "all_reduce" else \
        algorithm.build(send, recv, world)
    measured = timing.sample(call, world.device, world.group.pg, sampling, together)
    if not check:
        return measured, 0
    wrong = count_wrong(collective, call, send, recv, count, world)
    return measured, timing.total(wrong, world.group.pg, world.device)
