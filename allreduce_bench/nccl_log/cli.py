"""`allreduce-bench nccl-log FILE...`: what NCCL's own debug output says about its setup, and
which host is set up differently from the others."""
from __future__ import annotations

from pathlib import Path

import click

from allreduce_bench.core.errors import UsageError

ENABLE = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING"


@click.command("nccl-log")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write nccl.json (per host: NICs, transports, NCCL_* overrides, warnings; and "
              "`differs`) and nccl_hosts.csv here.")
def nccl_log_command(files, out_dir):
    """Read NCCL debug output and name every host set up differently from the rest.

    \b
    FILES: output of any program run with NCCL_DEBUG=INFO (a training job's, nccl-tests',
    allreduce-bench's): one file per rank (NCCL_DEBUG_FILE), one interleaved stream, or a
    run directory (its nccl-debug/*.log). Launcher prefixes (srun --label, mpirun
    --tag-output, timestamps) and other output in between do not matter.
    Prints per host: ranks, network, NICs, transports, NCCL_* variables set by the
    environment and WARN lines; then each host whose NCCL version, network, NICs,
    transports, rank count or variables differ from what most hosts have, with both values.
    For the fullest picture run the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING.
    """
    from allreduce_bench.core.config.checks import check_writable_dir
    from allreduce_bench.nccl_log import parse as nccl_log
    from allreduce_bench.nccl_log import setup as nccl_setup

    if out_dir is not None:
        check_writable_dir(out_dir, "--out")  # before reading: a bad --out is one line, exit 2
    block = nccl_log.read_files(files)
    if not nccl_log.said_anything(block):
        raise UsageError(f"no NCCL debug lines in {', '.join(map(str, files))}; run the job with "
                         f"{ENABLE} (and NCCL_DEBUG_FILE=nccl.%h.%p.log for one file per process)")
    click.echo(nccl_setup.terminal_text(block))
    if out_dir is not None:
        json_path, csv_path = nccl_setup.write(block, out_dir)
        click.echo(f"\nnccl.json: {json_path}\nhosts: {csv_path}")
