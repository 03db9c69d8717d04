"""Real launchers for the tests: Open MPI's mpirun, MPICH's mpiexec, and a one-node Slurm.

The packages are installed by .ci/run (apt: openmpi-bin mpich slurm-wlm munge); here we only
find their binaries and, for Slurm, start a private cluster: munged, slurmctld and slurmd with
their configuration, sockets, state and logs in a temporary directory and ports the OS picks,
so nothing on the host is touched, and stop them again (allreduce_bench/emulate/slurm.py's
SlurmDaemons, which also makes the emulated cluster a Slurm cluster). Where a piece is missing,
`find_*` return the reason to skip with.
"""
from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

from allreduce_bench.emulate.slurm import SlurmDaemons
from allreduce_bench.emulate.slurm import slurm_missing as _slurm_missing


def open_mpi() -> tuple[str | None, str]:
    """Open MPI's launcher, by its explicit Debian name first: with MPICH installed beside it,
    the plain `mpirun` is whichever the alternatives system chose."""
    for name in ("mpirun.openmpi", "mpirun"):
        path = shutil.which(name)
        if path and "Open MPI" in _version(path):
            return path, ""
    return None, "Open MPI's mpirun not found (apt-get install openmpi-bin; .ci/run does)"


def mpich() -> tuple[str | None, str]:
    for name in ("mpiexec.mpich", "mpiexec.hydra", "mpiexec"):
        path = shutil.which(name)
        if path and "HYDRA" in _version(path):
            return path, ""
    return None, "MPICH's mpiexec not found (apt-get install mpich; .ci/run does)"


def _version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


def slurm_missing() -> str:
    """Why a private Slurm cannot start here, or '' when it can."""
    reason = _slurm_missing()
    return reason.replace("munge)", "munge; .ci/run does)").replace("run as root", "run the tests as root")


class LocalSlurm(SlurmDaemons):
    """A one-node Slurm cluster in `root`, this host on 127.0.0.1 (emulate/slurm.py writes its
    configuration and runs its daemons): `cpus` CPUs declared, so 4-8 tasks fit on 2 cores, one
    partition. `env` is what srun/sbatch need to find it."""

    def __init__(self, root: Path, cpus: int = 8):
        self.node = socket.gethostname().split(".")[0]
        super().__init__(root, {self.node: "127.0.0.1"}, cpus)
