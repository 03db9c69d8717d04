"""The per-rank view of a (sub-)world: who I am, my node, and the process groups I talk on.

Nodes are runs of `ranks_per_node` consecutive ranks, as every launcher numbers them. Besides
the group of the whole (sub-)world, each rank gets its node's group (intra) and the group of the
ranks with the same local rank on every node (inter), the two levels the hierarchical scheme
works on. Groups are built with torch's own `new_group` / `new_subgroups_by_enumeration`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from allreduce_bench.errors import UsageError
from allreduce_bench.layout import node_layout
from allreduce_bench.measure import flight_recorder
from allreduce_bench.measure.device import Device


@dataclass(frozen=True)
class CommGroup:
    """A process group plus the global ranks of its members, so p2p peers can be named."""

    pg: dist.ProcessGroup | None  # None: the default group
    ranks: tuple[int, ...]  # global rank of each member, in group-rank order
    rank: int  # my index in `ranks`

    @property
    def size(self) -> int:
        return len(self.ranks)

    def peer(self, offset: int) -> int:
        """Global rank of the member `offset` places after me on the ring."""
        return self.ranks[(self.rank + offset) % self.size]


@dataclass(frozen=True)
class World:
    """What an algorithm's `build(tensor, world)` gets; the public surface for plug-ins is
    `rank`, `size`, `process_group` (the whole (sub-)world's torch ProcessGroup; None means the
    default group, which torch's calls accept as is), `group`, `intra` and `inter` (CommGroups:
    `pg`, `ranks` = global ranks in group order, `rank`, `size`, `peer(offset)`),
    `ranks_per_node`, `nodes` and `device` (`device.torch_device`)."""

    group: CommGroup  # the whole (sub-)world
    intra: CommGroup  # my node
    inter: CommGroup  # same local rank, every node
    ranks_per_node: int
    device: Device

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def size(self) -> int:
        return self.group.size

    @property
    def process_group(self) -> dist.ProcessGroup | None:
        return self.group.pg

    @property
    def nodes(self) -> int:
        return self.size // self.ranks_per_node

    def close(self) -> None:
        """Free this world's own groups (NCCL communicators hold device memory)."""
        for group in {self.group.pg, self.intra.pg, self.inter.pg}:
            if group is not None and group != dist.GroupMember.WORLD:
                dist.destroy_process_group(group)


def _subgroup(lists: list[list[int]], me: int) -> CommGroup | None:
    pg, _ = dist.new_subgroups_by_enumeration(lists)
    for members in lists:
        if me in members:
            return CommGroup(pg, tuple(members), members.index(me))
    return None


def make_world(world_size: int, ranks_per_node: int, device: Device) -> World | None:
    """Build the groups of the sub-world made of global ranks 0..world_size-1.

    Collective: every rank of the default group must call it with the same arguments (torch
    requires all ranks to take part in creating any group). Ranks outside get None.
    """
    me, total = dist.get_rank(), dist.get_world_size()
    if world_size > total:
        raise UsageError(f"world size {world_size} is larger than the {total} ranks launched; "
                         f"launch more ranks or choose smaller --world-sizes")
    per_node = node_layout(world_size, ranks_per_node)
    members = list(range(world_size))
    pg = None if world_size == total else dist.new_group(members, **flight_recorder.described(members))
    nodes = world_size // per_node
    intra = _subgroup([members[n * per_node:(n + 1) * per_node] for n in range(nodes)], me)
    inter = _subgroup([members[local::per_node] for local in range(per_node)], me)
    if me >= world_size:
        return None
    world = World(CommGroup(pg, tuple(members), me), intra, inter, per_node, device)
    # Touch every group once so lazily created communicators (NCCL) exist before any timing,
    # and batch_isend_irecv is never the first call on a group.
    for group in (world.group, world.intra, world.inter):
        device.barrier(group.pg)
    return world


# Ranks outside a sub-world wait for it without a collective timeout: --timeout bounds each
# collective, and a whole phase (every algorithm at every size) may well take longer.
SIT_OUT_LIMIT = timedelta(days=7)


def end_phase(world: World | None, name: str, device: Device) -> None:
    """Close a phase measured on a sub-world, on every rank of the default group.

    The sub-world's rank 0 marks `name` done in the launcher's store; ranks outside the
    sub-world wait for that mark, then everyone meets at a barrier. A rank that dies meanwhile
    is seen by the launcher, which stops the job.
    """
    store = dist.PrefixStore("allreduce_bench/phases", dist.distributed_c10d._get_default_store())
    if world is None:
        store.wait([name], SIT_OUT_LIMIT)
    else:
        if world.rank == 0:
            store.set(name, "done")
        world.close()
    device.barrier(None)
