"""`allreduce-bench plot` and `report`: figures and report.md from stored results alone."""
from __future__ import annotations

from pathlib import Path

import click

from allreduce_bench.core.cli.options import command_hooks
from allreduce_bench.core.config.checks import OUTPUT_PATH
from allreduce_bench.core.results.load import load_results

PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
OUT_DIR = click.option("--out-dir", type=OUTPUT_PATH,
                       help="Where the figures (and report.md) go; RUN/plots to write beside a run, as "
                       "`run` does. [plots/<first run's name>[+N] under the current directory, not "
                       "into the runs read]")
FORMAT = click.option("--format", "fmt", type=click.Choice(["png", "svg", "pdf"]), default="png",
                      show_default=True, help="Figure file format.")
SIZE = click.option("--size", help="Size the scaling figure and table compare world sizes at, "
                    "e.g. 64M; one that was measured. [the largest measured]")


def default_out_dir(paths: tuple[Path, ...]) -> Path:
    """plots/<first run's folder name>, +N for N more runs, under the current directory: not
    into the runs read (a committed example stays as it is) unless --out-dir names a place there."""
    first = paths[0] if paths[0].is_dir() else paths[0].parent
    name = first.resolve().name or "run"
    return Path("plots") / (name + (f"+{len(paths) - 1}" if len(paths) > 1 else ""))


def _load(paths: tuple[Path, ...], out_dir: Path | None):
    """The rows, checked before anything is drawn: readable, some AllReduce rows, and a place
    to write figures."""
    from allreduce_bench.core.analysis.report import chosen_size
    from allreduce_bench.core.config.checks import check_writable_dir
    hooks = command_hooks()
    frame = load_results(paths, kinds=hooks.row_kinds)
    chosen_size(frame, None, hooks.sections)  # nothing to report: say so before drawing
    check_writable_dir(out_dir or default_out_dir(paths), "--out-dir")
    return frame


@click.command()
@PATHS
@OUT_DIR
@FORMAT
@SIZE
def plot(paths, out_dir, fmt, size):
    """Draw every figure (bandwidth, latency, scaling, speedup, links) from stored results.

    PATHS are run directories or results.csv files; several runs are merged and told apart
    by their tag (and run id where tags repeat).
    """
    from allreduce_bench.core.analysis.plots import draw_all
    from allreduce_bench.core.analysis.report import chosen_size
    frame, sections = _load(paths, out_dir), command_hooks().sections
    figures = draw_all(frame, out_dir or default_out_dir(paths), fmt=fmt,
                       size_bytes=chosen_size(frame, size, sections), sections=sections)
    for path in figures.values():
        click.echo(f"figure: {path}")


@click.command()
@PATHS
@OUT_DIR
@FORMAT
@SIZE
def report(paths, out_dir, fmt, size):
    """Print the summary tables and write report.md with every figure beside it, and
    report.html: the same as one self-contained page (figures inline) to open or send.

    PATHS are run directories or results.csv files, merged as for `plot`.
    """
    from allreduce_bench.core.analysis.report import HTML_FILE, chosen_size, print_tables, write_report
    from allreduce_bench.core.analysis.terminal import wrapped
    frame, sections = _load(paths, out_dir), command_hooks().sections
    size_bytes = chosen_size(frame, size, sections)
    print_tables(frame, size_bytes, echo=click.echo, sections=sections)
    figures, path = write_report(frame, out_dir or default_out_dir(paths), size_bytes, fmt,
                                 sections=sections)
    click.echo("\n" + wrapped(f"report: {path} and {path.with_name(HTML_FILE)} (one page to open in a "
                              f"browser), {len(figures)} figures beside them"))
