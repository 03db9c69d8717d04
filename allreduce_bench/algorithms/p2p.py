"""Point-to-point steps: sends and receives posted together and waited on together.

Every step goes through `batch_isend_irecv`, which NCCL runs as one group (separate isend/irecv
can deadlock NCCL at 4 and 8 ranks) and gloo as plain isend/irecv. Receives are listed first so
a receive is already posted when the matching send arrives.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from allreduce_bench.measure.world import CommGroup

Step = list[dist.P2POp]


def step(group: CommGroup, sends: list[tuple[torch.Tensor, int]],
         recvs: list[tuple[torch.Tensor, int]]) -> Step:
    """Build one step's ops (tensors with their global peer ranks); empty tensors are skipped.

    Built once per size, outside the timed region; `run` only posts and waits.
    """
    ops = [dist.P2POp(dist.irecv, t, peer, group=group.pg) for t, peer in recvs if t.numel()]
    ops += [dist.P2POp(dist.isend, t, peer, group=group.pg) for t, peer in sends if t.numel()]
    return ops


def run(ops: Step) -> None:
    if ops:
        for request in dist.batch_isend_irecv(ops):
            request.wait()


def start(ops: Step) -> list:
    """Post the ops; one request per op (gloo) or a single one for the batch (NCCL)."""
    return dist.batch_isend_irecv(ops) if ops else []
