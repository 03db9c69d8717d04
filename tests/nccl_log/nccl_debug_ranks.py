"""What a rank of a `--nccl-debug` run does at the end, on a real gloo world
(tests/support/distributed.py)."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

from allreduce_bench.core.measure import nccl_debug
from allreduce_bench.core.measure.device import Device


def write_like_nccl_then_collect(out_dirs: list[str], lines: list[str], made: list[bool]) -> list[str]:
    """Each rank writes the debug file NCCL would (`<host>.<pid>.log` where NCCL_DEBUG_FILE
    points: its own OUT, a scratch folder where `made` says its OUT is not there), then all
    collect; returns what rank 0's folder holds, and what is left of the others' files."""
    rank = dist.get_rank()
    config = SimpleNamespace(out_dir=out_dirs[rank], nccl_debug=True)
    if made[rank]:
        Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    nccl_debug.enable(config)
    folder = Path(os.environ["NCCL_DEBUG_FILE"]).parent
    host = f"node-{rank}"
    (folder / f"{host}.{os.getpid()}.log").write_text(
        "".join(line.format(host=host, pid=os.getpid(), rank=rank) + "\n" for line in lines))
    nccl_debug.collect(config, rank, dist.get_world_size(), Device().guarded)
    if rank == 0:
        return sorted(p.name.split(".")[0] for p in folder.iterdir())
    return [p.name for p in nccl_debug.own_files(config)]
