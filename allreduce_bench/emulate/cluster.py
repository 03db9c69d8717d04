"""The emulated cluster: M hosts made of network namespaces joined by veths, each host's uplink shaped
with tc; nothing is made outside the namespaces, whose names carry the driver's pid (doc/emulation.md)."""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from allreduce_bench.core.environment import EMULATION_ENV
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host.processes import send
from allreduce_bench.emulate import rates
from allreduce_bench.emulate.faults import cgroup_mounts
from allreduce_bench.emulate.processes import die_with_parent, namespace_pids, run_on_hosts

PREFIX = "arb-"  # every namespace this project makes, and nothing else, starts with it
NAME = re.compile(r"^arb-(\d+)-[0-9a-f]+-(h\d+|sw)$")
SUBNET = "10.231.0"  # only ever configured inside our own namespaces
RDZV_PORT = 29500  # host 0's namespace is fresh, so the port is free
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


@dataclass(frozen=True)
class Emulation:
    """The emulated cluster's parameters, as stored in meta.json."""

    nodes: int
    ranks_per_node: int
    inter_rate_bps: float  # bits/s out of each host
    inter_latency_s: float = 0.0
    intra_p2p_GBps: float | None = None  # measured before shaping, when the rate is 'auto'
    inter_ratio: float | None = None  # intra p2p / inter rate asked for, when 'auto'
    backward_s: float | None = None  # ddp's backward pass measured before shaping ('auto', ddp)
    comm_per_backward: float | None = None  # AllReduce time / backward of the first candidate rate
    calibration: dict | None = None  # ddp's: how the rate was chosen (emulate/pacing.py)

    @property
    def label(self) -> str:
        delay = f"+{self.inter_latency_s * 1e3:g}ms" if self.inter_latency_s else ""
        return f"{self.nodes}x{self.ranks_per_node}@{rates.format_tc_rate(self.inter_rate_bps)}{delay}"

    @property
    def inter_GBps(self) -> float:
        return self.inter_rate_bps / 8e9

    def as_meta(self) -> dict:
        fields = {k: v for k, v in asdict(self).items() if k != "calibration" or v}
        return {**fields, "label": self.label, "inter_GBps": self.inter_GBps,
                "subnet": f"{SUBNET}.0/24", "shaping": "tbf on each host's uplink" +
                (" + netem delay" if self.inter_latency_s else "")}


def _effective_caps() -> int | None:
    """This process's effective capabilities (a bit per capability); None where unreadable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return None


def check_can_emulate() -> None:
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"emulate needs {' and '.join(missing)} (iproute2, util-linux) to build "
                         "namespaces and shape links; install them, or measure on a real cluster")
    caps = _effective_caps()  # root in a container can lack them: the same words for everyone
    if not (os.geteuid() == 0 if caps is None else caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1):
        raise UsageError("emulate needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network "
                         "namespaces; run it with sudo -E (a container must grant them: docker run "
                         "--privileged), or measure on a real cluster")


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode:
        reason = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}")
        raise UsageError(f"emulate could not run `{shlex.join(args)}`: {reason.splitlines()[-1]}")
    return done


def namespaces() -> list[str]:
    listing = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def pid_alive(pid: int) -> bool:
    return psutil.pid_exists(pid)


def remove_namespaces(names: list[str]) -> None:
    """Stop every process left inside, then delete: their veths and qdiscs go with them."""
    for name in names:  # our own ranks, left behind in our namespace
        send(map(int, namespace_pids(name)), signal.SIGKILL)
    for name in names:
        for attempt in range(20):
            if _sh("ip", "netns", "del", name, check=False).returncode == 0 or name not in namespaces():
                break
            time.sleep(0.1 * (attempt + 1))  # a process may still hold it for a moment


def stale_namespaces() -> list[str]:
    """Our namespaces whose driver process is gone (killed, crashed machine)."""
    return [name for name in namespaces() if (match := NAME.match(name)) and not pid_alive(int(match.group(1)))]


class EmulatedCluster:
    """M hosts (namespaces), their links and shaping; a context manager that always cleans up."""

    def __init__(self, nodes: int, ranks_per_node: int, switch: bool = False):
        """`switch`: a bridge even for 2 hosts (emulate/slurm.py plugs the root namespace in)."""
        self.nodes, self.ranks_per_node = nodes, ranks_per_node
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.hosts = [f"{PREFIX}{self.token}-h{i}" for i in range(nodes)]
        self.switch = f"{PREFIX}{self.token}-sw" if nodes > 2 or switch else None
        self.latency_s = 0.0
        self.created: list[str] = []

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def __enter__(self) -> EmulatedCluster:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        remove_namespaces(self.created)
        self.created = [n for n in self.created if n in namespaces()]

    def _add_namespace(self, name: str) -> None:
        _sh("ip", "netns", "add", name)
        self.created.append(name)
        _sh("ip", "-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        for name in self.hosts + ([self.switch] if self.switch else []):
            self._add_namespace(name)
        if self.switch is None:  # two hosts: one cable
            _sh("ip", "-n", self.hosts[0], "link", "add", "node0", "type", "veth", "peer", "name",
                "node1", "netns", self.hosts[1])
        else:
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for i, host in enumerate(self.hosts):
                _sh("ip", "-n", self.switch, "link", "add", f"port{i}", "type", "veth", "peer",
                    "name", f"node{i}", "netns", host)
                _sh("ip", "-n", self.switch, "link", "set", f"port{i}", "master", "br0", "up")
        for i, host in enumerate(self.hosts):
            _sh("ip", "-n", host, "addr", "add", f"{self.address(i)}/24", "dev", f"node{i}")
            _sh("ip", "-n", host, "link", "set", f"node{i}", "up")

    def shape(self, rate_bps: float, latency_s: float, host_rates: dict[int, float] | None = None) -> None:
        """Rate-limit (and delay) each host's uplink anew; `host_rates` gives some hosts another rate."""
        self.latency_s = latency_s
        for i in range(self.nodes):
            self.set_host_rate(i, (host_rates or {}).get(i, rate_bps))

    def set_host_rate(self, i: int, rate_bps: float) -> None:
        """Host i's link at another rate from now on (its qdiscs replaced; the delay kept)."""
        host, dev, latency_s = self.hosts[i], f"node{i}", self.latency_s
        _sh("tc", "-n", host, "qdisc", "del", "dev", dev, "root", check=False)
        rate = f"{int(rate_bps)}bit"
        # tbf needs a bucket of at least one packet (64K with GSO); 10 ms of traffic beyond that.
        burst = f"{max(256 * 1024, int(rate_bps / 8 / 100))}b"
        parent = ["root"]
        if latency_s:
            done = _sh("tc", "-n", host, "qdisc", "add", "dev", dev, "root", "handle", "1:",
                       "netem", "delay", f"{latency_s * 1e6:.0f}us", check=False)
            if done.returncode:
                raise UsageError("--inter-latency needs the netem qdisc, which this kernel "
                                 f"does not have ({done.stderr.strip() or 'tc failed'}); "
                                 "omit --inter-latency (the rate limit works without it)")
            parent = ["parent", "1:", "handle", "2:"]
        _sh("tc", "-n", host, "qdisc", "add", "dev", dev, *parent, "tbf", "rate", rate,
            "burst", burst, "latency", "100ms")

    def host_env(self, i: int, emulation: Emulation) -> dict:
        env = dict(os.environ)
        env.update(GLOO_SOCKET_IFNAME=f"node{i}", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
                   **{EMULATION_ENV: json.dumps({"label": emulation.label,
                                                 "link_peaks": {"inter_GBps": emulation.inter_GBps}})})
        # the hosts' names in node-rank order, as Slurm gives them (health/benchmark.py `_nodelist`)
        env["ALLREDUCE_BENCH_NODELIST"] = ",".join(f"node{n}" for n in range(self.nodes))
        # c10d warns on every connection that 10.231.0.x has no host name; real errors remain
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT"):
            env.pop(name, None)  # torchrun inside sets them; never inherit an outer launcher's
        return env

    def torchrun(self, i: int, module_args: list[str], cgroup_procs: str | None = None,
                 module: str = "allreduce_bench") -> list[str]:
        """Host i's launch, a static rendezvous on host 0's address (--node-rank honoured), as node<i>;
        a CPU-limited host joins its cgroup first, outside the namespace, whose sysfs has no cgroups."""
        join = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', cgroup_procs] if cgroup_procs else []
        return [*join, *on_host(self.hosts[i], f"node{i}"), sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(self.nodes), "--node-rank", str(i),
                "--nproc-per-node", str(self.ranks_per_node),
                "--master-addr", self.address(0), "--master-port", str(RDZV_PORT),
                "--local-addr", self.address(i), "--max-restarts", "0", "--monitor-interval", "0.2",
                "-m", module, *module_args]

    def _probe(self, args: list[str], key: str, what: str) -> float:
        """Run `python -m allreduce_bench.emulate.probe ARGS` in host 0 (before any shaping)."""
        env = self.host_env(0, Emulation(self.nodes, self.ranks_per_node, 0))
        env.pop(EMULATION_ENV)
        done = subprocess.run(["ip", "netns", "exec", self.hosts[0], sys.executable, "-m",
                               "allreduce_bench.emulate.probe", *args],
                              env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=die_with_parent)
        found = re.search(key + r"=([0-9.eE+-]+)", done.stdout)
        if done.returncode or not found:
            raise UsageError(f"emulate could not measure {what} "
                             f"({(done.stderr.strip() or 'no output').splitlines()[-1]}); give "
                             "--inter-bandwidth explicitly, e.g. 500mbit")
        return float(found.group(1))

    def probe_intra_p2p(self, size_bytes: int = 16 << 20) -> float:
        """GB/s of a gloo send between two ranks on host 0: the intra-node path, measured."""
        return self._probe([str(size_bytes)], "intra_p2p_GBps",
                           "the intra-node point-to-point bandwidth")

    def probe_ddp(self, settings, rate_bps: float, cgroup_procs) -> dict:
        """emulate/probe.py `ddp` on every host as `ddp` will run there, the link shaped to `rate_bps` already."""
        with tempfile.TemporaryDirectory(prefix="allreduce-bench-probe-") as tmp:
            out = Path(tmp) / "probe.json"
            code = run_on_hosts(self, ["ddp", str(out), str(settings.params), str(settings.layers),
                                       str(settings.batch_size), str(settings.gradient_bytes)],
                                Emulation(self.nodes, self.ranks_per_node, rate_bps), cgroup_procs,
                                module="allreduce_bench.emulate.probe")
            if code or not out.exists():
                raise UsageError(f"emulate could not probe ddp's AllReduce at "
                                 f"{rates.format_tc_rate(rate_bps)} (exit code {code}); give "
                                 "--inter-bandwidth explicitly, e.g. 2gbit")
            return json.loads(out.read_text())

    def probe_backward(self, settings) -> float:
        """Seconds of one backward pass of ddp's model, every emulated rank computing at once, as they will."""
        ranks = self.nodes * self.ranks_per_node
        return self._probe(["backward", str(ranks), str(settings.params), str(settings.layers),
                            str(settings.batch_size)], "backward_s", "ddp's backward pass")


def on_host(namespace: str, hostname: str) -> list[str]:
    """The prefix that runs a command on an emulated host: its namespace, its hostname, and the machine's
    cgroups at /sys/fs/cgroup (`ip netns exec` mounts a sysfs without them)."""
    mounts = cgroup_mounts()
    visible = f"{{ {mounts}; }} 2>/dev/null; " if mounts else ""
    return ["ip", "netns", "exec", namespace, "unshare", "--uts", "sh", "-c",
            f'{visible}hostname {hostname} && exec "$@"', "sh"]
