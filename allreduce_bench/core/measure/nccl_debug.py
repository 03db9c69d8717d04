"""`--nccl-debug`: NCCL's own log of a run, one file per rank, read into meta.json's `nccl` block.

Every rank sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING (what NCCL's
maintainers ask for on "my bandwidth is low" reports) and NCCL_DEBUG_FILE=OUT/nccl-debug/%h.%p.log
before NCCL starts (it reads them once per process). At the end of each world rank 0 reads the
files (ranks whose OUT it cannot see send theirs over the process group) and records what NCCL
said (nccl_log/parse.py) in meta.json, where `report` and `health` read it. The TUNING
subsystem writes one line per collective on each communicator's rank 0: the log is for seeing
what NCCL set up, not for the figures of small sizes.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from allreduce_bench.core.config.launch import LaunchConfig

DEBUG_DIR = "nccl-debug"
SUBSYSTEMS = "INIT,GRAPH,ENV,TUNING"


def debug_environment(folder: Path | str) -> dict[str, str]:
    """The variables a rank runs with: NCCL expands %h (host) and %p (pid) in the file name."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": SUBSYSTEMS,
            "NCCL_DEBUG_FILE": str(Path(folder).resolve() / "%h.%p.log")}


def _folder(launch: LaunchConfig) -> Path:
    """OUT/nccl-debug where OUT is here (rank 0, a local run, a shared file system); else a
    scratch folder, whose files are sent to rank 0 (a rank under a launcher that named its
    own default OUT, or whose OUT is not created yet on this host)."""
    out = Path(launch.out_dir)
    return out / DEBUG_DIR if out.is_dir() else _scratch()


def _scratch() -> Path:
    return Path(tempfile.gettempdir()) / f"allreduce-bench-{DEBUG_DIR}-{os.getuid()}"


def enable(launch: LaunchConfig) -> None:
    """Before this rank's first NCCL call: the variables above, with --nccl-debug."""
    if not launch.nccl_debug:
        return
    folder = _folder(launch)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.update(debug_environment(folder))


def own_files(launch: LaunchConfig, pid: int | None = None) -> list[Path]:
    """This process's debug file(s) (`<host>.<pid>.log`) in either folder `enable` may have
    chosen (OUT/nccl-debug or the scratch one: OUT may have appeared since)."""
    pid = os.getpid() if pid is None else pid
    return sorted(path for folder in (Path(launch.out_dir) / DEBUG_DIR, _scratch())
                  for path in folder.glob(f"*.{pid}.log"))


def collect(launch: LaunchConfig, rank: int, world_size: int, guarded: Callable) -> None:
    """Collective on the default group, after a world's measurements: rank 0 gets every rank's
    debug file (those it cannot see in its OUT are sent to it) and records the block. The
    exchange runs `guarded` (Device.guarded): a lost peer ends it at --timeout."""
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
