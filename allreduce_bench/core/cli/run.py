"""`allreduce-bench run`: the AllReduce sweep."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from allreduce_bench.core.algorithms import help_text as algorithms_help
from allreduce_bench.core.cli.floor import MIN_BUSBW_OPTION, checked_floor, judged
from allreduce_bench.core.cli.options import command_hooks, measuring_options
from allreduce_bench.core.cli.types import DTYPE
from allreduce_bench.core.config import EXTRA_BUDGET_S, ROUNDS
from allreduce_bench.core.config.checks import OUTPUT_PATH
from allreduce_bench.core.config.launch import POLICIES

if TYPE_CHECKING:
    from allreduce_bench.core.config import RunConfig
    from allreduce_bench.core.measure.context import Run


def sweep_options(command):
    """What `run` and `links` sweep and how each size is sampled."""
    for option in reversed([
        click.option("--sizes", help="Comma-separated per-rank tensor sizes, e.g. 1M,8M "
                     "(instead of a sweep). K/M/G/T and KiB/MiB/GiB are binary (16M = 16MiB = "
                     "16777216 B, as nccl-tests' -e 16M), KB/MB/GB decimal (16MB = 16000000 B); "
                     "each a whole number of --dtype elements. The first line says the bytes."),
        click.option("--min-bytes", help="Smallest size of the sweep, written as --sizes. "
                     "[4K on CPU, 1K on GPU]"),
        click.option("--max-bytes", help="Largest size of the sweep. [16M on CPU, 1G on GPU]"),
        click.option("--factor", type=float, help="Multiply the size by this each step (a "
                     "step's size is rounded down to whole elements). [4 on CPU, 2 on GPU]"),
        click.option("--dtype", type=DTYPE, default="float32", show_default=True,
                     help="Element type."),
        click.option("--loops", type=int, help="Back-to-back calls per sample. [calibrated per "
                     "size so a sample lasts >= 2 ms on CPU, 1 ms on GPU]"),
        click.option("--samples", type=int, help="Samples per size. [as many as fit --budget: "
                     "5-50 on CPU, 10-200 on GPU]"),
        click.option("--budget", type=float, help="Seconds of samples per algorithm and size (a "
                     "guide: at least the minimum samples are taken). [0.1 on CPU, 0.5 on GPU, "
                     "0.05 with --quick]"),
        click.option("--warmup", type=int, help="Untimed calls before calibrating. "
                     "[5 on GPU, 1 on CPU]"),
        click.option("--iters", type=int, hidden=True, help="Schema-1 name: N timed calls one at "
                     "a time, i.e. --samples N --loops 1."),
        click.option("--host-launch", is_flag=True, help="GPU: keep the host's launch time inside "
                     "the timed interval (no device-side spin before the start event)."),
        click.option("--quick", is_flag=True, help="A tiny sweep (4K and 256K, a few samples): "
                     "a smoke test."),
        click.option("--sched", type=click.Choice(POLICIES), default="auto", show_default=True,
                     help="How each rank's threads are scheduled. auto: on CPU, SCHED_FIFO "
                     "(real-time, priority 1): a woken gloo thread then runs at once instead of "
                     "waiting up to a scheduler tick, the slow state that puts 10-30% of the calls "
                     "of a busy VM at 2-6 ms (doc/noise.md); on GPU as started. fifo: ask for it on "
                     "GPU too. other: as started. Needs root or an RLIMIT_RTPRIO >= 1; without, the "
                     "ranks run as started and the summary says so. Recorded in meta.json."),
    ]):
        command = option(command)
    return command


def describe(config: RunConfig) -> str:
    """The algorithms of the run, per collective where there are others than AllReduce."""
    if not config.collectives:
        return ",".join(config.algorithms)
    plan = ((("all_reduce", config.algorithms),) if config.algorithms else ()) + config.collectives
    return "; ".join(f"{c} {','.join(names)}" + (" (out of place + in place)"
                                                  if len(config.halves(c)) > 1 else "")
                     for c, names in plan)


@click.command()
@click.option("--algos", help=algorithms_help() + " [AllReduce: native,ring,naive,hierarchical; "
              "other collectives: every algorithm of theirs]")
@click.option("--collectives", default="all_reduce", show_default=True,
              help="Comma-separated collectives, or all: all_reduce, all_gather, reduce_scatter, "
              "alltoall, broadcast, reduce, sendrecv (nccl-tests' names; sizes are the whole "
              "buffer, as nccl-tests prints them). Each named --algos must implement each.")
@click.option("--in-place", is_flag=True,
              help="Also measure the in-place half of AllGather and ReduceScatter (nccl-tests' "
              "in-place columns: AllGather's input is this rank's part of its output, "
              "ReduceScatter's output its part of the input), checked like the out-of-place "
              "half, in rows of benchmark all_gather-in-place / reduce_scatter-in-place. The "
              "decomposition AllReduce vs ReduceScatter + AllGather then compares the in-place "
              "halves, as the AllReduce is in place. AllReduce, Broadcast and Reduce are in place "
              "already; AllToAll and SendRecv have no in-place mode.")
@sweep_options
@measuring_options()
@click.option("--rounds", type=int, help="Passes over (algorithm, size), forward then backward, "
              "each with --budget / R; a row pools its rounds' samples and records how much their "
              "medians differ (`compare` judges runs by that). "
              f"[{ROUNDS}; 1 with --quick]")
@click.option("--extra-budget", type=float, help="Seconds of calls, over the whole run, for "
              "extra rounds of the rows still flagged unstable after --rounds: they are measured "
              "again, interleaved, until their median can be trusted to +-10% or this is spent (none "
              "with --samples, which is the total). "
              f"[{EXTRA_BUDGET_S:g}; 0 with --quick]")
@click.option("--resume", "resume_dir", type=OUTPUT_PATH,
              help="Continue the interrupted run in this directory: skip its finished rows, append "
              "the rest (same options as the original run).")
@MIN_BUSBW_OPTION
@click.option("--expect", is_flag=True, expose_value=False, callback=lambda ctx, _, on: ctx.meta.update(expect=on),
              help="First print what busbw to expect on this host (the `expect` command's line: link "
              "limit and closest published figure).")
def run(**options):
    """Measure AllReduce (or any collective) over a sweep of sizes and world sizes, check
    every result.

    \b
    Without a launcher, starts one local world of the largest world size (gloo on loopback,
    or NCCL with one GPU per rank) whose first k ranks measure world size k; under torchrun /
    srun / mpirun it uses that world the same way.
    Writes results.csv, meta.json and plots/ to --out; exits 1 if any result is wrong, or
    if a table's average busbw is below 90% of --min-busbw.
    """
    from allreduce_bench.core.cli.finish import measure_then_finish
    from allreduce_bench.core.config import RunOptions
    from allreduce_bench.core.config.launch import from_params
    from allreduce_bench.core.config.run import run_config
    from allreduce_bench.core.environment import how_started
    from allreduce_bench.core.launch.local import announce
    from allreduce_bench.core.measure.context import Run
    from allreduce_bench.core.measure.device import this_host
    from allreduce_bench.core.sweep.allreduce import BENCHMARK
    from allreduce_bench.core.units import byte_list

    floor = checked_floor(options)
    hooks = command_hooks()
    config = run_config(from_params(RunOptions, options), how_started(), this_host(), hooks)
    if click.get_current_context().meta.get("expect") and (line := hooks.call.expect_line(config=config)):
        announce(line)
    launch = config.launch
    announce(f"allreduce-bench: backend {launch.backend} on {launch.device}, world sizes "
             f"{','.join(map(str, launch.world_sizes))}, sizes {byte_list(config.sizes)}, "
             f"algorithms {describe(config)} -> {launch.out_dir}")
    sys.exit(measure_then_finish(Run(config, BENCHMARK, hooks), judged(finish_run, floor)))


def finish_run(run: Run) -> int:
    from allreduce_bench.core.analysis.report import terminal_summary
    from allreduce_bench.core.cli.finish import finish
    from allreduce_bench.core.environment import launcher_env
    from allreduce_bench.core.measure.meta import close_machine_facts

    close_machine_facts(run.launch.out_dir, ranks_are_children=launcher_env() is None)
    return finish(run, lambda frame: "\n".join([terminal_summary(frame),
                                                *run.hooks.joined("summary_lines", frame=frame)]))
