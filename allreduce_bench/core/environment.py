"""Which rank this process is, from what a launcher set (torchrun, srun, Open MPI, MPICH/PMI): the one module
that reads how a process was started (doc/architecture.md). No torch."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass

from allreduce_bench.core.errors import UsageError

DEFAULT_MASTER_PORT = 29500
# `emulate`'s hosts get JSON {"label": the rows' `emulation` column, "link_peaks": {link class: GB/s}}
EMULATION_ENV = "ALLREDUCE_BENCH_EMULATION"
# the Kubernetes node a rank's pod runs on (spec.nodeName): `k8s`'s manifests set it, meta.json keeps it
KUBERNETES_NODE_ENV = "ALLREDUCE_BENCH_K8S_NODE"


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launcher: str  # torchrun | slurm | openmpi | mpich
    node_rank: int = 0
    master_addr: str | None = None  # None: the launcher already set MASTER_ADDR (torchrun)
    master_port: int | None = None

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.local_world_size)


@dataclass(frozen=True)
class Family:
    """Where one launcher family keeps rank, world size, local rank, local size and node rank."""

    name: str
    rank: str
    size: str
    local_rank: str
    local_size: tuple[str, ...]  # first one present wins
    node_rank: str | None


FAMILIES = (
    Family("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", ("LOCAL_WORLD_SIZE",), "GROUP_RANK"),
    Family("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
           ("OMPI_COMM_WORLD_LOCAL_SIZE",), None),
    Family("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", ("MPI_LOCALNRANKS",), None),
    # The step's own layout first: SLURM_TASKS_PER_NODE describes the whole allocation.
    Family("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
           ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
           "SLURM_NODEID"),
)
SLURM_NODELISTS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


# ---- Slurm's compact notations ------------------------------------------------------------

def expand_nodelist(nodelist: str) -> list[str]:
    """Every host of a Slurm nodelist: 'gpu[01-03],cpu5' -> gpu01 gpu02 gpu03 cpu5 (python-hostlist, else
    scontrol)."""
    hosts: list[str] = []
    try:
        import hostlist
    except ImportError:
        hosts = _scontrol_hostnames(nodelist)
    else:
        try:
            hosts = hostlist.expand_hostlist(nodelist)
        except hostlist.BadHostlist:
            pass
    if not hosts:
        raise UsageError(f"cannot read the Slurm nodelist {nodelist!r}; set MASTER_ADDR to the "
                         "first node's address")
    return hosts


def _scontrol_hostnames(nodelist: str) -> list[str]:
    import subprocess
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.split() if done.returncode == 0 and nodelist.strip() else []


def parse_tasks_per_node(text: str) -> list[int]:
    """Tasks on each node: '4(x2),2' -> [4, 4, 2]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise UsageError(f"cannot read Slurm tasks per node {text!r}; expected e.g. 8 or "
                             "4(x2),2")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


# ---- reading a launcher's environment ------------------------------------------------------

def _int(env: Mapping, name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise UsageError(f"environment variable {name}={env[name]!r} is not an integer; "
                         "fix the launcher's environment") from None


def _present(env: Mapping, family: Family) -> bool:
    if family.name == "slurm":
        # the batch script carries SLURM_PROCID too: only an srun step is a world of ranks
        step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", ""))
        return family.rank in env and step.isdigit()
    return family.rank in env or family.size in env


def _local_size(env: Mapping, family: Family, node_rank: int | None) -> tuple[int | None, str]:
    for name in family.local_size:
        if name in env:
            if family.name != "slurm":
                return _int(env, name), name
            counts = parse_tasks_per_node(env[name])
            if len(counts) == 1:
                return counts[0], name
            if node_rank is None or node_rank >= len(counts):
                raise UsageError(f"{name}={env[name]!r} lists {len(counts)} nodes but "
                                 f"SLURM_NODEID is {'missing' if node_rank is None else node_rank}")
            return counts[node_rank], name
    return None, family.local_size[0]


def _master(env: Mapping, family: Family, world_size: int, local_world_size: int
            ) -> tuple[str | None, int | None]:
    """Master address and port for env:// init; (None, None) when the launcher set them."""
    if family.name == "torchrun":
        return None, None
    port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_MASTER_PORT
    if family.name == "slurm" and "MASTER_PORT" not in env and env.get("SLURM_JOB_ID", "").isdigit():
        port = 15000 + int(env["SLURM_JOB_ID"]) % 15000  # two jobs sharing a node get two ports
    if "MASTER_ADDR" in env:
        return env["MASTER_ADDR"], port
    if family.name == "slurm":
        for name in SLURM_NODELISTS:
            if env.get(name):
                return expand_nodelist(env[name])[0], port
        raise UsageError("Slurm step without a nodelist: set SLURM_JOB_NODELIST or MASTER_ADDR")
    if local_world_size >= world_size:  # every rank on this host
        return "127.0.0.1", port
    raise UsageError(f"{family.name} ranks span several hosts but MASTER_ADDR is not set; pass the "
                     "first host's address, e.g. mpirun -x MASTER_ADDR=$(hostname) "
                     "(Open MPI) or -genv MASTER_ADDR $(hostname) (MPICH)")


def launcher_env(env: Mapping | None = None) -> RankEnv | None:
    """The rank layout a launcher set, or None for a local run (torchrun wins; one rank is a local run)."""
    env = os.environ if env is None else env
    family = next((f for f in FAMILIES if _present(env, f)), None)
    if family is None:
        return None
    node_from_env = _int(env, family.node_rank) if family.node_rank and family.node_rank in env \
        else None
    local_size, local_size_name = _local_size(env, family, node_from_env)
    needed = [family.rank, family.size] + ([family.local_rank, local_size_name]
                                           if family.name != "torchrun" else [])
    missing = [name for name in needed if name not in env]
    if missing:
        present = [n for n in (family.rank, family.size, family.local_rank, local_size_name)
                   if n in env]
        raise UsageError(f"partial {family.name} environment: {', '.join(present)} set but "
                         f"{', '.join(missing)} missing; start the run with the launcher itself "
                         "or unset these variables for a local run")
    rank, world_size = _int(env, family.rank), _int(env, family.size)
    local_rank = _int(env, family.local_rank) if family.local_rank in env else rank
    local_world_size = local_size if local_size is not None else world_size
    names = f"{family.rank}={rank} {family.size}={world_size} {family.local_rank}={local_rank} " \
            f"{local_size_name}={local_world_size}"
    if world_size < 1 or not 0 <= rank < world_size or not 0 <= local_rank < local_world_size \
            or local_world_size > world_size:
        raise UsageError(f"inconsistent {family.name} environment: {names}; each rank needs "
                         "0 <= rank < world size and 0 <= local rank < local size <= world size")
    node_rank = node_from_env if node_from_env is not None else rank // local_world_size
    if family.name != "torchrun" and world_size == 1:
        return None
    addr, port = _master(env, family, world_size, local_world_size)
    return RankEnv(rank, world_size, local_rank, local_world_size, family.name, node_rank,
                   addr, port)


def export_for_env_init(rank_env: RankEnv, environ: MutableMapping[str, str] | None = None) -> None:
    environ = os.environ if environ is None else environ
    values = {"RANK": rank_env.rank, "WORLD_SIZE": rank_env.world_size,
              "LOCAL_RANK": rank_env.local_rank, "LOCAL_WORLD_SIZE": rank_env.local_world_size,
              "GROUP_RANK": rank_env.node_rank, "MASTER_ADDR": rank_env.master_addr,
              "MASTER_PORT": rank_env.master_port}
    for name, value in values.items():
        if value is not None:
            environ.setdefault(name, str(value))


@dataclass(frozen=True)
class Started:
    """How this process was started, read once by its command: rank layout, emulation, command line."""

    env: RankEnv | None = None
    emulation: str = ""
    command: str = ""
    link_peaks: tuple[tuple[str, float], ...] = ()


def how_started(environ: Mapping | None = None) -> Started:
    import shlex
    import sys

    environ = os.environ if environ is None else environ
    emulated = json.loads(environ.get(EMULATION_ENV) or "{}")
    return Started(launcher_env(environ), emulated.get("label", ""), shlex.join(sys.argv),
                   tuple(sorted(emulated.get("link_peaks", {}).items())))


def master_of(env: RankEnv) -> tuple[str | None, int | None]:
    """(address, port) of the world's store: the launcher's, else what the layout found; None if absent."""
    port = env.master_port or os.environ.get("MASTER_PORT")
    return env.master_addr or os.environ.get("MASTER_ADDR"), None if port is None else int(port)


# ---- what torch's agent, CUDA and the user set, each read where the module needs it ------------

def under_elastic_agent() -> bool:
    """torch's elastic agent started this process: it handles Ctrl-C, and its store is the rendezvous."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def agent_store() -> bool:
    """The agent hands its ranks its own store: rank 0 serves none."""
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)


def visible_gpus() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def variables(*prefixes: str) -> dict[str, str]:
    """The variables, sorted, whose names start with one of `prefixes`."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def user_setting(*names: str, environ: Mapping | None = None) -> str | None:
    """The first of `names` set (non-empty) by the user or a test."""
    environ = os.environ if environ is None else environ
    return next((environ[n] for n in names if environ.get(n)), None)


def launcher_hosts(own: str) -> list[str]:
    """The launcher's hosts in node-rank order, where `own` (Slurm's notation) or Slurm names them; [] otherwise."""
    try:
        return expand_nodelist(text) if (text := user_setting(own, *SLURM_NODELISTS)) else []
    except UsageError:
        return []


def is_writer(env: RankEnv | None) -> bool:
    """Whether this process writes the run directory: a local run's driver, or rank 0."""
    return env is None or env.rank == 0


@contextmanager
def overridden(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ with `values` set for the duration, then exactly as it was."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
