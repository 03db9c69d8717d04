"""What a run was measured on, collected apart from the measuring (as pyperf does)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys

import torch

from .device import cpu_model

ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "OMP_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES", "SLURM_JOB_", "MASTER_")


def versions() -> dict:
    found = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.cuda.is_available():
        found["cuda"] = torch.version.cuda
        try:
            found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # torch built without NCCL
            pass
    for name in ("pandas", "matplotlib", "numpy"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "?")
    return found


def host_meta(config) -> dict:
    """Facts about the run and the host rank 0 runs on."""
    return {
        "run_id": config.run_id,
        "tag": config.tag,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": config.command,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(config).items()},
        "backend": config.backend,
        "device": config.device,
        "versions": versions(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }


def rank_info(device) -> dict:
    """Per rank: where it ran and on what; gathered to rank 0."""
    return {"hostname": socket.gethostname(), "device": device.name, "pid": os.getpid()}
