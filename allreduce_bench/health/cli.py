"""`allreduce-bench health`: options and the dry-run plan; the measuring is in
health/benchmark.py, the decisions in health/decide.py (imported when a run starts)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from allreduce_bench.core.cli.options import command_hooks, measuring_options, with_options
from allreduce_bench.core.cli.types import DTYPE
from allreduce_bench.core.environment import how_started
from allreduce_bench.core.errors import UsageError

health_options = with_options([
    click.option("--hosts", type=int, help="Local run: this many hosts of --ranks-per-node "
                 "ranks, simulated on loopback; with --dry-run: the cluster to plan. [2]"),
    click.option("--pairs", default="quick", show_default=True,
                 help="quick: one perfect matching, then each member of a slow pair with "
                 "known-good hosts; all: every pair (N-1 rounds) and the host x host matrix."),
    click.option("--bisect", is_flag=True, help="Then the world's AllReduce and its halves "
                 "side by side, into the slower half: slowness that shows only at scale."),
    click.option("--expect", help="Absolute busbw thresholds at the largest size, e.g. "
                 "inter=40GB/s,intra=300GB/s (inter: pairs and rails). [the fleet's median "
                 "and MAD]"),
    click.option("--baseline", type=click.Path(path_type=Path), help="An earlier health "
                 "run's directory: its expected values and tolerances."),
    click.option("--prometheus", type=click.Path(path_type=Path), help="Also write gauges "
                 "per host and rail to this file (node_exporter's textfile collector)."),
    click.option("--sizes", help="Per-rank sizes of every check. [4K,4M on CPU; 8K,256M on "
                 "GPU: a latency and a bandwidth size]"),
    click.option("--dtype", type=DTYPE, default="float32", show_default=True, help="Element type."),
    click.option("--samples", type=int, help="Samples per size. [as many as fit --budget]"),
    click.option("--budget", type=float, help="Seconds of samples per check and size. "
                 "[0.1 on CPU, 0.5 on GPU]"),
    click.option("--dry-run", is_flag=True, help="With --hosts N: print the rounds, the groups "
             "side by side and an estimated wall time; start nothing."),
])


def _plan(options: dict, hosts: int, L: int, device: str | None = None):
    """(the planned rounds, their Costs) of a check of `hosts` hosts of L ranks (on `device`:
    the options' by default)."""
    from allreduce_bench.health.config import health_sampling, health_sizes, parse_pairs
    from allreduce_bench.health.plan import costs, plan
    from allreduce_bench.health.reference import parse_expect

    device = device or _device(options)
    cost = costs(device, parse_expect(options["expect"]))
    return plan(hosts, L, parse_pairs(options["pairs"]), options["bisect"],
                health_sizes(options["sizes"], device),
                health_sampling(device, options["samples"], options["budget"]), cost), cost


def _device(options: dict) -> str:
    return options["device"] or ("cuda" if options["backend"] == "nccl" else "cpu")


def dry_run(options: dict) -> int:
    """The plan of `--hosts N [--ranks-per-node L] [--pairs ...] [--bisect]`, no process started."""
    from allreduce_bench.core.text import wrapped
    from allreduce_bench.health.plan import describe

    hosts, L = options["hosts"], options["ranks_per_node"] or 1
    if hosts is None or hosts < 1 or L < 1:
        raise UsageError("--dry-run needs --hosts N (>= 1) and, when not 1, --ranks-per-node L")
    planned, cost = _plan(options, hosts, L)
    text = describe(planned, hosts, L, cost)
    if options["device"] is None and _device(options) == "cpu":  # and on GPUs: what a cluster of many hosts has
        from allreduce_bench.health.plan import wall_time

        on_gpus, gpu_cost = _plan(options, hosts, L, "cuda")
        text += "\n" + wall_time(on_gpus, gpu_cost, "on GPUs (--device cuda, its sizes)")
    click.echo(wrapped(text))
    return 0


def estimate(options: dict, hosts: int, L: int) -> str:
    """'; 2 round(s) planned, ~17 s (...)': how long the check should take, said up front."""
    planned, cost = _plan(options, hosts, L)
    always = [r for r in planned if r.when == "always"]
    seconds = cost.start_s + sum(r.seconds for r in always)
    return (f"; {len(always)} round(s) planned ({len(planned)} at most), ~{seconds:.0f} s by "
            "`--dry-run`'s estimate (longer on a loaded machine)")


@click.command("health", short_help="Find the bad host, NIC or link in a few rounds (exit 3 if any).")
@health_options
@measuring_options()
def health(**options):
    """Find the bad host, rail (NIC) or link of a cluster in a few rounds.

    \b
    Checks, each on all hosts at once (disjoint sub-groups of the one world):
      intra   each host's local ranks AllReduce among themselves (>= 2 per host)
      pairs   hosts in disjoint pairs: every rail (local rank i with local rank i)
              at once, then the whole pair; --pairs quick re-pairs each member of a
              slow pair with known-good hosts, --pairs all measures every pair
      bisect  with --bisect: the world, then its halves, into the slower half
    Verdicts per host, rail and pair (ok, slow, bad, unreachable: silent for
    --timeout) against --expect, --baseline or the fleet's median and MAD. Writes
    health.json, rows and samples, plots/health.png, report.md, kubectl.sh (node
    labels and taints), --prometheus FILE, and ends with a ready --exclude=node[..] for Slurm.
    \b
    Exit codes: 0 all healthy, 3 something unhealthy, 2 bad input, 1 the check
    could not complete. Runs under torchrun / srun / mpirun (one process per GPU),
    on the emulated cluster (`emulate --benchmarks health`), or locally on --hosts
    simulated hosts. `--dry-run --hosts N` prints the plan and its wall time.
    """
    if options.pop("dry_run"):
        sys.exit(dry_run(options))
    from allreduce_bench.core.cli.finish import measure_then_finish
    from allreduce_bench.core.config.launch import from_params
    from allreduce_bench.core.launch.local import announce
    from allreduce_bench.core.measure.context import Run
    from allreduce_bench.core.measure.device import this_host
    from allreduce_bench.health.benchmark import BENCHMARK
    from allreduce_bench.health.config import HealthOptions, health_config
    from allreduce_bench.health.finish import finish_health

    how = how_started()
    config = health_config(from_params(HealthOptions, options), how, this_host())
    env = how.env
    L = config.launch.ranks_per_node or (env.local_world_size if env else 1)
    world = env.world_size if env else max(config.launch.world_sizes)
    announce(f"allreduce-bench health: backend {config.launch.backend} on {config.launch.device}, pairs "
             f"{config.settings.pairs}, sizes {','.join(map(str, config.sizes))} -> {config.launch.out_dir}"
             + estimate(options, world // L, L))
    sys.exit(measure_then_finish(Run(config, BENCHMARK, command_hooks()), finish_health))
