"""`allreduce-bench emulate`: a multi-node cluster on one machine, made of network namespaces.

Each emulated host is a Linux network namespace with its loopback up and one interface,
`node<i>`, with address 10.231.0.<i+1>/24 (a subnet that exists only inside these namespaces).
Two hosts are joined by one veth pair; more hosts by veths to a bridge in a "switch" namespace.
Each host's outgoing traffic on `node<i>` is rate-limited with tc's `tbf` (plus `netem` delay
under --inter-latency where the kernel has netem): the inter-node link. Ranks of one host bind
gloo to `node<i>`, but traffic between two addresses of the same namespace is routed over its
loopback, so intra-node traffic stays fast and unshaped, as NVLink would be.

Every host runs a real multi-node launch, `torchrun --nnodes M --node-rank i` with its c10d
store on host 0's address (the static rendezvous, so host i holds ranks i*L..i*L+L-1), of the
ordinary `allreduce-bench run` (or `links`, `ddp`): the same path as on a cluster. Rank 0 writes the
output directory (the hosts share this filesystem).

Nothing is made outside these namespaces: veths are created directly inside them, so deleting
the namespaces removes every interface and qdisc. Names carry the driver's pid and a random
token (`arb-<pid>-<token>-h<i>`), so concurrent runs never collide, and a later run (or
`emulate --cleanup`) removes the namespaces of a driver that no longer exists, e.g. after
SIGKILL. On error, Ctrl-C or SIGTERM, the launched processes are stopped and everything removed.
"""
from __future__ import annotations

import ctypes
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

import click

from allreduce_bench import units
from allreduce_bench.config import default_out_dir
from allreduce_bench.config.checks import OUTPUT_PATH, check_finite
from allreduce_bench.errors import UsageError
from allreduce_bench.results.store import update_meta

PREFIX = "arb-"  # every namespace this project makes, and nothing else, starts with it
NAME = re.compile(r"^arb-(\d+)-[0-9a-f]+-(h\d+|sw)$")
EMULATION_ENV = "ALLREDUCE_BENCH_EMULATION"  # read by bench.make_row: the `emulation` column
SUBNET = "10.231.0"  # only ever configured inside our own namespaces
RDZV_PORT = 29500  # host 0's namespace is fresh, so the port is free
NVLINK_OVER_IB = 36  # the seed's 900 GB/s NVLink vs 25 GB/s InfiniBand
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21

# tc's own units: bit and byte rates
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
    comm_per_backward: float | None = None  # AllReduce time / backward the rate was set for

    @property
    def label(self) -> str:
        delay = f"+{self.inter_latency_s * 1e3:g}ms" if self.inter_latency_s else ""
        return f"{self.nodes}x{self.ranks_per_node}@{units.format_tc_rate(self.inter_rate_bps)}{delay}"

    @property
    def inter_GBps(self) -> float:
        return self.inter_rate_bps / 8e9

    def as_meta(self) -> dict:
        return {**asdict(self), "label": self.label, "inter_GBps": self.inter_GBps,
                "subnet": f"{SUBNET}.0/24", "shaping": "tbf on each host's uplink" +
                (" + netem delay" if self.inter_latency_s else "")}


# ---------------------------------------------------------------- privileges and commands

def _effective_caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def check_can_emulate() -> None:
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"emulate needs {' and '.join(missing)} (iproute2) to build namespaces "
                         "and shape links; install iproute2, or measure on a real cluster")
    caps = _effective_caps()
    if os.geteuid() != 0 and not (caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1):
        raise UsageError("emulate needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network "
                         "namespaces; run it with sudo -E, or measure on a real cluster")


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode:
        reason = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}")
        raise UsageError(f"emulate could not run `{shlex.join(args)}`: {reason.splitlines()[-1]}")
    return done


def namespaces() -> list[str]:
    listing = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_namespaces(names: list[str]) -> None:
    """Stop every process left inside, then delete: their veths and qdiscs go with them."""
    for name in names:
        for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)  # our own ranks, left behind in our namespace
            except (ProcessLookupError, ValueError):
                pass
    for name in names:
        for attempt in range(20):
            if _sh("ip", "netns", "del", name, check=False).returncode == 0 or name not in namespaces():
                break
            time.sleep(0.1 * (attempt + 1))  # a process may still hold it for a moment


def stale_namespaces() -> list[str]:
    """Our namespaces whose driver process is gone (killed, crashed machine)."""
    found = []
    for name in namespaces():
        match = NAME.match(name)
        if match and not _pid_alive(int(match.group(1))):
            found.append(name)
    return found


# ---------------------------------------------------------------- the cluster

class EmulatedCluster:
    """M hosts (namespaces), their links and shaping; a context manager that always cleans up."""

    def __init__(self, nodes: int, ranks_per_node: int):
        self.nodes, self.ranks_per_node = nodes, ranks_per_node
        self.token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.hosts = [f"{PREFIX}{self.token}-h{i}" for i in range(nodes)]
        self.switch = f"{PREFIX}{self.token}-sw" if nodes > 2 else None
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

    def __exit__(self, *exc) -> None:
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

    def shape(self, rate_bps: float, latency_s: float) -> None:
        """Rate-limit (and delay) each host's outgoing inter-node traffic."""
        rate = f"{int(rate_bps)}bit"
        # tbf needs a bucket of at least one packet (64K with GSO); 10 ms of traffic beyond that.
        burst = f"{max(256 * 1024, int(rate_bps / 8 / 100))}b"
        for i, host in enumerate(self.hosts):
            dev = f"node{i}"
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

    # ------------------------------------------------------------ launching

    def host_env(self, i: int, emulation: Emulation) -> dict:
        env = dict(os.environ)
        env.update(GLOO_SOCKET_IFNAME=f"node{i}", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
                   **{EMULATION_ENV: emulation.label})
        # c10d warns on every connection that 10.231.0.x has no host name; real errors remain
        env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT"):
            env.pop(name, None)  # torchrun inside sets them; never inherit an outer launcher's
        return env

    def torchrun(self, i: int, module_args: list[str]) -> list[str]:
        """Host i's launch: a static rendezvous, i.e. a c10d TCPStore on host 0's address, where
        --node-rank is honoured, so host i holds ranks i*L .. i*L+L-1 as on a cluster."""
        return ["ip", "netns", "exec", self.hosts[i], sys.executable, "-m", "torch.distributed.run",
                "--nnodes", str(self.nodes), "--node-rank", str(i),
                "--nproc-per-node", str(self.ranks_per_node),
                "--master-addr", self.address(0), "--master-port", str(RDZV_PORT),
                "--local-addr", self.address(i), "--max-restarts", "0", "--monitor-interval", "0.2",
                "-m", "allreduce_bench", *module_args]

    def run_on_hosts(self, module_args: list[str], emulation: Emulation) -> int:
        """Launch on every host at once; the first failure stops the others. Returns an exit code."""
        procs = []
        try:
            for i in range(self.nodes):
                procs.append(subprocess.Popen(self.torchrun(i, module_args),
                                              env=self.host_env(i, emulation),
                                              start_new_session=True, preexec_fn=_die_with_parent))
            while True:
                codes = [p.poll() for p in procs]
                failed = [c for c in codes if c not in (None, 0)]
                if failed:
                    return failed[0]
                if all(c == 0 for c in codes):
                    return 0
                time.sleep(0.2)
        except (KeyboardInterrupt, SystemExit):
            self.kill_quietly(procs)
            raise
        finally:
            _stop(procs)

    def kill_quietly(self, procs: list[subprocess.Popen]) -> None:
        """On Ctrl-C/SIGTERM stop every launch at once with SIGKILL (torchrun stopped by SIGTERM
        prints tracebacks). Rows are appended whole, so a killed writer leaves at most a torn
        last line that resume and every reader drop."""
        for p in procs:
            _signal_group(p, signal.SIGKILL)
        for name in self.hosts:  # the ranks run in sessions of their own, inside our namespaces
            for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for p in procs:
            p.wait()

    def _probe(self, args: list[str], key: str, what: str) -> float:
        """Run `python -m allreduce_bench.emulate.probe ARGS` in host 0 (before any shaping)."""
        env = self.host_env(0, Emulation(self.nodes, self.ranks_per_node, 0))
        env.pop(EMULATION_ENV)
        done = subprocess.run(["ip", "netns", "exec", self.hosts[0], sys.executable, "-m",
                               "allreduce_bench.emulate.probe", *args],
                              env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=_die_with_parent)
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

    def probe_backward(self, settings) -> float:
        """Seconds of one backward pass of ddp's model (DdpSettings), every emulated rank
        computing at once on this machine's cores, as they will."""
        ranks = self.nodes * self.ranks_per_node
        return self._probe(["backward", str(ranks), str(settings.params), str(settings.layers),
                            str(settings.batch_size)], "backward_s", "ddp's backward pass")


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the driver dies, even by SIGKILL (torchrun then stops its
    workers); prctl(PR_SET_PDEATHSIG) survives exec of non-setuid programs such as `ip`."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM each launch's process group (torchrun stops its workers), SIGKILL if it lingers."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def terminate_as_interrupt():
    """SIGTERM/SIGHUP leave through the same `finally` clean-up as Ctrl-C."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ---------------------------------------------------------------- the command

BENCHMARKS = {"allreduce": "run", "links": "links", "ddp": "ddp"}

# `emulate --benchmarks ddp` without these options: a model whose 96 MB of gradients DDP's
# default 25 MiB cap cuts into 4 buckets (24 layers of 4 MB), with a batch that makes backward
# take a few hundred ms on a small CPU machine; with --inter-bandwidth auto the link is then set
# from a backward pass measured here, so that the AllReduce takes COMM_PER_BACKWARD x as long.
# Equal is the middle of the range where the overlap shows: by the bucket-pipeline model
# (analysis/ddp.py), background load that halves or doubles the compute between this probe and
# the run should still leave about half of the AllReduce or more hidden.
DDP_DEFAULTS = {"--params": "24M", "--layers": "24", "--batch-size": "256"}
COMM_PER_BACKWARD = 1.0
DDP_RANKS_PER_NODE = 1  # one rank per host: the CPU cores compute, the link communicates


def ddp_rate_bps(settings, nodes: int, ranks_per_node: int, backward_s: float) -> float:
    """The uplink rate at which ddp's AllReduce takes COMM_PER_BACKWARD x `backward_s`: a ring
    over N ranks sends 2(N-1)/N of the gradients through each host's uplink."""
    from allreduce_bench.benchmarks.ddp import layer_width  # torch: only when emulating ddp
    width = layer_width(settings.params, settings.layers)
    gradient_bytes = 4 * settings.layers * (width * width + width)
    world = nodes * ranks_per_node
    return 2 * (world - 1) / world * gradient_bytes * 8 / (COMM_PER_BACKWARD * backward_s)


def _options(command: click.Command) -> dict[str, bool]:
    """Option name -> whether it takes a value, for every option `command` declares."""
    found = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                found[name] = not (param.is_flag or param.count)
    return found


def split_args(commands: dict[str, click.Command], args: list[str]) -> dict[str, list[str]]:
    """The forwarded options each benchmark's command declares, e.g. --sizes for run and links
    but not ddp, --params for ddp only; an option none of them knows is a usage error."""
    known = {name: _options(command) for name, command in commands.items()}
    out: dict[str, list[str]] = {name: [] for name in commands}
    i = 0
    while i < len(args):
        arg = args[i]
        name, has_value = arg.split("=", 1)[0], "=" in arg
        takers = [b for b, options in known.items() if name in options]
        if not arg.startswith("-") or not takers:
            raise UsageError(f"no such option {arg!r} for {', '.join(commands)}; see "
                             f"`allreduce-bench {next(iter(commands.values())).name} --help`")
        takes_value = not has_value and any(known[b][name] for b in takers)
        if takes_value and i + 1 >= len(args):
            raise UsageError(f"option {name} needs a value")
        for b in takers:
            out[b] += [arg, args[i + 1]] if takes_value else [arg]
        i += 2 if takes_value else 1
    return out


def benchmark_args(benchmark: str, args: list[str]) -> list[str]:
    """The options for one benchmark: `links` has no --algos (it always uses the backend's)."""
    if benchmark != "links":
        return list(args)
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--algos":
            skip = True
        elif not arg.startswith("--algos="):
            kept.append(arg)
    return kept


def with_ddp_defaults(args: list[str]) -> list[str]:
    """`ddp`'s options with DDP_DEFAULTS for those not given."""
    given = {a.split("=", 1)[0] for a in args}
    return [*(x for option, value in DDP_DEFAULTS.items() if option not in given
              for x in (option, value)), *args]


def per_benchmark_args(root: click.Group, benchmarks: list[str], args: list[str]) -> dict[str, list[str]]:
    """benchmark -> the options its command gets on every host."""
    ctx = click.get_current_context()
    commands = {b: root.get_command(ctx, BENCHMARKS[b]) for b in benchmarks}
    split = split_args(commands, args)
    if "ddp" in split:
        split["ddp"] = with_ddp_defaults(split["ddp"])
    return {b: benchmark_args(b, a) for b, a in split.items()}


@contextmanager
def _as_rank0(world_size: int, ranks_per_node: int):
    """The environment rank 0 of the emulated world will see, to validate options up front."""
    with mock.patch.dict(os.environ, RANK="0", WORLD_SIZE=str(world_size), LOCAL_RANK="0",
                         LOCAL_WORLD_SIZE=str(ranks_per_node), **{EMULATION_ENV: "validating"}):
        yield


def check_benchmark_args(root: click.Group, forwarded: dict[str, list[str]], nodes: int,
                         ranks_per_node: int) -> dict:
    """Parse and validate the forwarded options as each host's `run`/`links`/`ddp` will, before
    building anything, so bad input is one line here rather than one per rank. Returns each
    benchmark's config."""
    configs = {}
    from allreduce_bench.cli.ddp import ddp_config
    from allreduce_bench.config.options import run_config
    for benchmark, args in forwarded.items():
        name = BENCHMARKS[benchmark]
        command = root.get_command(click.get_current_context(), name)
        with command.make_context(name, list(args)) as ctx, _as_rank0(nodes * ranks_per_node,
                                                                      ranks_per_node):
            params = dict(ctx.params)
            if name == "links":
                params["algos"] = "native"
            config = ddp_config(**params) if name == "ddp" else run_config(**params)
        if config.backend != "gloo" or config.device != "cpu":
            raise UsageError("emulate shapes TCP traffic between namespaces, which only gloo on CPU "
                             "uses (NCCL would take shared memory and bypass it); drop --backend/"
                             "--device")
        configs[benchmark] = config
    return configs


def run_emulation(root: click.Group, nodes: int, ranks_per_node: int, inter_bandwidth: str,
                  inter_ratio: float, inter_latency: str, benchmarks: list[str], out_dir: Path | None,
                  args: list[str]) -> int:
    if nodes < 2:
        raise UsageError(f"--nodes must be at least 2 to emulate inter-node links, got {nodes}")
    if not 1 <= ranks_per_node <= 64:
        raise UsageError(f"--ranks-per-node must be between 1 and 64, got {ranks_per_node}")
    if nodes > 200:
        raise UsageError(f"--nodes {nodes} is more than this emulation's subnet holds; use <= 200")
    check_finite(inter_ratio, "--inter-ratio")
    rate = None if inter_bandwidth.strip().lower() == "auto" else units.parse_tc_rate(inter_bandwidth)
    latency = units.parse_seconds(inter_latency, "--inter-latency")
    if not 0 <= latency < 60:
        raise UsageError(f"--inter-latency must be between 0 and 60 s, got {inter_latency!r}")
    resumed = resumed_dir(args)
    if resumed is not None:
        out_dir = out_dir or resumed  # `--resume E` alone continues E; no other --out implied
        rate = same_emulation(resumed, nodes, ranks_per_node, rate, latency)
    claimed = out_dir is None
    out_dir = out_dir or default_out_dir(f"emulated-{nodes}x{ranks_per_node}", claim=True)
    forwarded = per_benchmark_args(root, benchmarks, args)
    try:
        configs = check_benchmark_args(
            root, {b: [*a, "--out", str(out_dir)] for b, a in forwarded.items()}, nodes,
            ranks_per_node)
    except UsageError:
        if claimed:
            shutil.rmtree(out_dir, ignore_errors=True)  # the empty directory claimed above
        raise
    check_can_emulate()
    stale = stale_namespaces()
    if stale:
        remove_namespaces(stale)
        click.echo(f"emulate: removed {len(stale)} namespace(s) left by an earlier run", err=True)

    out_dir = Path(out_dir).absolute()
    with terminate_as_interrupt(), EmulatedCluster(nodes, ranks_per_node) as cluster:
        measured = backward = None
        if rate is None and benchmarks == ["ddp"]:  # the link paced to ddp's backward pass
            backward = cluster.probe_backward(configs["ddp"].settings)
            rate = ddp_rate_bps(configs["ddp"].settings, nodes, ranks_per_node, backward)
        elif rate is None:
            measured = cluster.probe_intra_p2p()
            rate = measured * 8e9 / inter_ratio
        emulation = Emulation(nodes, ranks_per_node, rate, latency, measured,
                              inter_ratio if measured else None, backward,
                              COMM_PER_BACKWARD if backward else None)
        cluster.shape(rate, latency)
        click.echo(f"emulate: {nodes} hosts x {ranks_per_node} ranks in namespaces "
                   f"{cluster.hosts[0]}..; inter-node link {units.format_tc_rate(rate)}"
                   + (f" (1/{inter_ratio:g} of the {measured:.3f} GB/s measured intra-node p2p)"
                      if measured else "")
                   + (f" (DDP's AllReduce ~{COMM_PER_BACKWARD:g} x the {backward * 1e3:.0f} ms "
                      "backward pass measured here)" if backward else "")
                   + (f", +{latency * 1e3:g} ms" if latency else "") + f" -> {out_dir}", err=True)
        code = 0
        for benchmark in benchmarks:
            try:
                code = cluster.run_on_hosts([BENCHMARKS[benchmark], *forwarded[benchmark],
                                             "--out", str(out_dir)],
                                            emulation) or code
            except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or SIGTERM/SIGHUP
                code = stop.code if isinstance(stop, SystemExit) and isinstance(stop.code, int) \
                    else 130
                how = signal.Signals(code - 128).name if 128 < code < 160 else f"exit {code}"
                click.echo(f"emulate: interrupted ({how}); "
                           f"{_kept(out_dir)}", err=True)
                return code
            finally:
                if (out_dir / "meta.json").exists():
                    update_meta(out_dir, emulation={**emulation.as_meta(),
                                                    "command": shlex.join(sys.argv)})
        return code


def _kept(out_dir: Path) -> str:
    from allreduce_bench.launch.resume import count_rows

    if not (out_dir / "results.csv").exists():
        return f"no rows were written to {out_dir}"
    return (f"{count_rows(out_dir)} row(s) kept in {out_dir / 'results.csv'}; continue with "
            f"`allreduce-bench emulate --resume {out_dir}` and the same options")


def resumed_dir(args: list[str]) -> Path | None:
    """The --resume DIR among the options passed on to `run`, if any."""
    for i, arg in enumerate(args):
        if arg == "--resume" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--resume="):
            return Path(arg.split("=", 1)[1])
    return None


def same_emulation(resume_dir: Path, nodes: int, ranks_per_node: int, rate: float | None,
                   latency: float) -> float:
    """A resumed emulated run continues on the same links: refuse other ones; with auto, reuse
    the stored rate (a new measurement would differ a little and mix rows of two rates)."""
    from allreduce_bench.results.store import read_meta

    stored = read_meta(resume_dir).get("emulation")
    if not isinstance(stored, dict):
        raise UsageError(f"--resume {resume_dir} is not an emulated run (its meta.json has no "
                         "emulation); continue it with `allreduce-bench run --resume` instead")
    was = (stored.get("nodes"), stored.get("ranks_per_node"), stored.get("inter_rate_bps"),
           stored.get("inter_latency_s", 0.0))
    now = (nodes, ranks_per_node, was[2] if rate is None else rate, latency)
    if was != now:
        raise UsageError(f"--resume {resume_dir} was emulated as {stored.get('label', was)}; give "
                         f"the same --nodes {was[0]} --ranks-per-node {was[1]} --inter-bandwidth "
                         f"{units.format_tc_rate(was[2] or 0).lower()} --inter-latency "
                         f"{(was[3] or 0) * 1e3:g}ms, or write to a new --out")
    return was[2]


@click.command("emulate", context_settings={"ignore_unknown_options": True,
                                            "allow_extra_args": True})
@click.option("--nodes", type=int, default=2, show_default=True, help="Emulated hosts.")
@click.option("--ranks-per-node", type=int,
              help=f"Ranks per host. [2; {DDP_RANKS_PER_NODE} with --benchmarks ddp alone]")
@click.option("--inter-bandwidth", default="auto", show_default=True,
              help="Each host's outgoing inter-node rate in tc units (500mbit, 2gbit, 50mbps), or "
                   "auto: the intra-node point-to-point bandwidth measured here / --inter-ratio; "
                   "with --benchmarks ddp alone, the rate at which DDP's AllReduce takes "
                   f"{COMM_PER_BACKWARD:g} x the backward pass measured here.")
@click.option("--inter-ratio", type=float, default=NVLINK_OVER_IB, show_default=True,
              help="With auto: how many times slower inter-node is (900 GB/s NVLink / 25 GB/s IB).")
@click.option("--inter-latency", default="0", show_default=True,
              help="Added one-way inter-node delay, e.g. 2ms (needs the kernel's netem).")
@click.option("--benchmarks", default="allreduce", show_default=True,
              help="What to run on the emulated cluster: allreduce (= `run`), links, ddp, or "
                   "several (allreduce,links,ddp), one after the other on the same shaping. Each "
                   "gets the forwarded options its command has.")
@click.option("--out", "out_dir", type=OUTPUT_PATH,
              help="Output directory. [results/<UTC timestamp>-emulated-<M>x<L>]")
@click.option("--cleanup", is_flag=True,
              help="Only remove namespaces left by emulate runs that no longer exist, and exit.")
@click.argument("benchmark_args", nargs=-1, type=click.UNPROCESSED)
def emulate(nodes, ranks_per_node, inter_bandwidth, inter_ratio, inter_latency, benchmarks,
            out_dir, cleanup, benchmark_args):
    """Emulate a multi-node cluster on this machine (root) and run the benchmark on it.

    \b
    Builds --nodes network namespaces joined by veth links, rate-limits each host's
    inter-node traffic with tc, and runs `torchrun --nnodes M --node-rank i ... run` in every
    namespace (gloo bound to that host's interface; traffic between ranks of one host stays
    on its loopback). Other options (--sizes, --algos, --iters, --quick, --tag, --params,
    --bucket-mb, ...) are passed on to each benchmark's command that has them. Everything is
    removed at the end, also on errors.
    Default: 2 hosts x 2 ranks, inter-node 1/36 of the intra-node p2p measured here,
    all four algorithms at world size 4. With --benchmarks ddp alone: 2 hosts x 1 rank, 24M
    parameters in 24 layers, batch 256, bucket caps 1,5,25,100 MiB, and a link at which DDP's
    AllReduce takes as long as the backward pass measured here, so the overlap shows.
    """
    if cleanup:
        check_can_emulate()
        stale = stale_namespaces()
        remove_namespaces(stale)
        left = [n for n in stale if n in namespaces()]
        click.echo(f"emulate: removed {len(stale) - len(left)} stale namespace(s)"
                   + (f"; could not remove {', '.join(left)}" if left else ""))
        sys.exit(1 if left else 0)
    chosen = [b.strip() for b in benchmarks.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in BENCHMARKS]
    if unknown or not chosen:
        raise UsageError(f"--benchmarks {benchmarks!r}: choose from {', '.join(BENCHMARKS)} "
                         "(comma-separated)")
    chosen = list(dict.fromkeys(chosen))
    ddp_alone = chosen == ["ddp"]
    if ranks_per_node is None:
        ranks_per_node = DDP_RANKS_PER_NODE if ddp_alone else 2
    root = click.get_current_context().find_root().command
    sys.exit(run_emulation(root, nodes, ranks_per_node, inter_bandwidth, inter_ratio,
                           inter_latency, chosen, out_dir,
                           list(benchmark_args)))
