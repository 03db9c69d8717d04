"""`allreduce-bench health`: options, the dry-run plan and the driver; the measuring is in
benchmarks/health.py and the decisions in analysis/health/ (imported when needed)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from allreduce_bench.errors import UsageError

HELP = """Find the bad host, rail (NIC) or link of a cluster in a few rounds.

\b
Checks, each on all hosts at once (disjoint sub-groups of the one world):
  intra  each host's local ranks AllReduce among themselves (>= 2 ranks per host)
  pairs  hosts in disjoint pairs: every rail (local rank i with local rank i) at
         once, then the whole pair; --pairs quick (default) re-pairs the members of
         a slow pair with known-good hosts; --pairs all measures every pair
  bisect (--bisect) the world, then its halves side by side, into the slower half
Verdicts per host, rail and pair (ok, slow, bad, unreachable) against --expect,
--baseline or, by default, the fleet's own median and MAD. Writes health.json,
rows and samples, plots/health.png, report.md, optionally --prometheus FILE, and
ends with a ready --exclude=... for Slurm.
\b
Exit codes: 0 all healthy, 3 something unhealthy, 2 bad input, 1 the check could
not complete. `--dry-run --hosts N` prints the rounds and an estimated wall time.
Runs under torchrun / srun / mpirun (one process per GPU), on the emulated cluster
(`emulate --benchmarks health`), or locally with --hosts N simulated hosts."""

HEALTH_OPTIONS = [
    click.Option(["--hosts"], type=int, help="Local run: simulate this many hosts of --ranks-per-node "
                 "ranks on loopback; with --dry-run: the cluster to plan for. [2]"),
    click.Option(["--pairs"], default="quick", show_default=True,
                 help="quick: one matching, then re-pair the slow with known-good hosts; all: every pair."),
    click.Option(["--bisect"], is_flag=True, help="Also bisect the world for slowness that shows only at scale."),
    click.Option(["--expect"], help="Absolute busbw thresholds, e.g. inter=40GB/s,intra=300GB/s "
                 "(at the largest size). Default: the fleet's median and MAD."),
    click.Option(["--baseline"], type=click.Path(path_type=Path),
                 help="The output directory of an earlier health run: its thresholds."),
    click.Option(["--prometheus"], type=click.Path(path_type=Path),
                 help="Also write gauges per host and rail to FILE (node_exporter's textfile format)."),
    click.Option(["--dry-run"], is_flag=True, help="Print the rounds and estimated wall time; start nothing."),
]
DROPPED = ("algos", "resume_dir", "world_sizes", "iters", "quick")


def health_config(options: dict):
    """The validated HealthConfig; under a launcher the world is the launcher's."""
    from dataclasses import asdict

    from allreduce_bench.config import RunConfig
    from allreduce_bench.config.health import CPU_SIZES, GPU_SIZES, HealthConfig, health_settings, parse_pairs
    from allreduce_bench.config.options import run_config
    from allreduce_bench.launch.environments import launcher_env

    settings = {k: options.pop(k) for k in ("pairs", "bisect", "expect", "baseline", "prometheus")}
    parse_pairs(settings["pairs"])
    hosts = options.pop("hosts")
    env = launcher_env()
    L = options["ranks_per_node"] or (env.local_world_size if env else 1)
    if hosts is not None and hosts < 1:
        raise UsageError(f"--hosts must be at least 1, got {hosts}")
    world = None if env else str((hosts or 2) * L)
    given = options["sizes"] or options["min_bytes"] or options["max_bytes"] or options["factor"]
    base = run_config(command=shlex.join(sys.argv), algos="native", world_sizes=world, quick=False,
                      **{**options, "ranks_per_node": L})
    if not given:
        base = RunConfig(**{**asdict_shallow(base), "sizes": GPU_SIZES if base.device == "cuda" else CPU_SIZES})
    return HealthConfig(**asdict_shallow(base), settings=health_settings(
        **settings, ranks_per_node=L, sizes=base.sizes)), hosts, asdict


def asdict_shallow(config) -> dict:
    from dataclasses import fields

    return {f.name: getattr(config, f.name) for f in fields(config)}


def health_finish(config) -> int:
    """After the rounds: the summary, figure and report from health.json; the exit code."""
    from allreduce_bench.analysis.health.outputs import summary, write_prometheus
    from allreduce_bench.results.health import HEALTH_FILE, read_health

    path = Path(config.out_dir) / HEALTH_FILE
    if not path.exists():
        click.echo(f"allreduce-bench health: the check did not complete: no {path}", err=True)
        return 1
    doc = read_health(config.out_dir, "health")
    click.echo("\n" + summary(doc))
    if config.settings.prometheus:
        write_prometheus(Path(config.settings.prometheus), doc)
    if config.plot:
        from allreduce_bench.analysis.health.plots import draw_health, report_section
        figure = draw_health(doc, Path(config.out_dir) / "plots")
        report = Path(config.out_dir) / "report.md"
        report.write_text(report_section(doc, figure, Path(config.out_dir)))
        click.echo(f"figure: {figure}\nreport: {report}")
    click.echo(f"health: {path}")
    if not doc.get("complete"):
        click.echo("allreduce-bench health: the check did not complete; health.json holds the "
                   "rounds measured", err=True)
        return 1
    return int(doc["exit_code"])


def dry_run(config, hosts: int | None) -> int:
    from allreduce_bench.analysis.health.plan import costs, describe, plan

    if hosts is None:
        raise UsageError("--dry-run needs --hosts N: the number of hosts to plan for")
    L = config.ranks_per_node or 1
    cost = costs(config.device, config.settings.expect)
    planned = plan(hosts, L, config.settings.pairs, config.settings.bisect, config.sizes, config.sampling, cost)
    click.echo(describe(planned, hosts, L, cost))
    return 0


def run_health(config) -> int:
    from allreduce_bench.benchmarks.health import health_rank_main
    from allreduce_bench.launch.driver import drive
    from allreduce_bench.launch.environments import launcher_env
    from allreduce_bench.measure import meta as run_meta
    from allreduce_bench.results.store import start_meta

    def before(config) -> None:
        if launcher_env() is None:
            start_meta(config.out_dir, run_meta.host_meta(config))

    return drive(config, health_rank_main, health_finish, None, before=before)


def health_command(run_command: click.Command) -> click.Command:
    def callback(**options):
        from allreduce_bench.launch.environments import announce

        dry = options.pop("dry_run")
        config, hosts, _ = health_config(options)
        if dry:
            sys.exit(dry_run(config, hosts))
        announce(f"allreduce-bench health: backend {config.backend} on {config.device}, "
                 f"pairs {config.settings.pairs} -> {config.out_dir}")
        sys.exit(run_health(config))

    return click.Command("health", callback=callback, help=HELP,
                         short_help="Find the bad host, NIC or link in a few rounds (exit 3 if any).",
                         params=[p for p in run_command.params if p.name not in DROPPED] + HEALTH_OPTIONS)
