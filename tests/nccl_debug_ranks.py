"""What a rank of a `--nccl-debug` run does at the end, on a real gloo world (tests/distributed.py)."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

from allreduce_bench.measure import nccl_debug


def write_like_nccl_then_collect(out_dirs: list[str], lines: list[str]) -> list[str]:
    """Each rank writes the debug file NCCL would (`<host>.<pid>.log` in ITS out dir: ranks of
    hosts that share no file system), then all collect; returns what rank 0's folder holds."""
    rank = dist.get_rank()
    config = SimpleNamespace(out_dir=out_dirs[rank], nccl_debug=True)
    folder = Path(config.out_dir) / nccl_debug.DEBUG_DIR
    folder.mkdir(parents=True, exist_ok=True)
    host = f"node-{rank}"
    (folder / f"{host}.{os.getpid()}.log").write_text(
        "".join(line.format(host=host, pid=os.getpid(), rank=rank) + "\n" for line in lines))
    nccl_debug.collect(config, rank, dist.get_world_size())
    return sorted(p.name.split(".")[0] for p in folder.iterdir()) if rank == 0 else []
