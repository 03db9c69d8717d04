"""A rank under a real launcher (srun, mpirun) that writes the debug file NCCL would on its own
host (`<hostname>.<pid>.log`, NCCL_DEBUG_FILE's %h.%p) into the run's OUT/nccl-debug, then
collects them on rank 0 as `run --nccl-debug` does: on CPU no NCCL writes them, so this stands in.

    srun -N 4 python tests/emulate/emulated_ranks.py OUT
"""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

from allreduce_bench.core.environment import export_for_env_init, launcher_env
from allreduce_bench.core.measure import nccl_debug
from allreduce_bench.core.measure.device import Device
from allreduce_bench.nccl_log import hooks as nccl_hooks

LINES = [  # the formats of NVIDIA/nccl#1412's 2.2x log (see test_nccl_debug.py)
    "{host}:{pid}:{pid} [0] NCCL INFO NET/Socket : Using [0]{host}:10.231.0.1<0>",
    "{host}:{pid}:{pid} [0] NCCL INFO Using network Socket",
    "{host}:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm 0x8d57d40 rank {rank} nranks {size} "
    "cudaDev 0 nvmlDev 0 busId 7000 commId 0x49bbd7790311d5eb - Init COMPLETE",
]


def main(out: str) -> None:
    env = launcher_env()
    export_for_env_init(env)
    dist.init_process_group("gloo")
    launch = SimpleNamespace(out_dir=out, nccl_debug=True)  # the LaunchConfig fields nccl_debug reads
    if env.rank == 0:
        Path(out).mkdir(parents=True, exist_ok=True)
    dist.barrier()
    nccl_debug.enable(launch)
    host, pid = socket.gethostname(), os.getpid()
    folder = Path(os.environ["NCCL_DEBUG_FILE"]).parent
    (folder / f"{host}.{pid}.log").write_text("".join(
        line.format(host=host, pid=pid, rank=env.rank, size=env.world_size) + "\n" for line in LINES))
    nccl_debug.collect(launch, env.rank, env.world_size, Device().guarded)
    dist.destroy_process_group()
    if env.rank == 0:  # the writer, once the ranks have ended, as the command does
        nccl_hooks.after_ranks(SimpleNamespace(launch=launch))


if __name__ == "__main__":
    main(sys.argv[1])
