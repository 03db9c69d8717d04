"""The NCCL path's group handling, read against torch's and NCCL's sources and checked here
through fakes (no GPU): which ranks create which groups, with what timeout, in what order; the
variants NCCL refuses; and when NCCL is chosen at all."""
import datetime as dt
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from console_lines import unwrapped

from allreduce_bench.core import algorithms
from allreduce_bench.core.algorithms import nccl
from allreduce_bench.core.config.launch import LaunchOptions
from allreduce_bench.core.config.run import resolve_world
from allreduce_bench.core.environment import launcher_env
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.measure.device import NCCL_GRACE_S, Device, this_host
from allreduce_bench.core.measure.world import CommGroup, World
from allreduce_bench.core.sweep import allreduce

TIMEOUT_S = 42.0
INVALID_USAGE = ("NCCL error in: ProcessGroupNCCL.cpp:3690, invalid usage (run with NCCL_DEBUG=WARN "
                 "for details), NCCL version 2.27.3\nncclInvalidUsage: This usually reflects invalid "
                 "usage of NCCL library.")
# NCCL 2.18-2.23 (torch 2.1-2.6 wheels) answer the same refusal with ncclInternalError; torch's
# message carries NCCL's last error (enqueue.cc's WARN)
INTERNAL_ERROR = ("NCCL error in: ProcessGroupNCCL.cpp:1970, internal error - please report this issue "
                  "to the NCCL developers, NCCL version 2.21.5\nncclInternalError: Internal check "
                  "failed.\nLast error:\nError : no algorithm/protocol available")


class FakeTorchNccl:
    """torch.distributed as one rank at a time sees it, with the default NCCL group bound to
    the GPU (device_id): torch then splits every new group from the default group's
    communicator inside new_group (ncclCommSplit), which every rank of the default group must
    join, ranks outside the new group included (`perform_nocolor_split`), unless
    use_local_synchronization=True sent a non-member home before the split. `splits[r]` is
    what rank r joined, in order; `timeouts` every timeout a group was created with.

    `late`: torch 2.3 and 2.4, whose new_group passes no device_id (2.4.1 distributed_c10d.py
    `_new_group_with_tag` -> `_new_process_group_helper`: no `eager_connect_single_device`),
    so a member splits at its first collective on the group, a non-member at creation.
    `nonblocking`: torch 2.6-2.7.0, whose split from a bound group is nonblocking unless
    TORCH_NCCL_USE_COMM_NONBLOCKING=0 (ProcessGroupNCCL.cpp `useNonblocking`): NCCL reads
    NCCL_ALGO when its initialisation gets there, here at the rank's next call into torch.
    `colors[r]`: rank r's splits as NCCL sees them, its group's ranks or None (no color);
    `tuned[r]`: the NCCL_ALGO each of rank r's groups was initialised with."""

    def __init__(self, world_size: int, late: bool = False, nonblocking: bool = False):
        self.world_size, self.rank, self.late, self.nonblocking = world_size, 0, late, nonblocking
        self.splits = {r: [] for r in range(world_size)}
        self.timeouts, self.built, self.destroyed = [], {r: [] for r in range(world_size)}, []
        self.unsplit, self.initialising = set(), []
        self.tuned, self.colors = {r: [] for r in range(world_size)}, {r: [] for r in range(world_size)}

    def _next_call(self, group=None) -> None:
        """What a call into torch finishes: nonblocking initialisations, a late member's split."""
        self.tuned[self.rank] += [__import__("os").environ.get("NCCL_ALGO") for _ in self.initialising]
        self.initialising = []
        if group in self.unsplit:
            self.unsplit.discard(group)
            self.splits[self.rank].append(group[1])
            self.colors[self.rank].append(group[1])

    def splits_agree(self) -> bool:
        """ncclCommSplit pairs each rank's k-th split with every other's k-th: they agree when
        every rank makes as many, and the ranks that give a group's color in the k-th are its
        members."""
        calls = list(self.colors.values())
        return len({len(c) for c in calls}) == 1 and all(
            all(calls[m][k] == group for m in group)
            for k in range(len(calls[0])) for group in {c[k] for c in calls} - {None})

    def install(self, monkeypatch) -> None:
        for name in ("new_group", "new_subgroups_by_enumeration", "get_rank", "get_world_size",
                     "get_backend", "barrier", "all_reduce", "broadcast_object_list",
                     "destroy_process_group", "PrefixStore"):
            monkeypatch.setattr(dist, name, getattr(self, name))
        monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: None)

    def new_group(self, ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None):
        self._next_call()
        self.timeouts.append(timeout)
        if use_local_synchronization and self.rank not in ranks:
            return None
        group = ("group", tuple(ranks), self.rank, len(self.timeouts))  # one object per group made
        if self.late and self.rank in ranks:
            self.unsplit.add(group)
        else:
            self.splits[self.rank].append(tuple(ranks))
            self.colors[self.rank].append(tuple(ranks) if self.rank in ranks else None)
        environ = __import__("os").environ
        if self.nonblocking and environ.get("TORCH_NCCL_USE_COMM_NONBLOCKING") != "0":
            self.initialising.append(group)
        else:
            self.tuned[self.rank].append(environ.get("NCCL_ALGO"))
        return group if self.rank in ranks else dist.GroupMember.NON_GROUP_MEMBER

    def new_subgroups_by_enumeration(self, lists, timeout=None, backend=None, pg_options=None,
                                     group_desc=None):
        groups = [self.new_group(members, timeout=timeout) for members in lists]
        return next((g for g, m in zip(groups, lists) if self.rank in m), None), groups

    def get_rank(self, group=None):
        return self.rank

    def get_world_size(self, group=None):
        return self.world_size

    def get_backend(self, group=None):
        return "nccl"

    def barrier(self, group=None):
        self._next_call(group)

    refusal = INVALID_USAGE

    def all_reduce(self, tensor, group=None):
        self._next_call(group)
        if "NVLS" == __import__("os").environ.get("NCCL_ALGO"):  # no NVSwitch here
            raise dist.DistBackendError(self.refusal)

    def broadcast_object_list(self, objects, src=0):
        self._next_call()
        objects[0] = set()

    def destroy_process_group(self, group=None):
        self._next_call()
        self.destroyed.append(group)

    def PrefixStore(self, prefix, store):
        return SimpleNamespace(wait=lambda keys, timeout=None: None, set=lambda key, value: None)


def _session(algos, world_sizes, ranks_per_node, rank, world_size):
    launch = SimpleNamespace(world_sizes=world_sizes, ranks_per_node=ranks_per_node,
                             timeout_s=TIMEOUT_S, out_dir=None, run_id="fake")
    config = SimpleNamespace(launch=launch, algorithms=algos, sizes=(1024,), itemsize=4, rounds=1,
                             collectives=(), measurements_per_size=len(algos))
    return SimpleNamespace(config=config, launch=launch, writer=False, hosts=None, device=Device(),
                           env=SimpleNamespace(world_size=world_size, local_world_size=world_size),
                           progress=SimpleNamespace(at=lambda *a: None), record=None,
                           bind_phase=lambda k: None)


def _run_every_rank(monkeypatch, fake: FakeTorchNccl, algos, world_sizes, ranks_per_node=2):
    """allreduce.measure_phases on each rank in turn; each item's algorithm is built once (as
    its first measurement would), nothing is timed."""
    fake.install(monkeypatch)

    def build_each(config, world, items, *args, **kwargs):
        for item in items:
            algorithms.get(item.label)(torch.zeros(1), world)
            fake.built[fake.rank].append((item.label, world.size))
        return 0
    monkeypatch.setattr(allreduce.passes, "run", build_each)
    for rank in range(fake.world_size):
        fake.rank = rank
        allreduce.measure_phases(_session(algos, world_sizes, ranks_per_node, rank, fake.world_size))


def test_every_rank_joins_every_split_in_the_same_order(monkeypatch):
    """`--algos native:ring,native:tree:LL --world-sizes 2,4` on 4 GPUs: each sub-world's
    groups and its pinned communicators are split by all 4 ranks alike (5e7e81d: the pinned
    ones by their members only, so they waited in ncclCommSplit for ranks that never came)."""
    fake = FakeTorchNccl(4)
    _run_every_rank(monkeypatch, fake, ("native:ring", "native:tree:LL"), (2, 4))
    assert all(fake.splits[r] == fake.splits[0] for r in range(4)), fake.splits
    assert fake.splits[0] == [(0, 1), (0, 1), (0,), (1,), (0, 1), (0, 1),  # world, intra, inter, pinned
                              (0, 1), (2, 3), (0, 2), (1, 3), (0, 1, 2, 3), (0, 1, 2, 3)]
    assert fake.built[0] == [("native:ring", 2), ("native:tree:LL", 2),
                             ("native:ring", 4), ("native:tree:LL", 4)]
    assert fake.built[3] == [("native:ring", 4), ("native:tree:LL", 4)]


def test_world_size_1_measures_the_backends_call_and_says_what_it_leaves_out(monkeypatch, capsys):
    """One rank: the hand-written algorithms have no steps and busbw is 0 by definition; the
    backend's own call (native, NCCL's pinned variants) is what N=1 measures, in one line from
    rank 0 (issue 54: every algorithm ran at N=1, timing an empty call)."""
    fake = FakeTorchNccl(1)
    _run_every_rank(monkeypatch, fake, ("native", "ring", "naive", "native:ring"), (1,))
    assert fake.built[0] == [("native", 1), ("native:ring", 1)]
    lines = unwrapped(capsys.readouterr().err).strip().splitlines()
    assert len(lines) == 1 and "busbw is 0 there by definition" in lines[0]
    assert "ring, naive are left out (with one rank they have no steps)" in lines[0]


def test_every_rank_joins_the_same_splits_where_members_split_late(monkeypatch):
    """torch 2.3/2.4 (members split at their first collective): `run`'s groups still meet in
    the same splits on every rank, each rank being a member of one group per enumeration."""
    fake = FakeTorchNccl(4, late=True)
    _run_every_rank(monkeypatch, fake, ("native:ring", "native:tree:LL"), (2, 4))
    assert fake.splits_agree(), fake.colors


def test_links_pair_groups_meet_in_the_same_splits_where_members_split_late(monkeypatch):
    """links' two pair groups on torch 2.3/2.4: their members split at once, while the
    others wait in the split at creation (issue 54: rank 0 used its pairs only after world-wide
    AllReduces that the others, stuck in the split, never joined)."""
    from allreduce_bench.links.benchmark import links_sweep

    fake = FakeTorchNccl(4, late=True)
    fake.install(monkeypatch)
    config = SimpleNamespace(launch=SimpleNamespace(timeout_s=TIMEOUT_S), sizes=())
    for rank in range(4):
        fake.rank = rank
        links_sweep(config, SimpleNamespace(device=Device(), ranks_per_node=2), on_row=None)
    assert fake.splits_agree() and len(fake.colors[0]) == 2, fake.colors


def test_pinned_communicators_are_tuned_by_their_own_variables_on_nonblocking_torch(monkeypatch):
    """torch 2.6-2.7.0: a nonblocking split reads NCCL_ALGO after new_group returned, when the
    next variant's (or nobody's) was set (issue 54); created blocking, each reads its own."""
    fake = FakeTorchNccl(2, nonblocking=True)
    _run_every_rank(monkeypatch, fake, ("native:ring", "native:tree:LL"), (2,))
    for rank in range(2):
        assert [algo for algo in fake.tuned[rank] if algo] == ["Ring", "Tree"], fake.tuned


def test_sub_groups_get_the_runs_timeout(monkeypatch):
    """Every group of a sub-world is created with --timeout plus the watchdog's grace, as the
    default group is (5e7e81d: torch's default, 10 minutes for NCCL)."""
    fake = FakeTorchNccl(4)
    _run_every_rank(monkeypatch, fake, ("native", "native:ring"), (2, 4))
    assert set(fake.timeouts) == {dt.timedelta(seconds=TIMEOUT_S + NCCL_GRACE_S)}
    assert len(fake.timeouts) == 4 * (5 + 5)  # per rank: 2's world, intra, 2 inter, ring; 4's


@pytest.mark.parametrize("refusal", [INVALID_USAGE, INTERNAL_ERROR], ids=["nccl-2.24+", "nccl-2.18-2.23"])
def test_a_variant_nccl_refuses_is_skipped_in_one_line(monkeypatch, capsys, refusal):
    """native:nvls on GPUs without NVSwitch: NCCL's refusal at the first AllReduce
    (ncclInvalidUsage from 2.24, ncclInternalError before) leaves the variant out, with one line
    from rank 0 (5e7e81d: the error ended the run)."""
    fake = FakeTorchNccl(2)
    fake.refusal = refusal
    _run_every_rank(monkeypatch, fake, ("native:nvls", "native:ring"), (2,))
    assert fake.built == {0: [("native:ring", 2)], 1: [("native:ring", 2)]}
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("allreduce-bench: native:nvls skipped at world size 2")


def test_only_a_refusal_is_skipped(monkeypatch):
    """A lost peer while a pinned communicator connects still ends the run."""
    def lost(tensor, group=None):
        raise dist.DistBackendError("NCCL error: remote process exited or there was a network error")
    monkeypatch.setattr(dist, "all_reduce", lost)
    world = SimpleNamespace(device=Device(), rank=0, size=2, pinned=nccl.Pinned({("ring", None): "pg"}))
    with pytest.raises(dist.DistBackendError, match="remote process"):
        nccl.refused("native:ring", world)
    assert not nccl.refused("ring", world)  # not a pinned variant: nothing to ask NCCL


def test_nccl_variants_are_those_nccl_has():
    """NVLS is Simple only (NCCL's tuning.cc skips NVLS with LL and LL128): `--algos all`
    offers no variant that can never run. Nor one that forces LL128 past NCCL's platform check
    (tuning.cc, NCCL 2.21.5: "Enable LL128 by default only on Volta/Ampere/Hopper+NVLink. Other
    cases are not tested and may cause silent data corruption"; issue 54)."""
    pinned = [name for name in algorithms.names_for("nccl") if name.startswith("native:")]
    assert pinned == ["native:ring", "native:ring:LL", "native:ring:Simple",
                      "native:tree", "native:tree:LL", "native:tree:Simple",
                      "native:nvls", "native:nvls:Simple"]
    assert "native:nvls (also :Simple)" in algorithms.help_text()


def test_groups_are_destroyed_in_one_order_on_every_rank(monkeypatch):
    """World.close frees its groups in the order group, intra, inter, whatever their hashes
    (5e7e81d iterated a set: each process its own order)."""
    class Group:
        def __init__(self, name, hashed):
            self.name, self.hashed = name, hashed

        def __hash__(self):
            return self.hashed

    destroyed = []
    monkeypatch.setattr(dist, "destroy_process_group", lambda g: destroyed.append(g.name))
    group, intra, inter = Group("group", 3), Group("intra", 2), Group("inter", 1)
    World(CommGroup(group, (0, 1), 0), CommGroup(intra, (0, 1), 0), CommGroup(inter, (0,), 0),
          2, Device()).close()
    assert destroyed == ["group", "intra", "inter"]


def test_join_present_leaves_the_world_unbound(monkeypatch):
    """health's world (members-only sub-groups) is formed without device_id: bound, every NCCL
    sub-group would be split from it by the whole world."""
    from allreduce_bench.core.environment import RankEnv
    from allreduce_bench.core.measure import world

    seen = {}
    monkeypatch.setattr(world, "_launch_store", lambda env, timeout, serves: None)
    monkeypatch.setattr(world, "_members", lambda store, env, timeout_s, rpn: [0])
    monkeypatch.setattr(dist, "PrefixStore", lambda prefix, store: SimpleNamespace(
        set=lambda k, v: None, add=lambda k, n: 1, get=lambda k: b"host", check=lambda keys: True))
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **options: seen.update(options))
    options = {"timeout": dt.timedelta(seconds=5), "device_id": torch.device("cuda", 0)}
    world.join_present(RankEnv(0, 1, 0, 1, "torchrun"), "nccl", options, 5.0, "host", 1)
    assert seen["timeout"] == dt.timedelta(seconds=5) and "device_id" not in seen


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                        "TORCHELASTIC_RUN_ID": "x", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500", "GROUP_RANK": "0"}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("backend", ["auto", "nccl"])
def test_torchrun_ranks_sharing_one_gpu_do_not_get_nccl(one_gpu, monkeypatch, backend):
    """torchrun --nproc-per-node 2 on a one-GPU host: both ranks would use GPU 0, which NCCL
    refuses (5e7e81d chose NCCL: "could not join the world"); one line says what to do, and
    --backend gloo runs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one environment for every torchrun worker
    with pytest.raises(UsageError, match="local rank 1 of 2 sees one GPU.*srun --gpus-per-task=1"):
        resolve_world(LaunchOptions(backend=backend), launcher_env(), this_host())
    assert resolve_world(LaunchOptions(backend="gloo"), launcher_env(), this_host())[1:3] == ("gloo", "cpu")


def test_a_gpu_bound_to_each_task_gets_nccl(one_gpu, monkeypatch):
    """srun --gpus-per-task=1: each task's CUDA_VISIBLE_DEVICES names its own GPU."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(name)
    for name, value in {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
                        "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_STEP_ID": "0",
                        "CUDA_VISIBLE_DEVICES": "1"}.items():
        monkeypatch.setenv(name, value)
    assert resolve_world(LaunchOptions(), launcher_env(), this_host())[1:3] == ("nccl", "cuda")


def _health_round(monkeypatch, fake: FakeTorchNccl, fails: bool) -> dict:
    """Rank 0's part in one pair round of 2 hosts x 2 ranks (the pair's group, then its rail's),
    its partners answering or (`fails`) its rail's measurement timing out: what it freed."""
    from allreduce_bench.core.measure.device import PeerTimeout
    from allreduce_bench.health import benchmark as health
    from allreduce_bench.health.coordination import Groups

    fake.install(monkeypatch)
    names, freed = {}, {"destroyed": [], "aborted": []}
    made = fake.new_group

    def registered(ranks, **options):  # torch registers a group under a name (its count)
        group = made(ranks, **options)
        names[group] = str(len(names))
        return group

    def free(kind):
        return lambda group: (names.pop(group), freed[kind].append(group[1]))
    monkeypatch.setattr(dist, "new_group", registered)
    monkeypatch.setattr(dist, "destroy_process_group", free("destroyed"))
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", free("aborted"))
    monkeypatch.setattr(dist.distributed_c10d, "_world", SimpleNamespace(pg_names=names))
    monkeypatch.setattr(health, "assemble", lambda *args: None)
    monkeypatch.setattr(health.Rank, "held_back", lambda self: {})

    def measure(self, group, pg, lockstep=None):
        if fails and group.check == "rail":
            raise PeerTimeout("the timed work did not complete within --timeout 42 s")
        return {"sizes": []}
    monkeypatch.setattr(health.Rank, "_measure", measure)
    rank = object.__new__(health.Rank)
    rank.session = SimpleNamespace(progress=SimpleNamespace(at=lambda *args: None))
    rank.board = SimpleNamespace(put=lambda key, value: None, add=lambda key, n=1: 0)
    rank.liveness = SimpleNamespace(timeout_s=TIMEOUT_S)
    rank.ranks_of, rank.ranks_per_node, rank.me, rank.journal = {"a": [0, 1], "b": [2, 3]}, 2, 0, None
    rank.groups = Groups(TIMEOUT_S)
    rank.take_part(1, {"kind": "pairs", "groups": [["a", "b"]], "slot_base": 0})
    return freed


@pytest.mark.parametrize("fails", [False, True], ids=["answered", "lost"])
def test_health_frees_its_groups_each_round_and_aborts_them_after_a_lost_peer(monkeypatch, fails):
    """health on NCCL: each round's groups are freed in the order made (issue 54: none ever
    was), aborted where a peer was lost, before the watchdog's grace is out: their timeout is
    --timeout plus the grace (issue 54: --timeout exactly, so the watchdog fired first), and
    the watchdog only cleans up (CleanUpOnly), where torch's default tears the process down."""
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    fake = FakeTorchNccl(4)
    freed = _health_round(monkeypatch, fake, fails)
    assert freed == {"destroyed": [], "aborted": [(0, 1, 2, 3), (0, 2)]} if fails else \
        {"destroyed": [(0, 1, 2, 3), (0, 2)], "aborted": []}
    assert set(fake.timeouts) == {dt.timedelta(seconds=TIMEOUT_S + NCCL_GRACE_S)}
    assert __import__("os").environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
