"""How ranks come to exist: a launcher's environment, or a local world started here.

Every launcher runs the same per-rank entry point (`runner.rank_main`); they differ only in how
rank, world size, local rank and local world size reach it.
"""
from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launcher: str


def _int(env: dict, name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise UsageError(f"environment variable {name}={env[name]!r} is not an integer; "
                         "fix the launcher's environment") from None


def launcher_env(env: dict | None = None) -> RankEnv | None:
    """The rank layout a launcher (torchrun and alike) put in the environment, or None."""
    env = os.environ if env is None else env
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    missing = [n for n in ("RANK", "WORLD_SIZE") if n not in env]
    if missing:
        raise UsageError(f"launcher environment is partial: {', '.join(missing)} missing; set both "
                         "RANK and WORLD_SIZE (torchrun does) or neither for a local run")
    rank, world_size = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local_rank = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
    local_world_size = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world_size
    if not 0 <= rank < world_size or not 0 <= local_rank < local_world_size:
        raise UsageError(f"inconsistent launcher environment: RANK={rank} WORLD_SIZE={world_size} "
                         f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world_size}")
    return RankEnv(rank, world_size, local_rank, local_world_size, "torchrun")


def quiet_elastic_logs() -> None:
    """torch's launcher logs every start and stop at INFO/WARNING; keep real errors only."""
    for name in ("torch.distributed.elastic", "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.ERROR)


def launch_local(nprocs: int, entrypoint: Callable, *args) -> dict[int, object]:
    """Start `nprocs` ranks on this host with torch's elastic launcher, on loopback only.

    The rendezvous store listens on 127.0.0.1 with a port the OS picks, so concurrent runs never
    collide; gloo is pinned to the loopback interface unless the user chose one. Returns each
    rank's return value; a failed rank raises torch's ChildFailedError.
    """
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: ranks share the cores
    quiet_elastic_logs()
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nprocs, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
        monitor_interval=0.1, start_method="spawn")
    return elastic_launch(config, entrypoint)(*args)
