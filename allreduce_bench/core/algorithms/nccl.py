"""NCCL's own algorithms and protocols (`native:ring`, `native:tree:LL`, ...): NCCL's AllReduce on a communicator
created while NCCL_ALGO (NCCL_PROTO) are set, blocking (torch 2.6-2.7.0 split nonblocking, #138527), so only it is
pinned. A GPU-bound default group splits each new NCCL group with every rank: `create` runs on every rank in --algos
order and `communicator` warms each up, both with the variables set. No `:LL128` (doc/algorithms.md)."""
from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import ring, tree
from allreduce_bench.core.algorithms.base import Algorithm
from allreduce_bench.core.environment import overridden

if TYPE_CHECKING:
    from datetime import timedelta

    import torch
    from torch.distributed import ProcessGroup

    from allreduce_bench.core.measure.world import World

# our name -> (NCCL_ALGO, its cost model (NVLS, reducing in the NVSwitch, has none), NCCL's protocols for it)
NCCL_PROTOS = ("LL", "Simple")
NCCL_ALGOS = {"ring": ("Ring", ring.cost, NCCL_PROTOS), "tree": ("Tree", tree.cost, NCCL_PROTOS),
              "nvls": ("NVLS", None, ("Simple",))}
# variant name -> (algo, proto or None: NCCL's choice of protocol)
VARIANTS = {f"native:{algo}" + (f":{proto}" if proto else ""): (algo, proto)
            for algo, (_, _, protos) in NCCL_ALGOS.items() for proto in (None, *protos)}


def nccl_environment(algo: str, proto: str | None) -> dict[str, str]:
    """The variables a pinned communicator is created with; blocking, so NCCL reads them then."""
    values = {"NCCL_ALGO": NCCL_ALGOS[algo][0], "TORCH_NCCL_USE_COMM_NONBLOCKING": "0"}
    if proto:
        values["NCCL_PROTO"] = proto
    return values


class Pinned:
    """The pinned variants' communicators of one sub-world on this rank, and those already warmed up."""

    def __init__(self, groups: dict[tuple, ProcessGroup]):
        self.groups, self.warm = groups, set[tuple]()

    def close(self) -> None:
        """Destroy them, in the order they were made (the same on every rank)."""
        import torch.distributed as dist

        for group in self.groups.values():
            dist.destroy_process_group(group)


def create(names, world_size: int, timeout: timedelta) -> Pinned:
    """The pinned variants' communicators among `names` for ranks 0..world_size-1; collective over the default
    group, ranks outside keep none."""
    import torch.distributed as dist

    groups, members = {}, list(range(world_size))
    for key in (VARIANTS[name] for name in names if name in VARIANTS):
        with overridden(nccl_environment(*key)):
            group = dist.new_group(members, timeout=timeout, backend="nccl")
        if dist.get_rank() in members:
            groups[key] = group
    return Pinned(groups)


def communicator(world: World, algo: str, proto: str | None):
    """This rank's communicator of the variant, initialised by one small AllReduce on first use."""
    import torch
    import torch.distributed as dist

    key, pinned = (algo, proto), world.pinned
    group = pinned.groups[key]
    if key not in pinned.warm:
        with overridden(nccl_environment(algo, proto)):
            # without the binding, NCCL connects here; the wait gives up after --timeout
            dist.all_reduce(torch.zeros(1, device=world.device.torch_device), group=group)
            world.device.synchronize()
        pinned.warm.add(key)
    return group


# NCCL >= 2.24: ncclInvalidUsage; older: ncclInternalError with "no algorithm/protocol available"
REFUSAL = re.compile(r"invalid usage|no algorithm/protocol available", re.IGNORECASE)


def refused(name: str, world: World) -> bool:
    """Whether NCCL refuses the variant `name` here (NVLS without NVSwitch, ...), said once by rank 0."""
    if name not in VARIANTS:
        return False
    try:
        communicator(world, *VARIANTS[name])
    except RuntimeError as error:  # DistBackendError
        if not REFUSAL.search(str(error)):
            raise  # a lost peer, a timeout: the run ends as for any algorithm
        if world.rank == 0:
            print(f"allreduce-bench: {name} skipped at world size {world.size}: NCCL refused it "
                  "on this machine (no algorithm/protocol available: NVLS needs NVSwitch, and "
                  "CollNet across nodes)", file=sys.stderr, flush=True)
        return True
    return False


def builder(algo: str, proto: str | None) -> Callable:
    def build(tensor: torch.Tensor, world: World) -> Callable[[], None]:
        import torch.distributed as dist

        group = communicator(world, algo, proto)
        return lambda: dist.all_reduce(tensor, group=group)
    return build


def supports(name: str, algo: str):
    def check(world_size: int, ranks_per_node: int | None, backend: str) -> str | None:
        if backend != "nccl":
            return (f"{name} is NCCL's own {algo} algorithm (NCCL_ALGO="
                    f"{NCCL_ALGOS[algo][0]}); it does not apply to {backend}: measure native there, "
                    "or run on GPUs with --backend nccl")
        return None
    return check


def variants() -> list[Algorithm]:
    out = []
    for name, (algo, proto) in VARIANTS.items():
        value, cost, _ = NCCL_ALGOS[algo]
        what = f"NCCL's AllReduce pinned to NCCL_ALGO={value}" + (f", NCCL_PROTO={proto}" if proto else "")
        out.append(Algorithm(name, what + " (its own communicator; NCCL only)",
                             builder(algo, proto), cost, supports(name, algo)))
    return out
