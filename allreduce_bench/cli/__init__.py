"""The command line: `allreduce-bench` (and `python -m allreduce_bench`)."""
from __future__ import annotations

import os
import shlex
import signal
import sys


def _interrupted_while_starting(signum, frame):
    os.write(2, b"allreduce-bench: interrupted\n")  # Ctrl-C while the CLI imports: no traceback
    os._exit(130)


_default_sigint = signal.getsignal(signal.SIGINT)
if _default_sigint is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import click  # noqa: E402  (after the handler above: this import is the slow part)

from allreduce_bench.algorithms import help_text as algorithms_help  # noqa: E402
from allreduce_bench.cli.types import BACKEND, DEVICE, DTYPE  # noqa: E402
from allreduce_bench.config.checks import OUTPUT_PATH  # noqa: E402
from allreduce_bench.errors import UsageError  # noqa: E402


class OneLineErrors(click.Group):
    """Bad input: one line on stderr saying what is wrong, exit code 2, never a traceback."""

    def main(self, args=None, prog_name=None, **kwargs):
        kwargs.pop("standalone_mode", None)
        from allreduce_bench.launch.reasons import flush_or_exit, reason

        try:
            code = super().main(args=args, prog_name=prog_name, standalone_mode=False, **kwargs) or 0
            flush_or_exit()
            return code
        except SystemExit:
            flush_or_exit()  # stdout to /dev/full: one line, not Python's "Exception ignored"
            raise
        except UsageError as error:
            click.echo(f"allreduce-bench: error: {error}", err=True)
            sys.exit(2)
        except click.exceptions.NoArgsIsHelpError as error:
            click.echo(error.ctx.get_help())
            sys.exit(0)
        except click.UsageError as error:
            hint = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
            click.echo(f"allreduce-bench: error: {error.format_message()}{hint}", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo("allreduce-bench: interrupted", err=True)
            sys.exit(130)
        except click.ClickException as error:
            click.echo(f"allreduce-bench: error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:  # Ctrl-C before a run started (while torch imports, ...)
            _say("allreduce-bench: interrupted")
            sys.exit(130)
        except (OSError, MemoryError) as error:  # the disk, the terminal, the memory: one line
            _say(f"allreduce-bench: error: {reason(error, 0)}")
            sys.exit(1)


def _say(line: str) -> None:
    try:
        sys.stdout.flush()
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (stdout is broken: keep exit quiet)
    os.write(2, (line + "\n").encode("utf-8", "replace"))


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="allreduce-bench")
def main():
    """Measure AllReduce algorithms (native, ring, naive, hierarchical) like nccl-tests.

    Start with `allreduce-bench run` (a local sweep on this machine), then `run --help`.
    """


@main.command()
@click.option("--algos", default="native,ring,naive,hierarchical", show_default=True,
              help=algorithms_help())
@click.option("--world-sizes", help="Comma-separated world sizes. Default: 2,4 on CPU; 2,4,... up "
              "to the GPU count with NCCL; under a launcher, its whole world (sub-worlds are its "
              "first k ranks).")
@click.option("--sizes", help="Comma-separated per-rank tensor sizes, e.g. 1M,8M (instead of a sweep).")
@click.option("--min-bytes", help="Smallest size of the sweep, K/M/G binary suffixes. [4K on CPU, 1K on GPU]")
@click.option("--max-bytes", help="Largest size of the sweep. [64M on CPU, 1G on GPU]")
@click.option("--factor", type=float, help="Multiply the size by this each step. [4 on CPU, 2 on GPU]")
@click.option("--dtype", type=DTYPE, default="float32", show_default=True, help="Element type.")
@click.option("--loops", type=int, help="Back-to-back calls per sample. [calibrated per size so a sample "
              "lasts >= 2 ms on CPU, 1 ms on GPU]")
@click.option("--samples", type=int, help="Samples per size. [as many as fit --budget: 5-50 on CPU, "
              "10-200 on GPU]")
@click.option("--budget", type=float, help="Seconds of samples per algorithm and size (a guide: at "
              "least the minimum samples are taken). [0.1 on CPU, 0.5 on GPU, 0.05 with --quick]")
@click.option("--warmup", type=int, help="Untimed calls before calibrating. [5 on GPU, 1 on CPU]")
@click.option("--iters", type=int, hidden=True, help="Schema-1 name: N timed calls one at a time, "
              "i.e. --samples N --loops 1.")
@click.option("--host-launch", is_flag=True, help="GPU: keep the host's launch time inside the "
              "timed interval (no device-side spin before the start event).")
@click.option("--backend", type=BACKEND, default="auto", show_default=True,
              help="auto: nccl when every local rank has a GPU, else gloo.")
@click.option("--device", type=DEVICE, help="Overrides the device the backend implies.")
@click.option("--ranks-per-node", type=int, help="Ranks per node, to simulate nodes on one host. "
              "Default: the launcher's LOCAL_WORLD_SIZE; 2 for a local CPU run.")
@click.option("--tag", default="", help="A label carried in every row, e.g. nvlink or ib.")
@click.option("--out", "out_dir", type=OUTPUT_PATH,
              help="Output directory. [results/<UTC timestamp>[-<tag>]]")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds any collective may take before the run is aborted.")
@click.option("--resume", "resume_dir", type=OUTPUT_PATH,
              help="Continue the interrupted run in this directory: skip its finished rows, append "
              "the rest (same options as the original run).")
@click.option("--quick", is_flag=True, help="A tiny sweep (4K and 256K, a few samples): a smoke test.")
@click.option("--no-plot", is_flag=True, help="Write results only, no figures.")
def run(**options):
    """Measure AllReduce over a sweep of sizes and world sizes, check every result.

    \b
    Without a launcher, starts a local world per world size (gloo on loopback, or NCCL
    with one GPU per rank). Under torchrun / srun / mpirun it uses that world.
    Writes results.csv, meta.json and plots/ to --out; exits 1 if any result is wrong.
    """
    from allreduce_bench.config.options import run_config
    from allreduce_bench.launch.driver import run as run_benchmark
    from allreduce_bench.launch.environments import announce

    config = run_config(command=shlex.join(sys.argv), **options)
    announce(f"allreduce-bench: backend {config.backend} on {config.device}, world sizes "
             f"{','.join(map(str, config.world_sizes))}, {len(config.sizes)} sizes, "
             f"algorithms {','.join(config.algorithms)} -> {config.out_dir}")
    sys.exit(run_benchmark(config))


from allreduce_bench.cli.analysis import plot, report  # noqa: E402
from allreduce_bench.cli.ddp import ddp  # noqa: E402
from allreduce_bench.cli.health import health_command  # noqa: E402  (find the bad host, NIC, link)
from allreduce_bench.cli.interop import compare_command, import_command  # noqa: E402  (other tools' logs, compare)
from allreduce_bench.cli.links import links_command  # noqa: E402  (intra- vs inter-node links)
from allreduce_bench.cli.model import model  # noqa: E402  (the cost model: fit, predict, ddp)
from allreduce_bench.emulate import emulate  # noqa: E402  (emulated multi-node cluster)

for command in (plot, report, ddp, model, emulate, links_command(run), health_command(run), import_command,
                compare_command):
    main.add_command(command)
if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
    signal.signal(signal.SIGINT, _default_sigint)  # imported: Ctrl-C is KeyboardInterrupt again

if __name__ == "__main__":
    main()
