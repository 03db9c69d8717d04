"""`allreduce-bench emulate`: validate everything up front, then run the features' `Runnable`s on an
emulated cluster, each host a real `torchrun --nnodes M --node-rank i` launch as on a cluster."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import click
from click.core import ParameterSource

from allreduce_bench.core import units
from allreduce_bench.core.cli.options import command_hooks, with_options
from allreduce_bench.core.config import default_out_dir
from allreduce_bench.core.config.checks import OUTPUT_PATH, check_finite
from allreduce_bench.core.config.launch import from_params
from allreduce_bench.core.config.resume_checks import note_earlier_runs
from allreduce_bench.core.environment import RankEnv, Started
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import Runnable
from allreduce_bench.emulate import rates
from allreduce_bench.emulate.pacing import CPU_SHARE, DDP_RANKS_PER_NODE

NVLINK_OVER_IB = 36  # the seed's 900 GB/s NVLink vs 25 GB/s InfiniBand


def _options(command: click.Command) -> dict[str, bool]:
    """Option name -> whether it takes a value, for every option `command` declares."""
    found = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                found[name] = not (param.is_flag or param.count)
    return found


def split_args(commands: dict[str, click.Command], args: list[str]) -> dict[str, list[str]]:
    """The forwarded options each benchmark's command declares; one none of them knows is a usage error."""
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


def benchmark_args(runnable: Runnable, args: list[str]) -> list[str]:
    """One benchmark's options: its defaults for those not given, less those it never gets."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in runnable.without:
            skip = True
        elif arg.split("=", 1)[0] not in runnable.without:
            kept.append(arg)
    given = {a.split("=", 1)[0] for a in kept}
    return [*(x for option, value in runnable.defaults if option not in given
              for x in (option, value)), *kept]


def _command(name: str) -> click.Command:
    ctx = click.get_current_context()
    command = cast(click.Group, ctx.find_root().command).get_command(ctx, name)
    assert command is not None  # every Runnable names a command of the root
    return command


def per_benchmark_args(chosen: dict[str, Runnable], args: list[str]) -> dict[str, list[str]]:
    """benchmark -> the options its command gets on every host."""
    split = split_args({b: _command(r.command) for b, r in chosen.items()}, args)
    return {b: benchmark_args(chosen[b], a) for b, a in split.items()}


def check_benchmark_args(forwarded: dict[str, list[str]], chosen: dict[str, Runnable],
                         nodes: int, ranks_per_node: int) -> dict:
    """Each benchmark's config, parsed as each host's command will, so bad input is one line, not one per rank."""
    from allreduce_bench.core.measure.device import this_host  # torch: this machine's GPUs

    as_rank0 = Started(RankEnv(0, nodes * ranks_per_node, 0, ranks_per_node, "torchrun"),
                       "validating")  # how each host's rank 0 will be started
    configs, host = {}, this_host()
    for benchmark, args in forwarded.items():
        name = chosen[benchmark].command
        command = _command(name)
        with command.make_context(name, list(args)) as ctx:
            config = chosen[benchmark].config(ctx.params, as_rank0, host, command_hooks())
        if config.launch.backend != "gloo" or config.launch.device != "cpu":
            raise UsageError("emulate shapes TCP traffic between namespaces, which only gloo on CPU "
                             "uses (NCCL would take shared memory and bypass it); drop --backend/"
                             "--device")
        configs[benchmark] = config
    return configs


@dataclass(frozen=True)
class EmulateOptions:
    """`emulate`'s options, as click parsed them; `benchmark_args` go to each host's command."""

    nodes: int = 2
    ranks_per_node: int | None = None
    inter_bandwidth: str = "auto"
    inter_ratio: float = NVLINK_OVER_IB
    inter_latency: str = "0"
    benchmarks: str = "allreduce"
    host_bandwidth: tuple[str, ...] = ()
    host_cpu: tuple[str, ...] = ()
    out_dir: Path | None = None
    slurm: bool = False
    cleanup: bool = False
    benchmark_args: tuple[str, ...] = ()


def parse_links(options: EmulateOptions, ranks_per_node: int) -> tuple[float | None, float]:
    """(rate in bit/s or None for auto, latency in s) after checking the cluster's shape."""
    nodes = options.nodes
    if nodes < 2:
        raise UsageError(f"--nodes must be at least 2 to emulate inter-node links, got {nodes}")
    if not 1 <= ranks_per_node <= 64:
        raise UsageError(f"--ranks-per-node must be between 1 and 64, got {ranks_per_node}")
    if nodes > 200:
        raise UsageError(f"--nodes {nodes} is more than this emulation's subnet holds; use <= 200")
    check_finite(options.inter_ratio, "--inter-ratio")
    bandwidth = options.inter_bandwidth
    rate = None if bandwidth.strip().lower() == "auto" else rates.parse_tc_rate(bandwidth)
    latency = units.parse_seconds(options.inter_latency, "--inter-latency")
    if not 0 <= latency < 60:
        raise UsageError(f"--inter-latency must be between 0 and 60 s, got {options.inter_latency!r}")
    return rate, latency


def make_plan(options: EmulateOptions, ranks_per_node: int, chosen: dict[str, Runnable]):
    """Everything checked before any namespace exists: a Plan for emulate/session.py."""
    from allreduce_bench.emulate.faults import parse_host_cpu, parse_host_rates
    from allreduce_bench.emulate.session import Plan

    nodes, args = options.nodes, list(options.benchmark_args)
    rate, latency = parse_links(options, ranks_per_node)
    host_rates = parse_host_rates(options.host_bandwidth, nodes)
    host_cpu = parse_host_cpu(options.host_cpu, nodes)
    resumed = rates.resumed_dir(args)
    out_dir = options.out_dir
    if resumed is not None:
        out_dir = out_dir or resumed  # `--resume E` alone continues E; no other --out implied
        rate = rates.same_emulation(resumed, nodes, ranks_per_node, rate, latency)
    out_dir = out_dir or default_out_dir(f"emulated-{nodes}x{ranks_per_node}", claim=True)
    if resumed is None:
        note_earlier_runs(out_dir)  # once here; the benchmarks' own commands leave it to us
    forwarded = per_benchmark_args(chosen, args)
    configs = check_benchmark_args({b: [*a, "--out", str(out_dir)] for b, a in forwarded.items()}, chosen, nodes,
                                   ranks_per_node)
    return Plan(nodes, ranks_per_node, rate, latency, options.inter_ratio, forwarded, configs, out_dir,
                chosen, host_rates, host_cpu)


def slurm_cluster(options: EmulateOptions) -> int:
    """`emulate --slurm`: checked here, held by emulate/session.py."""
    from allreduce_bench.emulate.faults import parse_host_rates
    from allreduce_bench.emulate.session import hold_slurm

    given = [name for name, value in (("--host-cpu", options.host_cpu), ("--out", options.out_dir),
                                      ("benchmark options", options.benchmark_args)) if value]
    if given or click.get_current_context().get_parameter_source("benchmarks") is not ParameterSource.DEFAULT:
        raise UsageError(f"emulate --slurm holds a cluster for srun/sbatch and runs nothing itself; "
                         f"drop {', '.join(given) or '--benchmarks'} and give them to the command "
                         "you start with srun")
    rate, latency = parse_links(options, options.ranks_per_node or 1)
    cpus = max(8, options.ranks_per_node or 1)  # tasks per host Slurm may start
    return hold_slurm(options.nodes, rate, latency, options.inter_ratio,
                      parse_host_rates(options.host_bandwidth, options.nodes), cpus)


def clean_up() -> int:
    """`emulate --cleanup`: remove the namespaces of emulate runs that no longer exist."""
    from allreduce_bench.emulate.cluster import check_can_emulate, namespaces, remove_namespaces, stale_namespaces
    from allreduce_bench.emulate.slurm import stale_slurm

    check_can_emulate()
    stale = stale_namespaces()
    remove_namespaces(stale)
    left = [n for n in stale if n in namespaces()]
    clusters = stale_slurm()
    click.echo(f"emulate: removed {len(stale) - len(left)} stale namespace(s)"
               + (f" and the daemons of {clusters} emulated Slurm cluster(s)" if clusters else "")
               + (f"; could not remove {', '.join(left)}" if left else ""))
    return 1 if left else 0


BEFORE_BENCHMARKS = [
    click.option("--nodes", type=int, default=2, show_default=True, help="Emulated hosts."),
    click.option("--ranks-per-node", type=int,
                 help=f"Ranks per host. [2; {DDP_RANKS_PER_NODE} with --benchmarks ddp alone]"),
    click.option("--inter-bandwidth", default="auto", show_default=True,
                 help="Each host's outgoing inter-node rate in tc units (500mbit, 2gbit, 50mbps), or "
                      "auto: the intra-node point-to-point bandwidth measured here / --inter-ratio; "
                      "with --benchmarks ddp alone, calibrated on the hosts so DDP's AllReduce takes "
                      "the longer of backward + its CPU time and its CPU time / "
                      f"{CPU_SHARE:g}, that CPU time over the CPU a rank gets."),
    click.option("--inter-ratio", type=float, default=NVLINK_OVER_IB, show_default=True,
                 help="With auto: how many times slower inter-node is (900 GB/s NVLink / 25 GB/s IB)."),
    click.option("--inter-latency", default="0", show_default=True,
                 help="Added one-way inter-node delay, e.g. 2ms (needs the kernel's netem)."),
]
AFTER_BENCHMARKS = [
    click.option("--host-bandwidth", multiple=True, metavar="HOST=RATE",
                 help="A fault put in on purpose: this host's link at another rate than "
                      "--inter-bandwidth, e.g. node2=100mbit (repeatable)."),
    click.option("--host-cpu", multiple=True, metavar="HOST=SHARE",
                 help="A fault put in on purpose: this host's processes get this share of one CPU "
                      "(the cgroup cpu controller's quota), e.g. node2=25% (repeatable)."),
    click.option("--out", "out_dir", type=OUTPUT_PATH,
                 help="Output directory. [results/<UTC timestamp>-emulated-<M>x<L>]"),
    click.option("--slurm", is_flag=True,
                 help="Instead of running benchmarks: make the emulated hosts a Slurm cluster "
                      "(slurmd per host, slurmctld here), print what another shell sources to "
                      "use it (srun -N, sbatch, mpirun/mpiexec through an rsh agent), and hold "
                      "it until Ctrl-C. See cluster.md, \"Try it on an emulated cluster\"."),
    click.option("--cleanup", is_flag=True,
                 help="Only remove namespaces left by emulate runs that no longer exist, and exit."),
    click.argument("benchmark_args", nargs=-1, type=click.UNPROCESSED),
]


def emulate_command(runnables: tuple[Runnable, ...]) -> click.Command:
    """The `emulate` command, able to run the features' `runnables` (allreduce_bench/cli.py)."""
    registry = {runnable.name: runnable for runnable in runnables}
    benchmarks = click.option(
        "--benchmarks", default="allreduce", show_default=True,
        help="What to run on the emulated cluster: " + ", ".join(
            f"{name} (= `{runnable.command}`)" for name, runnable in registry.items()) +
        ", or several, comma-separated, one after the other on the same shaping. Each "
        "gets the forwarded options its command has.")

    @click.command("emulate", context_settings={"ignore_unknown_options": True,
                                                "allow_extra_args": True})
    @with_options([*BEFORE_BENCHMARKS, benchmarks, *AFTER_BENCHMARKS])
    def emulate(**options):
        """Emulate a multi-node cluster on this machine (root) and run the benchmark on it.

        \b
        Builds --nodes network namespaces joined by veth links, rate-limits each host's
        inter-node traffic with tc, and runs `torchrun --nnodes M --node-rank i ... run` in every
        namespace (gloo bound to that host's interface; traffic between ranks of one host stays
        on its loopback), each with its own hostname node0..node<M-1>. Other options (--sizes,
        --algos, --collectives, --in-place, --iters, --quick, --tag, --bind, --rounds, --params,
        --bucket-mb, --pairs, ...) are passed on to each benchmark's command that has them; a
        benchmark's own exit code (health: 0/3/1) is passed on. Everything is removed at the end,
        also on errors. Default: 2 hosts x 2 ranks, inter-node 1/36 of the intra-node p2p measured here,
        all four algorithms at world size 4. With --benchmarks ddp alone: 2 hosts x 1 rank, 24M
        parameters in 24 layers, batch 256, bucket caps 1,5,25,100 MiB, and a link at which DDP's
        AllReduce takes as long as the backward pass measured here, so the overlap shows.
        """
        sys.exit(run(registry, from_params(EmulateOptions, options)))

    return emulate


def run(registry: dict[str, Runnable], options: EmulateOptions) -> int:
    """What `emulate` does with its options; its exit code."""
    if options.cleanup:
        return clean_up()
    if options.slurm:
        return slurm_cluster(options)
    named = [b.strip() for b in options.benchmarks.split(",") if b.strip()]
    unknown = [b for b in named if b not in registry]
    if unknown or not named:
        raise UsageError(f"--benchmarks {options.benchmarks!r}: choose from {', '.join(registry)} "
                         "(comma-separated)")
    chosen = {b: registry[b] for b in named}
    ranks_per_node = options.ranks_per_node
    if ranks_per_node is None:
        ranks_per_node = DDP_RANKS_PER_NODE if list(chosen) == ["ddp"] else 2
    plan = make_plan(options, ranks_per_node, chosen)
    from allreduce_bench.emulate.session import run_emulated
    return run_emulated(plan)
