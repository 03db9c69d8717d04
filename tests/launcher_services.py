"""Real launchers for the tests: Open MPI's mpirun, MPICH's mpiexec, and a one-node Slurm.

The packages are installed by .ci/run (apt: openmpi-bin mpich slurm-wlm munge); here we only
find their binaries and, for Slurm, start a private cluster: munged, slurmctld and slurmd with
their configuration, sockets, state and logs in a temporary directory and ports the OS picks,
so nothing on the host is touched, and stop them again. Where a piece is missing, `find_*`
return the reason to skip with.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")


def slurm_missing() -> str:
    """Why a private Slurm cannot start here, or '' when it can."""
    missing = [name for name in SLURM_BINARIES
               if not shutil.which(name) and not Path("/usr/sbin", name).exists()]
    if missing:
        return (f"Slurm binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge; "
                ".ci/run does)")
    if os.geteuid() != 0:
        return "a private slurmd must run as root to start jobs' tasks; run the tests as root"
    return ""


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class LocalSlurm:
    """A one-node Slurm cluster in `root`: `cpus` CPUs declared (SlurmdParameters=config_overrides
    lets slurmd accept more than the host has, so 4-8 tasks fit on 2 cores), one partition.
    `env` is what srun/sbatch need to find it."""

    def __init__(self, root: Path, cpus: int = 8):
        self.root, self.cpus = root, cpus
        self.node = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for name in list(self.env):
            if name.startswith("SLURM_") and name != "SLURM_CONF":
                del self.env[name]  # the tests may themselves run inside a Slurm job
        self.pid_files = [root / "munged.pid", root / "slurmctld.pid", root / "slurmd.pid"]

    def start(self, wait_s: float = 30) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)  # munged checks that its socket's directory is reachable
        for sub in ("state", "spool"):
            (root / sub).mkdir(exist_ok=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = root / "munge.sock"
        self._run([_binary("munged"), "--force", f"--socket={socket_path}", f"--key-file={key}",
                   f"--log-file={root / 'munged.log'}", f"--pid-file={root / 'munged.pid'}",
                   f"--seed-file={root / 'munged.seed'}"])
        self.conf.write_text("\n".join([
            "ClusterName=allreduce-bench-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            # no cgroups: containers and CI machines often do not delegate them
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "MpiDefault=none",
            "KillWait=5",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=cpu Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            ""]))
        self._run([_binary("slurmctld"), "-f", str(self.conf)])
        self._run([_binary("slurmd"), "-f", str(self.conf), "-N", self.node])
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            done = subprocess.run([_binary("sinfo"), "-h", "-o", "%T"], env=self.env,
                                  capture_output=True, text=True, timeout=20)
            if done.returncode == 0 and done.stdout.strip() in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the private Slurm did not come up within {wait_s:g} s; see "
                           f"{root}/slurmctld.log and slurmd.log:\n{self.logs()}")

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text()[-2000:]
                         for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        """Stop the daemons this cluster started (by their pid files): SIGTERM to all, then
        SIGKILL to any still there after a few seconds."""
        pids = []
        for pid_file in self.pid_files:
            try:
                pid = int(pid_file.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
            except (OSError, ValueError, IndexError):
                continue
        deadline = time.monotonic() + 5
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            time.sleep(0.1)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
