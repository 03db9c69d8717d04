"""The options every measuring command shares, declared once so one name means one thing everywhere."""
from __future__ import annotations

import click

from allreduce_bench.core.cli.types import BACKEND, DEVICE
from allreduce_bench.core.config.checks import OUTPUT_PATH
from allreduce_bench.core.hooks import NONE, Hooks
from allreduce_bench.core.measure.binding import MODES as BIND_MODES


def measuring_options(out_default: str = "results/<UTC timestamp>[-<tag>]"):
    options = [
        click.option("--world-sizes", help="Comma-separated world sizes. Default: 2,4 on CPU (only "
                     "2 where this process may use fewer than 4 CPUs: more ranks than CPUs "
                     "measure the scheduler); "
                     "2,4,... up to the GPU count with NCCL; under a launcher, its whole world "
                     "(sub-worlds are its first k ranks)."),
        click.option("--backend", type=BACKEND, default="auto", show_default=True,
                     help="auto: nccl when every local rank has a GPU, else gloo."),
        click.option("--device", type=DEVICE, help="Overrides the device the backend implies."),
        click.option("--ranks-per-node", type=int, help="Ranks per node, to simulate nodes on one "
                     "host. Default: the launcher's LOCAL_WORLD_SIZE; 2 for a local CPU run."),
        click.option("--tag", default="", help="A label carried in every row, e.g. nvlink or ib."),
        click.option("--out", "out_dir", type=OUTPUT_PATH, help=f"Output directory. [{out_default}]"),
        click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
                     help="Seconds any collective may take before the run is aborted."),
        click.option("--no-plot", is_flag=True, help="Write results only, no figures."),
        click.option("--bind", type=click.Choice(BIND_MODES), default="auto", show_default=True,
                     help="Where each rank runs. auto: keep a launcher's binding (srun "
                     "--cpu-bind, mpirun --bind-to, torchrun --numa-binding); else on GPU the "
                     "CPUs of the GPU's NUMA node; else one core block per rank when there are "
                     "as many CPUs as local ranks. core: one block of the CPUs per local rank; "
                     "numa: one NUMA node's CPUs; none: as started. Recorded in meta.json."),
        click.option("--nccl-debug", is_flag=True, help="NCCL: run with NCCL_DEBUG=INFO "
                     "(subsystems INIT,GRAPH,ENV,TUNING), one NCCL_DEBUG_FILE per rank in "
                     "OUT/nccl-debug/, read at the end into meta.json's `nccl` block: which NICs, "
                     "transports and NCCL_* settings each host got (see `nccl-log`). For "
                     "diagnosis: NCCL then logs every call, which slows the smallest sizes."),
        click.option("--flight-recorder", is_flag=True, help="Record every collective in "
                     "PyTorch's Flight Recorder (TORCH_FR_BUFFER_SIZE=2000 entries per rank, gloo "
                     "and NCCL); each rank dumps it to OUT/flight-recorder/rank<R> when a collective "
                     "fails or times out and at its end, and a run stopped by a hung, frozen or "
                     "dead rank names it and the collective from the dumps (see `hang`)."),
    ]

    return with_options(options)


def with_options(options: list):
    """A decorator applying click options in the order listed (as --help shows them)."""
    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def command_hooks() -> Hooks:
    """The features' hooks from the command's context (the core alone outside the group)."""
    return click.get_current_context().find_object(Hooks) or NONE
