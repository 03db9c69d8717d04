"""`allreduce-bench ddp`: DDP's bucketed overlap, no_sync and set_epoch, measured."""
from __future__ import annotations

import sys

import click

from allreduce_bench.core.cli.options import command_hooks, measuring_options


@click.command()
@click.option("--params", default="10M", show_default=True,
              help="Parameters of the synthetic model (decimal K/M/B suffixes), e.g. 50M.")
@click.option("--layers", type=int, default=8, show_default=True,
              help="Square linear layers the parameters are spread over.")
@click.option("--batch-size", type=int, help="Samples per rank per (micro-)batch. [16 on CPU, 256 on GPU]")
@click.option("--bucket-mb", default="1,5,25,100", show_default=True,
              help="Comma-separated DDP bucket caps (bucket_cap_mb, MiB) to measure.")
@click.option("--accum", type=int, default=4, show_default=True,
              help="Micro-batches per optimizer step for the no_sync comparison.")
@click.option("--iters", type=int, help="Timed steps per measurement. [5 on CPU, 20 on GPU]")
@click.option("--warmup", type=int, help="Untimed steps before timing. [1 on CPU, 5 on GPU]")
@measuring_options("results/<UTC timestamp>-ddp[-<tag>]")
def ddp(**options):
    """Train a synthetic model with real DDP: bucketed overlap, no_sync, set_epoch.

    \b
    Per world size: compute alone (no DDP), AllReduce alone of DDP's buckets, the DDP step
    and the wait-then-AllReduce step (backward, one AllReduce of all gradients, optimizer)
    for each --bucket-mb, with a measured timeline of each bucket's AllReduce against
    backward; then K micro-batches per optimizer step syncing every time vs no_sync(), with
    AllReduce calls and bytes counted by a DDP communication hook; and the DistributedSampler
    index order with and without set_epoch. Writes benchmark=ddp rows to results.csv,
    ddp_timeline.csv, meta.json and plots/ddp_*.png; exits 1 if DDP's gradients were wrong.
    On an emulated cluster: `allreduce-bench emulate --benchmarks ddp`.
    """
    from allreduce_bench.core.cli.finish import measure_then_finish
    from allreduce_bench.core.config.launch import from_params
    from allreduce_bench.core.environment import how_started
    from allreduce_bench.core.launch.local import announce
    from allreduce_bench.core.measure.context import Run
    from allreduce_bench.core.measure.device import this_host
    from allreduce_bench.ddp.benchmark import BENCHMARK
    from allreduce_bench.ddp.config import DdpOptions, ddp_config
    from allreduce_bench.ddp.finish import finish_ddp

    config = ddp_config(from_params(DdpOptions, options), how_started(), this_host())
    settings = config.settings
    announce(f"allreduce-bench ddp: backend {config.launch.backend} on {config.launch.device}, world sizes "
             f"{','.join(map(str, config.launch.world_sizes))}, {settings.params:,} parameters, bucket caps "
             f"{','.join(f'{b:g}' for b in settings.bucket_mbs)} MiB, K={settings.accum} -> {config.launch.out_dir}")
    sys.exit(measure_then_finish(Run(config, BENCHMARK, command_hooks()), finish_ddp))
