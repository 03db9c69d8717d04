"""Where each rank runs (`--bind`), planned purely and applied before it joins (doc/methodology.md, "Binding")."""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from allreduce_bench.core.environment import variables, visible_gpus
from allreduce_bench.core.host import cgroups, gpus, read_stripped

MODES = ("auto", "none", "core", "numa")
NODE_ROOT = Path("/sys/devices/system/node")
PCI_ROOT = Path("/sys/bus/pci/devices")
ONLINE_CPUS = Path("/sys/devices/system/cpu/online")


# --- CPU lists -------------------------------------------------------------------------------

def parse_cpulist(text: str) -> list[int]:
    """Linux's cpulist notation: '0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def format_cpulist(cpus) -> str:
    """The inverse of parse_cpulist: [0, 1, 2, 3, 8] -> '0-3,8'."""
    cpus = sorted(set(cpus))
    runs: list[list[int]] = []
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def numa_nodes(root: Path = NODE_ROOT) -> dict[int, list[int]]:
    """NUMA node -> its CPUs (nodes without CPUs left out); {} where sysfs does not say."""
    nodes = {}
    for directory in sorted(root.glob("node[0-9]*")):
        cpus = parse_cpulist(read_stripped(directory / "cpulist") or "")
        if cpus:
            nodes[int(directory.name[4:])] = cpus
    return nodes


def node_of(cpus, nodes: Mapping[int, list[int]]) -> list[int]:
    wanted = set(cpus)
    return [node for node, members in sorted(nodes.items()) if wanted & set(members)]


def cgroup_cpus() -> list[int]:
    """The CPUs the cgroup allows (else every online CPU)."""
    text = cgroups.cpuset() or read_stripped(ONLINE_CPUS)
    return parse_cpulist(text) if text else list(range(os.cpu_count() or 1))


# --- the GPU's NUMA node ------------------------------------------------------------------------

def pci_address(domain: int, bus: int, device: int) -> str:
    """sysfs's name of a PCI function 0: '0000:3b:00.0'."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def gpu_numa_node(address: str, root: Path = PCI_ROOT) -> int | None:
    """The NUMA node sysfs gives the PCI device (None where unknown)."""
    text = read_stripped(root / address.lower() / "numa_node")
    return int(text) if text and text.lstrip("-").isdigit() and int(text) >= 0 else None


# --- what a launcher did ---------------------------------------------------------------------

def launcher_binding(launched_with: Mapping[str, str], current, allowed) -> str | None:
    """How a launcher bound this rank (its variables, or an affinity narrower than the cgroup's), or None."""
    srun = launched_with.get("SLURM_CPU_BIND_TYPE", "")
    if srun and not srun.startswith("none") and set(current) != set(allowed):
        return f"srun --cpu-bind={srun.rstrip(':')}"
    policy = launched_with.get("OMPI_MCA_hwloc_base_binding_policy", "")
    if policy and policy != "none" and set(current) != set(allowed):
        return f"mpirun --bind-to {policy}"
    if set(current) < set(allowed):
        return f"the launcher (affinity {format_cpulist(current)} of {format_cpulist(allowed)})"
    return None


# --- the plan --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """A rank's binding: `how` core | numa | launcher | none, `cpus` (None: leave it), `why` for meta.json."""

    how: str
    cpus: tuple[int, ...] | None
    why: str


def core_block(allowed, local_rank: int, local_world_size: int) -> tuple[int, ...]:
    """This local rank's block of the allowed CPUs; one shared CPU round-robin if there are fewer than ranks."""
    allowed = sorted(allowed)
    if len(allowed) < local_world_size:
        return (allowed[local_rank % len(allowed)],)
    start = local_rank * len(allowed) // local_world_size
    stop = (local_rank + 1) * len(allowed) // local_world_size
    return tuple(allowed[start:stop])


def numa_block(allowed, nodes: Mapping[int, list[int]], local_rank: int, local_world_size: int,
               gpu_node: int | None) -> tuple[int | None, tuple[int, ...]]:
    """(node, its allowed CPUs): the GPU's node, else nodes dealt over the local ranks; (None, ()) if unknown."""
    usable = {n: [c for c in cpus if c in set(allowed)] for n, cpus in nodes.items()}
    usable = {n: cpus for n, cpus in usable.items() if cpus}
    if gpu_node is not None:
        return (gpu_node, tuple(usable[gpu_node])) if gpu_node in usable else (None, ())
    if not usable:
        return None, ()
    order = sorted(usable)
    node = order[local_rank * len(order) // max(1, local_world_size)]
    return node, tuple(usable[node])


# --- applying it and what meta.json keeps ------------------------------------------------------

def set_affinity(cpus) -> None:
    """Every thread of this process onto `cpus` (sched_setaffinity(0) moves only the caller)."""
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue
    os.sched_setaffinity(0, cpus)


@dataclass(frozen=True)
class Placement:
    """One rank's placement, as meta.json keeps it."""

    bind: str  # the mode asked for
    how: str  # core | numa | launcher | none
    cpus: str  # the affinity it measured with, cpulist notation
    numa_nodes: list[int]
    why: str
    sched: str = "other"  # its threads' policy: fifo | other (measure/scheduling.py)
    sched_why: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def physical_gpu(gpu_index: int, visible: str | None) -> int | None:
    """nvidia-smi's index of torch's CUDA device under CUDA_VISIBLE_DEVICES (None where named by UUID)."""
    if not visible:
        return gpu_index
    names = [name.strip() for name in visible.split(",")]
    if gpu_index < len(names) and names[gpu_index].isdigit():
        return int(names[gpu_index])
    return None


def gpu_node_of(gpu_index: int | None) -> int | None:
    """The NUMA node of torch's CUDA device: sysfs by its PCI address, else NVML's or nvidia-smi's."""
    if gpu_index is None:
        return None
    import torch

    props = torch.cuda.get_device_properties(gpu_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        node = gpu_numa_node(pci_address(getattr(props, "pci_domain_id", 0), bus,
                                         getattr(props, "pci_device_id", 0)))
        if node is not None:
            return node
    physical = physical_gpu(gpu_index, visible_gpus())
    return None if physical is None else gpus.numa_node(str(physical))


@dataclass(frozen=True)
class Binder:
    """What one rank's binding depends on, read once before it joins; each sub-world places its ranks again."""

    mode: str
    allowed: tuple[int, ...]  # the CPUs it may use now
    nodes: dict
    launcher: str | None = None  # how a launcher bound it, if one did (launcher_binding)
    gpu: bool = False
    gpu_node: int | None = None
    sched: dict | None = None  # scheduling.Sched.as_dict() of this rank; None: as started

    @classmethod
    def here(cls, mode: str, *, started_here: bool, gpu_index: int | None = None,
             sched: dict | None = None) -> Binder:
        """`started_here`: a local run's rank, whose affinity is the driver's, never a launcher's binding."""
        current = tuple(sorted(os.sched_getaffinity(0)))
        launcher = None if started_here else launcher_binding(
            variables("SLURM_CPU_BIND", "OMPI_MCA_hwloc"), current, cgroup_cpus())
        return cls(mode, current, numa_nodes(), launcher, gpu_index is not None,
                   gpu_node_of(gpu_index) if mode in ("auto", "numa") else None, sched)

    def plan(self, local_rank: int, local_world_size: int) -> Plan:
        """The binding of one of `local_world_size` ranks on this host (doc/methodology.md, "Binding")."""
        mode, allowed, gpu, gpu_node = self.mode, self.allowed, self.gpu, self.gpu_node
        realtime = self.sched is not None and self.sched["policy"] == "fifo"  # SCHED_FIFO threads
        if mode not in MODES:
            raise ValueError(f"unknown binding mode {mode!r}")
        if mode == "none":
            return Plan("none", None, "--bind none")
        if mode == "auto" and self.launcher:
            return Plan("launcher", None, f"kept the binding of {self.launcher}")
        if mode == "auto" and gpu and gpu_node is None:
            return Plan("none", None, "the GPU's NUMA node is unknown (sysfs, nvidia-smi)")
        if mode == "numa" or (mode == "auto" and gpu):
            node, cpus = numa_block(allowed, self.nodes, local_rank, local_world_size, gpu_node)
            if cpus:
                where = f"GPU's NUMA node {node}" if gpu_node is not None else f"NUMA node {node}"
                return Plan("numa", cpus, f"the CPUs of the {where}")
            return Plan("none", None, f"--bind {mode}: no NUMA node with usable CPUs is known")
        if mode == "auto" and len(allowed) < local_world_size:
            return Plan("none", None, f"{len(allowed)} CPU(s) for {local_world_size} local ranks: "
                        "binding would only stack them")
        if mode == "auto" and not realtime and len(allowed) < 2 * local_world_size:
            # a rank pinned to one CPU waits for it while its own gloo threads or other work
            # hold it (measured on a 2-core VM: 1M median 0.9 -> 3 ms); doc/noise.md
            return Plan("none", None, "one CPU per rank without SCHED_FIFO: a pinned rank waits for "
                        "its CPU (--sched fifo, or --bind core)")
        cpus = core_block(allowed, local_rank, local_world_size)
        shared = len(allowed) < local_world_size
        return Plan("core", cpus, f"core block {local_rank} of {local_world_size}"
                    + (" (shared: fewer CPUs than ranks)" if shared else ""))

    def bind(self, local_rank: int, local_world_size: int) -> Placement:
        sched = self.sched or {"policy": "other", "why": "as started"}
        chosen = self.plan(local_rank, local_world_size)
        try:
            set_affinity(chosen.cpus if chosen.cpus is not None else self.allowed)
        except OSError as error:
            chosen = Plan("none", None, f"sched_setaffinity failed ({error.strerror})")
        now = sorted(os.sched_getaffinity(0))
        return Placement(self.mode, chosen.how, format_cpulist(now), node_of(now, self.nodes),
                         chosen.why, sched["policy"], sched["why"])


def bind_rank(mode: str, local_rank: int, local_world_size: int, *, started_here: bool,
              gpu_index: int | None = None) -> Placement:
    return Binder.here(mode, started_here=started_here, gpu_index=gpu_index).bind(
        local_rank, local_world_size)


def local_members(world_size: int, rank: int, hosts: list[str], one_machine: bool) -> list[int]:
    """The ranks of the first `world_size` on this rank's host (all of them on an emulated cluster)."""
    return [r for r in range(world_size) if one_machine or hosts[r] == hosts[rank]]


def summary(placements: list[dict], hosts: list[str]) -> str:
    """One line for meta.json and the report: how ranks were placed, which ran unbound or shared CPUs."""
    unbound = [rank for rank, p in enumerate(placements) if p["how"] == "none"]
    # how many ranks of each host hold each CPU: one pass, not every pair (quadratic in N)
    cpus = [set(parse_cpulist(p["cpus"])) for p in placements]
    holders = Counter((hosts[rank], cpu) for rank, mine in enumerate(cpus) for cpu in mine)
    shared = [rank for rank, mine in enumerate(cpus) if any(holders[hosts[rank], cpu] > 1 for cpu in mine)]
    hows = sorted({p["how"] for p in placements})
    parts = [f"ranks bound by {'/'.join(hows)}" if unbound != list(range(len(placements)))
             else "ranks unbound"]
    if unbound and len(unbound) < len(placements):
        parts.append(f"unbound: rank(s) {format_cpulist(unbound)}")
    if shared:
        parts.append(f"sharing CPUs with another rank: rank(s) {format_cpulist(shared)}")
    return "; ".join(parts) + (f" ({placements[0]['why']})" if unbound else "")
