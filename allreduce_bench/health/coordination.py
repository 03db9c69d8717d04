"""Coordinating ranks without world collectives: the core's Board on the launcher's c10d store
(measure/progress.py: values and heartbeats), and sub-groups that only their members create.

A world collective waits for every rank, so one frozen rank blocks all; the health check
instead publishes each round on the store and every rank polls it with a deadline. A
background thread bumps this rank's heartbeat counter; a rank whose counter has not moved for
the timeout (and a margin) is `unreachable`: a SIGSTOPped or dead process bumps nothing. A rank
blocked inside a collective with a frozen peer may not bump either while the call holds the
GIL, but only until its own timeout fires, inside the margin.

Sub-groups come from `new_group(ranks, use_local_synchronization=True)` (torch >= 2.1, so only
the members take part and creation stays flat as the world grows; with NCCL only because the
world is not bound to a GPU, see measure/world.py `join_present`). torch names such a group
by its ranks and by how many groups the creating rank already has, so members must enter
with equal counts: each group of a run has a slot number, and a member first pads its count
up to that slot with one-rank groups. A rank that sat out rounds (or whose last creation
failed) catches up that way; names never repeat. Where torch lacks the count
(`_world.pg_names`), this module counts the groups it made itself.

Members first meet on the board (`assemble`): one that froze or died before it came is
found by its heartbeat, not by a creation left waiting. gloo connects a group as it is
created and, when a member freezes in the middle of that, retries the connect: a creation
with timeout t was measured failing only after 5 t. So gloo groups are created with a fifth
of the timeout (they are created only once all members have met, in milliseconds) and then
given the whole timeout for their collectives (`ProcessGroup.set_timeout`; a torch without
it creates with the whole timeout). NCCL connects a group's members at its first collective
(the default group being unbound), under the group's own timeout: --timeout plus the
watchdog's grace, so the rank's own wait gives up first; then the group is aborted, and the
watchdog only cleans up (CleanUpOnly), where torch's default tears the process down. A rank
frees its round's groups at the round's end, in the order made; on torch >= 2.6 only, whose
names count the groups (doc/health.md, "Pairing" and "Faults").
"""
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
    """Return once every member of the `slot`-th group has come; raise Absent when one stopped
    beating or has not come within `deadline_s` (a live member may come late: it was still
    failing out of a group with a frozen rank)."""
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


CONNECT_TRIES = 5  # gloo's connect retries, as measured (see above)
MIN_CREATE_S = 2.0


CLEAN_UP_ONLY = "2"  # ProcessGroupNCCL.hpp ErrorHandlingMode: abort the communicators, no teardown


class Groups:
    """Sub-groups created by their members only, with equal group counts, freed round by
    round (see above)."""

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
        """Free this round's groups in the order made: aborted after a failure on NCCL (before
        the watchdog's grace is out), else destroyed; kept where torch names them by their
        ranks alone (see above)."""
        made, self.round = self.round, []
        if not hasattr(dist.distributed_c10d, "_hash_ranks_to_str"):  # torch < 2.6
            return
        for group in made:
            if failed and dist.get_backend(group) == "nccl":
                dist.distributed_c10d._abort_process_group(group)
            else:
                dist.destroy_process_group(group)
            self._made -= 1
