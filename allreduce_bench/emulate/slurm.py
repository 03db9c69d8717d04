"""A private Slurm (munged, slurmctld, slurmds in one directory, on ports the OS picks), and the emulated
cluster as a Slurm cluster, one slurmd per host inside its namespace
(doc/cluster.md, "Try it on an emulated cluster")."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host.processes import send
from allreduce_bench.emulate.cluster import (
    NAME,
    SUBNET,
    EmulatedCluster,
    check_can_emulate,
    namespaces,
    on_host,
    pid_alive,
    remove_namespaces,
    stale_namespaces,
)

CONTROL_ADDRESS = f"{SUBNET}.254"  # the root namespace's end of the uplink into the switch
STATE_PREFIX = "arb-slurm-"
STATE_NAME = re.compile(r"^arb-slurm-(\d+)-[0-9a-f]+$")
NETNS_ETC = Path("/etc/netns")
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scontrol")


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def slurm_missing() -> str:
    """Why a private Slurm cannot start here, or '' when it can."""
    missing = [name for name in BINARIES if not Path(_binary(name)).exists()]
    if missing:
        return (f"Slurm binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        return "a private slurmd must run as root to start jobs' tasks; run as root"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmDaemons:
    """munged + slurmctld + one slurmd per node of `nodes` ({name: address}) declaring `cpus` CPUs
    (config_overrides: more than the host has), in `root`; `env` finds it for srun/sbatch."""

    control_host = "127.0.0.1"
    slurmd_timeout_s = 300  # Slurm's default: a silent slurmd is marked down after this

    def __init__(self, root: Path, nodes: dict[str, str], cpus: int = 8):
        self.root, self.nodes, self.cpus = Path(root), dict(nodes), cpus
        self.conf = self.root / "slurm.conf"
        env = {**os.environ}  # handed on to the daemons, less our own job's SLURM_* if we run in one
        self.env = {**{k: v for k, v in env.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(self.conf)}

    @property
    def pid_files(self) -> list[Path]:
        return [self.root / "munged.pid", self.root / "slurmctld.pid",
                *(self.slurmd_pid_file(n) for n in self.nodes)]

    def slurmd_pid_file(self, node: str) -> Path:
        return self.root / f"slurmd-{node}.pid"

    def slurmd_prefix(self, node: str) -> list[str]:
        """The command that puts `node`'s slurmd where the node is (nothing: here)."""
        return []

    def config_lines(self, socket_path: Path) -> list[str]:
        root = self.root
        names = ",".join(self.nodes)
        return [
            "ClusterName=allreduce-bench",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}({self.control_host})",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool-%n'}",  # %n: the node's name, one per slurmd
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd-%n.log'}",
            # no cgroups: not delegated in containers and CI, not mounted under ip netns exec
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "SlurmdParameters=config_overrides",
            "ReturnToService=2", "MpiDefault=none", "KillWait=5",
            f"SlurmdTimeout={self.slurmd_timeout_s}",
            *(f"NodeName={name} NodeAddr={addr} CPUs={self.cpus} State=UNKNOWN"
              for name, addr in self.nodes.items()),
            f"PartitionName=cpu Nodes={names} Default=YES MaxTime=INFINITE State=UP",
            ""]

    def start(self, wait_s: float = 30) -> None:
        try:
            self._start(wait_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, wait_s: float) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)  # munged checks that its socket's directory is reachable
        (root / "state").mkdir(exist_ok=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        socket_path = root / "munge.sock"
        self._run([_binary("munged"), "--force", f"--socket={socket_path}", f"--key-file={key}",
                   f"--log-file={root / 'munged.log'}", f"--pid-file={root / 'munged.pid'}",
                   f"--seed-file={root / 'munged.seed'}"])
        self.conf.write_text("\n".join(self.config_lines(socket_path)))
        self._run([_binary("slurmctld"), "-f", str(self.conf)])
        for node in self.nodes:
            self.start_slurmd(node)
        self.wait_idle(wait_s)

    def states(self) -> dict[str, str]:
        """node -> Slurm's state of it (idle, down*, allocated, ...)."""
        done = subprocess.run([_binary("sinfo"), "-h", "-N", "-o", "%N %T"], env=self.env,
                              capture_output=True, text=True, timeout=20)
        return dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, wait_s: float = 30, nodes=None) -> None:
        nodes = list(nodes or self.nodes)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            states = self.states()
            if all(states.get(n) in ("idle", "mixed", "allocated") for n in nodes):
                return
            time.sleep(0.3)
        raise RuntimeError(f"the private Slurm did not come up within {wait_s:g} s "
                           f"({self.states()}); see {self.root}/*.log:\n{self.logs()}")

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(command)} failed: {done.stderr.strip()}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-2000:]
                         for p in sorted(self.root.glob("*.log")))

    def start_slurmd(self, node: str) -> None:
        """Start (again) one node's slurmd where the node is."""
        (self.root / f"spool-{node}").mkdir(exist_ok=True)
        self._run([*self.slurmd_prefix(node), _binary("slurmd"), "-f", str(self.conf), "-N", node])

    def stop_slurmd(self, node: str) -> None:
        """Stop one node's slurmd; its jobs' tasks stay."""
        stop_pids([self.slurmd_pid_file(node)])

    def stop(self) -> None:
        """Stop the daemons this cluster started (by their pid files)."""
        stop_pids(self.pid_files)


def stop_pids(pid_files: list[Path], grace_s: float = 5) -> None:
    """SIGTERM every pid named in `pid_files`, then SIGKILL any still there after `grace_s`."""
    pids = []
    for pid_file in pid_files:
        try:
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if pid_alive(pid)]
        time.sleep(0.1)
    send(pids, signal.SIGKILL)


class EmulatedSlurm(SlurmDaemons):
    """An emulated cluster (already built, with a switch) as a Slurm cluster."""

    control_host = CONTROL_ADDRESS

    def __init__(self, cluster: EmulatedCluster, cpus: int = 8, slurmd_timeout_s: int = 300):
        if cluster.switch is None:
            raise ValueError("an emulated Slurm cluster needs the switch namespace (switch=True)")
        self.cluster = cluster
        self.names = [f"node{i}" for i in range(cluster.nodes)]
        self.slurmd_timeout_s = slurmd_timeout_s
        token = cluster.token.split("-")[-1]
        self.uplink = f"arbs{token}"  # root-namespace end of the uplink (<= 15 characters)
        root = Path(tempfile.gettempdir()) / f"{STATE_PREFIX}{os.getpid()}-{token}"
        super().__init__(root, {n: cluster.address(i) for i, n in enumerate(self.names)}, cpus)
        self.agent = self.root / "rsh-agent"
        self.env.pop("GLOO_SOCKET_IFNAME", None)  # every host binds the address of its name

    def namespace_of(self, node: str) -> str:
        return self.cluster.hosts[self.names.index(node)]

    def slurmd_prefix(self, node: str) -> list[str]:
        return on_host(self.namespace_of(node), node)

    def __enter__(self) -> EmulatedSlurm:
        try:
            self._connect()
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _connect(self) -> None:
        """The uplink into the switch, the shared hosts file, the MPI agent."""
        taken = subprocess.run(["ip", "-o", "addr", "show", "to", CONTROL_ADDRESS],
                               capture_output=True, text=True).stdout.strip()
        if taken:
            raise UsageError(f"another emulated Slurm cluster holds {CONTROL_ADDRESS} "
                             f"({taken.split()[1]}); stop it (Ctrl-C, or `allreduce-bench "
                             "emulate --cleanup` if its driver is gone) and start again")
        self.root.mkdir(parents=True, exist_ok=True)
        sw = self.cluster.switch
        assert sw is not None  # checked in __init__
        _ip("link", "add", self.uplink, "type", "veth", "peer", "name", "uplink", "netns", sw)
        _ip("-n", sw, "link", "set", "uplink", "master", "br0", "up")
        _ip("addr", "add", f"{CONTROL_ADDRESS}/24", "dev", self.uplink)
        _ip("link", "set", self.uplink, "up")
        hosts = "".join(f"{addr}\t{name}\n" for name, addr in self.nodes.items())
        text = f"127.0.0.1\tlocalhost\n{hosts}{CONTROL_ADDRESS}\tslurmctld\n"
        for ns in self.cluster.hosts:
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(text)
        (self.root / "hosts").write_text(text)
        self.agent.write_text(agent_script({n: self.namespace_of(n) for n in self.names}))
        self.agent.chmod(0o755)

    def close(self) -> None:
        """Stop the daemons, then everything in the namespaces; remove the hosts files."""
        self.stop()
        self.cluster.close()  # kills every task and slurmstepd left inside; the uplink goes too
        subprocess.run(["ip", "link", "del", self.uplink], capture_output=True)
        for ns in self.cluster.hosts:
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def set_rate(self, node: str, rate_bps: float) -> None:
        """Change one host's uplink rate while the cluster runs (a host slowed on purpose)."""
        self.cluster.set_host_rate(self.names.index(node), rate_bps)

    def mpi_env(self) -> dict:
        """What ranks started through the agent need besides their launcher's variables."""
        return {"MASTER_ADDR": self.names[0], "UCX_TLS": "tcp,self"}

    def openmpi_options(self) -> list[str]:
        subnet = f"{SUBNET}.0/24"
        return ["--mca", "plm_rsh_agent", str(self.agent), "--mca", "btl_tcp_if_include", subnet,
                "--mca", "oob_tcp_if_include", subnet, "--mca", "btl", "tcp,self"]

    def mpich_options(self) -> list[str]:
        return ["-launcher", "rsh", "-launcher-exec", str(self.agent), "-iface", self.uplink]

    def exports(self) -> str:
        """Lines another shell sources to use this cluster, with this emulation's Python and allreduce-bench."""
        package_root = Path(__file__).resolve().parents[2]  # the directory holding allreduce_bench
        return "\n".join([
            f"export SLURM_CONF={self.conf}",
            f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH  # this Python's allreduce-bench",
            f"export PYTHONPATH={shlex.quote(str(package_root))}${{PYTHONPATH:+:$PYTHONPATH}}"
            "  # set, so mpirun -x PYTHONPATH has it",
            "unset GLOO_SOCKET_IFNAME  # each host binds the address of its own name",
            "export TORCH_CPP_LOG_LEVEL=ERROR  # c10d warns on every reverse lookup of 10.231.0.x",
            "export UCX_TLS=tcp,self  # MPICH/UCX: never shared memory past the shaped link",
            f"# rsh-agent HOST COMMAND runs COMMAND on an emulated host: {self.agent}",
            f"export OPENMPI_AGENT='{shlex.join(self.openmpi_options())}'  # mpirun $OPENMPI_AGENT -H node0,...",
            f"export MPICH_AGENT='{shlex.join(self.mpich_options())}'  # mpiexec $MPICH_AGENT -hosts node0,...",
            ""])


def agent_script(hosts: dict[str, str]) -> str:
    """An rsh/ssh stand-in: `agent [ssh options] HOST COMMAND...` runs COMMAND with sh on HOST, as ssh would."""
    cases = "".join(f"  {name}) ns={ns} ;;\n" for name, ns in hosts.items())
    return ("#!/bin/sh\n"
            "# allreduce-bench emulate --slurm: run a command on an emulated host (mpirun's\n"
            "# plm_rsh_agent, mpiexec's -launcher-exec), like `kubectl exec` in the MPI operator\n"
            "while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done\n"
            "host=${1%%.*}; shift\n"
            "case $host in\n" + cases +
            '  *) echo "rsh-agent: no emulated host $host" >&2; exit 255 ;;\n'
            "esac\n"
            'exec ip netns exec "$ns" unshare --uts sh -c \'hostname "$0" && exec sh -c "$1"\' '
            '"$host" "$*"\n')


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise UsageError(f"emulate --slurm could not run `ip {shlex.join(args)}`: "
                         f"{done.stderr.strip() or done.returncode}")


def stale_slurm() -> int:
    """Stop and remove the emulated Slurm clusters whose driver is gone (how many), and stale hosts files."""
    cleaned = 0
    for root in Path(tempfile.gettempdir()).glob(f"{STATE_PREFIX}*"):
        match = STATE_NAME.match(root.name)
        if match and not pid_alive(int(match.group(1))):
            stop_pids(sorted(root.glob("*.pid")))
            shutil.rmtree(root, ignore_errors=True)
            cleaned += 1
    if NETNS_ETC.is_dir():
        live = set(namespaces())
        for folder in NETNS_ETC.glob("arb-*"):
            match = NAME.match(folder.name)  # a live driver may write them before `ip netns list` lists it
            if folder.name not in live and not (match and pid_alive(int(match.group(1)))):
                shutil.rmtree(folder, ignore_errors=True)
    return cleaned


@contextmanager
def slurm_cluster(nodes: int, rate_bps: float, latency_s: float = 0.0,
                  host_rates: dict[int, float] | None = None, cpus: int = 8,
                  slurmd_timeout_s: int = 300) -> Iterator[EmulatedSlurm]:
    """An emulated cluster of `nodes` hosts, links shaped, as a running Slurm cluster; removed on leaving."""
    check_can_emulate()
    reason = slurm_missing()
    if reason:
        raise UsageError(f"emulate --slurm: {reason}")
    remove_namespaces(stale_namespaces())
    stale_slurm()
    with EmulatedCluster(nodes, 1, switch=True) as cluster:
        cluster.shape(rate_bps, latency_s, host_rates)
        with EmulatedSlurm(cluster, cpus, slurmd_timeout_s) as slurm:
            yield slurm
