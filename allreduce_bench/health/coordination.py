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
(the default group being unbound), under the group's own timeout.
"""
from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist

from allreduce_bench.core.measure import flight_recorder
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


class Groups:
    """Sub-groups created by their members only, with equal group counts (see above)."""

    def __init__(self, timeout_s: float):
        self.timeout = timedelta(seconds=timeout_s)
        short = dist.get_backend() == "gloo" and hasattr(dist.ProcessGroup, "set_timeout")
        self.create = timedelta(seconds=min(timeout_s, max(MIN_CREATE_S, timeout_s / CONNECT_TRIES))
                                if short else timeout_s)
        self._made = 0
        self.base = self.count()

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
        if self.create != self.timeout:
            group.set_timeout(self.timeout)
        return group
