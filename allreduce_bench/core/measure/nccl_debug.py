"""`--nccl-debug`: NCCL's own log, one file per rank, read into meta.json's `nccl` block (nccl_log/parse.py)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from allreduce_bench.core.config.launch import LaunchConfig

DEBUG_DIR = "nccl-debug"
SUBSYSTEMS = "INIT,GRAPH,ENV,TUNING"


def debug_environment(folder: Path | str) -> dict[str, str]:
    """The variables a rank runs with (NCCL expands %h and %p)."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYSTEMS,
            "NCCL_DEBUG_FILE": str(Path(folder).resolve() / "%h.%p.log")}


def _folder(launch: LaunchConfig) -> Path:
    """OUT/nccl-debug where OUT is here; else a scratch folder whose files are sent to rank 0."""
    out = Path(launch.out_dir)
    return out / DEBUG_DIR if out.is_dir() else _scratch()


def _scratch() -> Path:
    return Path(tempfile.gettempdir()) / f"allreduce-bench-{DEBUG_DIR}-{os.getuid()}"


def enable(launch: LaunchConfig) -> None:
    if not launch.nccl_debug:
        return
    folder = _folder(launch)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.update(debug_environment(folder))


def own_files(launch: LaunchConfig, pid: int | None = None) -> list[Path]:
    """This process's debug file(s) in either folder `enable` may have chosen."""
    pid = os.getpid() if pid is None else pid
    return sorted(path for folder in (Path(launch.out_dir) / DEBUG_DIR, _scratch())
                  for path in folder.glob(f"*.{pid}.log"))


def collect(launch: LaunchConfig, rank: int, world_size: int, guarded: Callable) -> None:
    """Collective after a world's measurements: rank 0 gets every debug file it cannot see and records them."""
    if not launch.nccl_debug:
        return
    import torch.distributed as dist  # here: nccl_log/record.py reads DEBUG_DIR without torch

    mine = own_files(launch)
    folder = Path(launch.out_dir) / DEBUG_DIR
    received: list | None = [None] * world_size if rank == 0 else None

    def exchange() -> dict | None:
        names: list = [None] * world_size
        dist.all_gather_object(names, [p.name for p in mine])
        missing = [[i for i, files in enumerate(names) if not all((folder / f).exists() for f in files)]]
        dist.broadcast_object_list(missing, src=0)  # rank 0 says whose files its OUT lacks
        text = {p.name: p.read_text(errors="replace") for p in mine} if rank in missing[0] else None
        dist.gather_object(text, received, dst=0)
        return text

    text = guarded(exchange, "the NCCL logs' gather")
    if rank != 0:
        if text and mine and mine[0].parent != folder:
            for path in mine:  # a scratch copy, sent: NCCL writes on into the unlinked file
                path.unlink(missing_ok=True)
        return
    folder.mkdir(parents=True, exist_ok=True)
    for files in filter(None, received or ()):
        for name, content in files.items():
            (folder / name).write_text(content)
