"""The per-rank view of a (sub-)world: who I am, my node, and the groups I talk on (the whole, intra, inter)."""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from allreduce_bench.core.environment import RankEnv, agent_store, master_of
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.layout import node_layout
from allreduce_bench.core.measure import flight_recorder
from allreduce_bench.core.measure.device import Device, process_group_options


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
        return self.ranks[(self.rank + offset) % self.size]


@dataclass(frozen=True)
class World:
    """What an algorithm's `build` gets; plug-ins may use `rank`, `size`, `process_group` (None: the default
    group), `group`, `intra`, `inter`, `ranks_per_node`, `nodes` and `device`."""

    group: CommGroup  # the whole (sub-)world
    intra: CommGroup  # my node
    inter: CommGroup  # same local rank, every node
    ranks_per_node: int
    device: Device
    pinned: Any = None  # NCCL's pinned variants' communicators (algorithms/nccl.py Pinned)

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
        """Free this world's groups in the same order on every rank (NCCL's finalize may wait)."""
        for group in dict.fromkeys((self.group.pg, self.intra.pg, self.inter.pg)):
            if group is not None and group != dist.GroupMember.WORLD:
                dist.destroy_process_group(group)


def group_timeout(device: Device, timeout_s: float) -> timedelta:
    return process_group_options(dist.get_backend(), device, timeout_s)["timeout"]


def _subgroup(lists: list[list[int]], me: int, timeout: timedelta) -> CommGroup | None:
    pg, _ = dist.new_subgroups_by_enumeration(lists, timeout=timeout)
    for members in lists:
        if me in members:
            return CommGroup(pg, tuple(members), members.index(me))
    return None


def make_world(world_size: int, ranks_per_node: int, device: Device, timeout_s: float) -> World | None:
    """The groups of the sub-world of ranks 0..world_size-1 (collective; ranks outside get None)."""
    me, total = dist.get_rank(), dist.get_world_size()
    if world_size > total:
        raise UsageError(f"world size {world_size} is larger than the {total} ranks launched; "
                         f"launch more ranks or choose smaller --world-sizes")
    per_node = node_layout(world_size, ranks_per_node)
    members = list(range(world_size))
    timeout = group_timeout(device, timeout_s)
    pg = None if world_size == total else dist.new_group(members, timeout=timeout,
                                                         **flight_recorder.described(members))
    nodes = world_size // per_node
    intra = _subgroup([members[n * per_node:(n + 1) * per_node] for n in range(nodes)], me, timeout)
    inter = _subgroup([members[local::per_node] for local in range(per_node)], me, timeout)
    if me >= world_size:
        return None
    assert intra is not None and inter is not None  # a rank of the world is in one of each
    world = World(CommGroup(pg, tuple(members), me), intra, inter, per_node, device)
    # communicators NCCL creates at the first collective exist before any timing
    for group in (world.group, world.intra, world.inter):
        device.barrier(group.pg)
    return world


# ranks outside a sub-world wait out its whole phase, which --timeout (per collective) does not bound
SIT_OUT_LIMIT = timedelta(days=7)


def end_phase(world: World | None, name: str, device: Device) -> None:
    """Close a sub-world's phase on every rank: its rank 0 marks it done, the others wait, all meet."""
    store = dist.PrefixStore("allreduce_bench/phases", dist.distributed_c10d._get_default_store())
    if world is None:
        store.wait([name], SIT_OUT_LIMIT)
    else:
        if world.rank == 0:
            store.set(name, "done")
        world.close()
    device.barrier(None)


# ---- a world of the ranks that came ----------------------------------------------------------

JOIN_POLL_S = 0.1
JOIN_PREFIX = "allreduce-bench/join/"


@dataclass(frozen=True)
class Presence:
    """Who came when a world was formed from the ranks that arrived (`join_present`)."""

    members: tuple[int, ...]  # launched ranks in the world, in the order of their new ranks
    # per launched rank: its hostname, None if it never came
    hostnames: tuple[str | None, ...]
    env: RankEnv | None  # this rank's RankEnv in the world (renumbered), None when it sits out
    store: Any = field(default=None, repr=False, compare=False)  # the join's store
    serves: bool = False  # this process serves it (rank 0 under srun/mpirun)

    def leads(self) -> bool:
        return self.env is not None and self.env.rank == 0

    def end_world(self) -> None:
        """The world's first rank, once it is done: a store host sitting out may leave now."""
        if self.leads():
            self.store.set("ended", "1")

    def sit_out(self) -> None:
        """Leave at once, unless this rank serves the world's store: then stay until the world is done."""
        if not self.serves:
            return
        while not self.store.check(["ended"]):
            time.sleep(0.5)
        time.sleep(2.0)  # the others read the last keys (health's end of rounds) meanwhile


def _launch_store(env, timeout: timedelta, serves: bool):
    """The store every launched rank reaches without waiting for the others: the agent's, else one rank 0
    serves; RuntimeError (one line) when it does not answer within `timeout`."""
    addr, port = master_of(env)  # set by the launcher, or found by launcher_env
    if addr is None or port is None:
        raise RuntimeError("the launch's store has no address: set MASTER_ADDR and MASTER_PORT")
    agent = agent_store()
    failed = RuntimeError(
        f"the launch's store at {addr}:{port}, served by {'the launcher' if agent else 'rank 0'}, "
        f"did not answer in {timeout.total_seconds():g} s" + ("" if agent else
        ": rank 0 hung or died at start-up, and the others cannot meet without it"))
    # plain sockets first: torch's client logs every retry with a C++ stack
    if not serves and not _listening(addr, port, timeout.total_seconds()):
        raise failed
    try:
        with _quiet_stderr():
            if agent:
                return dist.TCPStore(addr, port, is_master=False, timeout=timeout)
            return dist.TCPStore(addr, port, is_master=serves, timeout=timeout,
                                 wait_for_workers=False, multi_tenant=True)
    except (RuntimeError, OSError) as error:  # DistStoreError: it listens but does not answer
        raise failed from error


def _listening(addr: str, port: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


@contextmanager
def _quiet_stderr():
    """fd 2 to /dev/null meanwhile (the C++ client's retry logs); our own line says what failed."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def whole_hosts(arrived: set[int], launched: int, ranks_per_node: int) -> tuple[int, ...]:
    """The arrived ranks of hosts all of whose ranks arrived (same ranks per node everywhere)."""
    L = max(1, ranks_per_node)
    return tuple(r for r in range(launched)
                 if all(n in arrived for n in range(r // L * L, min(launched, r // L * L + L))))


def _members(store, env, timeout_s: float, ranks_per_node: int) -> list[int]:
    """Wait for every rank or `timeout_s`; the first to stop waiting sets the members (compare-and-set)."""
    arrived_at = time.monotonic()
    while not store.check(["members"]):
        if store.add("count", 0) >= env.world_size or time.monotonic() - arrived_at > timeout_s:
            came = {r for r in range(env.world_size) if store.check([f"here/{r}"])}
            mine = json.dumps(list(whole_hosts(came, env.world_size, ranks_per_node)))
            return json.loads(store.compare_set("members", "", mine))
        time.sleep(JOIN_POLL_S)
    return json.loads(store.get("members"))


def join_present(env, backend: str, options: dict, timeout_s: float, hostname: str,
                 ranks_per_node: int) -> Presence:
    """The default group of the ranks that arrive within `timeout_s` (health judges a host that hangs). No
    `device_id`: torch would split this communicator for every later group, over the whole world."""
    serves = env.rank == 0 and not agent_store()
    store = dist.PrefixStore(JOIN_PREFIX, _launch_store(env, timedelta(seconds=timeout_s), serves))
    store.set(f"here/{env.rank}", hostname)
    store.add("count", 1)
    members = _members(store, env, timeout_s, ranks_per_node)
    hostnames = tuple(store.get(f"here/{r}").decode() if r in members or store.check([f"here/{r}"])
                      else None for r in range(env.world_size))
    joined, L = None, max(1, ranks_per_node)
    if env.rank in members:
        joined = dataclasses.replace(env, rank=members.index(env.rank), world_size=len(members),
                                     node_rank=len({r // L for r in members if r // L < env.rank // L}))
    presence = Presence(tuple(members), hostnames, joined, store, serves)
    if joined is not None:
        dist.init_process_group(backend, store=dist.PrefixStore("world", store), rank=joined.rank,
                                world_size=joined.world_size,
                                **{k: v for k, v in options.items() if k != "device_id"})
    return presence
