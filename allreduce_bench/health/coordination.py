"""Coordinating ranks without world collectives, so one frozen rank blocks nobody: the core's Board on the
launcher's store, and sub-groups only their members create (doc/health.md, "Pairing" and "Faults")."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from allreduce_bench.core.measure import flight_recorder
from allreduce_bench.core.measure.device import NCCL_GRACE_S
from allreduce_bench.core.measure.progress import Board, Liveness

POLL_S = 0.05


class Absent(RuntimeError):
    """A member of a group never came to it: silent, or still busy past the deadline."""


def assemble(board: Board, liveness: Liveness, slot: int, ranks, me: int, deadline_s: float) -> None:
    """Return once every member of the `slot`-th group has come, so a creation never waits on a dead
    member; raise Absent when one stopped beating or has not come within `deadline_s`."""
    board.put(f"here/{slot}/{me}", 1)
    waiting = [r for r in ranks if r != me]
    started = checked = time.monotonic()
    while waiting := [r for r in waiting if not board.has(f"here/{slot}/{r}")]:
        now = time.monotonic()
        if now - checked >= 1.0:
            checked = now
            if silent := [r for r in waiting if liveness.silent(r)]:
                raise Absent(f"rank(s) {silent} stopped beating before group slot {slot} was made")
        if now - started > deadline_s:
            raise Absent(f"rank(s) {waiting} did not come to group slot {slot} in {deadline_s:g} s")
        time.sleep(POLL_S)


CONNECT_TRIES = 5  # gloo retries a connect to a frozen member: a creation with timeout t fails after 5 t
MIN_CREATE_S = 2.0
CLEAN_UP_ONLY = "2"  # ProcessGroupNCCL.hpp ErrorHandlingMode: abort the communicators, no teardown


class Groups:
    """Sub-groups created by their members only, with equal group counts (torch names groups by that
    count), freed round by round."""

    def __init__(self, timeout_s: float):
        nccl = dist.get_backend() == "nccl"
        self.timeout = timedelta(seconds=timeout_s + (NCCL_GRACE_S if nccl else 0.0))
        short = dist.get_backend() == "gloo" and hasattr(dist.ProcessGroup, "set_timeout")
        self.create = timedelta(seconds=min(timeout_s, max(MIN_CREATE_S, timeout_s / CONNECT_TRIES))
                                if short else self.timeout.total_seconds())
        if nccl:  # read by each NCCL group as it is made; torch 2.1 knows the older name only
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING" if torch.__version__ >= "2.2"
                       else "NCCL_ASYNC_ERROR_HANDLING"] = CLEAN_UP_ONLY
        self._made = 0
        self.base = self.count()
        self.round: list = []  # the groups of this round on this rank, in the order made

    def count(self) -> int:
        """The count torch names groups by (or the groups made here, where torch has none)."""
        world = getattr(dist.distributed_c10d, "_world", None)
        names = getattr(world, "pg_names", None)
        return len(names) if names is not None else self._made

    def new(self, ranks, slot: int):
        """The group of `ranks` as the run's `slot`-th group (0-based, the same on every member).
        A creation that fails (a member never came) registers nothing, here as in torch."""
        while self.count() < self.base + slot:
            dist.new_group([dist.get_rank()], timeout=self.create, use_local_synchronization=True)
            self._made += 1
        group = dist.new_group(sorted(ranks), timeout=self.create, use_local_synchronization=True,
                               **flight_recorder.described(ranks))  # its members, for `hang`
        self._made += 1
        self.round.append(group)
        if self.create != self.timeout:
            group.set_timeout(self.timeout)
        return group

    def close(self, failed: bool) -> None:
        """Free this round's groups in the order made: aborted after a failure on NCCL, else destroyed;
        kept on torch < 2.6, whose group names do not count the groups."""
        made, self.round = self.round, []
        if not hasattr(dist.distributed_c10d, "_hash_ranks_to_str"):  # torch < 2.6
            return
        for group in made:
            if failed and dist.get_backend(group) == "nccl":
                dist.distributed_c10d._abort_process_group(group)
            else:
                dist.destroy_process_group(group)
            self._made -= 1
