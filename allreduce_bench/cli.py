"""The command line: `allreduce-bench` (and `python -m allreduce_bench`)."""
from __future__ import annotations

import os
import re
import signal
import sys


def _interrupted_while_starting(signum, frame):
    os.write(2, b"allreduce-bench: interrupted\n")  # Ctrl-C while the CLI imports: no traceback
    os._exit(130)


_default_sigint = signal.getsignal(signal.SIGINT)
if _default_sigint is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import click  # noqa: E402  (after the handler above: this import is the slow part)

from allreduce_bench.core.errors import UsageError  # noqa: E402


class OneLineErrors(click.Group):
    """Bad input: one line on stderr saying what is wrong, exit code 2, never a traceback."""

    def main(self, args=None, prog_name=None, **kwargs):
        kwargs.pop("standalone_mode", None)
        from allreduce_bench.core.launch.reasons import flush_or_exit, reason

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
            hint = _list_hint(error, sys.argv[1:] if args is None else list(args)) or (
                f" (see '{error.ctx.command_path} --help')" if error.ctx else "")
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
            _say(f"allreduce-bench: error: {reason(error)}")
            sys.exit(1)
        finally:
            config = sys.modules.get("allreduce_bench.core.config")  # a command that made a folder
            if config is not None:
                config.remove_unused_created()


def _list_hint(error: click.UsageError, words: list[str]) -> str:
    """`--sizes 1M 4M`: the extra words follow a comma-separated option's value, written with spaces."""
    found = re.fullmatch(r"Got unexpected extra arguments? \((.*)\)", error.format_message())
    extra = found.group(1).split(" ") if found and error.ctx else []
    at = next((i for i in range(len(words) - len(extra), 1, -1) if extra and words[i:i + len(extra)] == extra), 0)
    option = words[at - 2] if at and not words[at - 1].startswith("-") else ""
    if not any(option in p.opts and "comma" in (getattr(p, "help", "") or "").lower()
               for p in (error.ctx.command.params if error.ctx else [])):
        return ""
    return f"; a list is one word, comma-separated: {option} {','.join([words[at - 1], *extra])}"


def _say(line: str) -> None:
    try:
        sys.stdout.flush()
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (stdout is broken: keep exit quiet)
    os.write(2, (line + "\n").encode("utf-8", "replace"))


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="allreduce-bench")
@click.pass_context
def main(context):
    """Measure AllReduce algorithms (native, ring, naive, hierarchical) like nccl-tests.

    Start with `allreduce-bench run` (a local sweep on this machine), then `run --help`.
    """
    context.obj = HOOKS  # every command finds the features' hooks (core/cli/options.py)


# one module per command, bound by its own name; a new command is a module and one line in COMMANDS
from allreduce_bench.core.cli import report as analysis  # noqa: E402
from allreduce_bench.core.cli import run  # noqa: E402
from allreduce_bench.ddp import cli as ddp  # noqa: E402
from allreduce_bench.emulate import cli as emulate  # noqa: E402
from allreduce_bench.expect import cli as expect  # noqa: E402
from allreduce_bench.hang import cli as hang  # noqa: E402
from allreduce_bench.health import cli as health  # noqa: E402
from allreduce_bench.interop import cli as interop  # noqa: E402
from allreduce_bench.k8s import cli as k8s  # noqa: E402
from allreduce_bench.links import cli as links  # noqa: E402
from allreduce_bench.model import cli as model  # noqa: E402
from allreduce_bench.nccl_log import cli as nccl_log  # noqa: E402
from allreduce_bench.plugins import hooks  # noqa: E402

HOOKS = hooks()  # the features' and the user's plugins (allreduce_bench/plugins.py)
COMMANDS = (run.run, analysis.plot, analysis.report, ddp.ddp, model.model,
            emulate.emulate_command(tuple(HOOKS.joined("emulate_runnables"))),
            links.links, health.health, interop.import_command, interop.export_command,
            interop.compare_command,
            nccl_log.nccl_log_command, hang.hang, expect.expect_command, k8s.k8s_command)
for command in COMMANDS:
    main.add_command(command)
if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
    signal.signal(signal.SIGINT, _default_sigint)  # imported: Ctrl-C is KeyboardInterrupt again

if __name__ == "__main__":
    main()
