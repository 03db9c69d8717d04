"""NCCL's own algorithms and protocols as algorithms: `native:ring`, `native:tree:LL`, ...

Each variant runs the backend's AllReduce on a communicator of its own, created while
NCCL_ALGO (and NCCL_PROTO) are set in the environment: NCCL reads them when a communicator is
initialised (its tuning step), so setting them for that moment pins the algorithm of that
communicator only, and every other communicator keeps NCCL's own choice. torch creates an NCCL
communicator at the first collective on a group, so `communicator` runs one small AllReduce
while the variables are set. The variables are restored right after. On gloo they do not apply
and are refused before any process starts.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from allreduce_bench.core.algorithms import ring, tree
from allreduce_bench.core.algorithms.base import Algorithm
from allreduce_bench.core.environment import overridden

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

    from allreduce_bench.core.measure.world import World

# our name -> NCCL_ALGO value, and the cost it is modelled with (NVLS reduces inside the
# NVSwitch, which this model has no term for: measured, not modelled)
NCCL_ALGOS = {"ring": ("Ring", ring.cost), "tree": ("Tree", tree.cost), "nvls": ("NVLS", None)}
NCCL_PROTOS = ("LL", "LL128", "Simple")


def nccl_environment(algo: str, proto: str | None) -> dict[str, str]:
    values = {"NCCL_ALGO": NCCL_ALGOS[algo][0]}
    if proto:
        values["NCCL_PROTO"] = proto
    return values


_communicators: dict[tuple, ProcessGroup] = {}  # (algo, proto) -> process group, for `_world` only
_world: list = [None]


def communicator(world: World, algo: str, proto: str | None):
    """This world's NCCL communicator pinned to `algo` / `proto`, created once per world."""
    import torch
    import torch.distributed as dist

    if _world[0] is not world:  # a new (sub-)world: the old one's communicators are done
        for group in _communicators.values():
            dist.destroy_process_group(group)
        _communicators.clear()
        _world[0] = world
    key = (algo, proto)
    if key not in _communicators:
        with overridden(nccl_environment(algo, proto)):
            group = dist.new_group(list(world.group.ranks), backend="nccl",
                                   use_local_synchronization=True)
            warm = torch.zeros(1, device=world.device.torch_device)
            dist.all_reduce(warm, group=group)  # the communicator is initialised here
            if warm.is_cuda:
                torch.cuda.synchronize(warm.device)
        _communicators[key] = group
    return _communicators[key]


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
    for algo, (value, cost) in NCCL_ALGOS.items():
        for proto in (None, *NCCL_PROTOS):
            name = f"native:{algo}" + (f":{proto}" if proto else "")
            what = f"NCCL's AllReduce pinned to NCCL_ALGO={value}" + (f", NCCL_PROTO={proto}" if proto else "")
            out.append(Algorithm(name, what + " (its own communicator; NCCL only)",
                                 builder(algo, proto), cost, supports(name, algo)))
    return out
