"""`allreduce-bench plot` and `report`: figures and report.md from stored results alone."""
from __future__ import annotations

import re
from pathlib import Path

import click

from allreduce_bench.core.cli.options import command_hooks
from allreduce_bench.core.config.checks import OUTPUT_PATH
from allreduce_bench.core.results.load import load_results

PATHS = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
OUT_DIR = click.option("--out-dir", type=OUTPUT_PATH,
                       help="Where the figures (and report.md) go; RUN/plots (with --force) to write beside a "
                       "run, as `run` does. [plots/<first run's name>[+N] under the current directory, not "
                       "into the runs read]")
FORMAT = click.option("--format", "fmt", type=click.Choice(["png", "svg", "pdf"]), default="png",
                      show_default=True, help="Figure file format.")
FORCE = click.option("--force", is_flag=True, help="Write over an earlier report in the folder: its "
                     "report.md, report.html and the figures it lists go first; other files stay.")
SIZE = click.option("--size", help="Size the scaling figure and table compare world sizes at, "
                    "e.g. 64M; one that was measured. [the largest measured]")


def default_out_dir(paths: tuple[Path, ...]) -> Path:
    """plots/<first run's folder name>[+N] under the current directory: not into the runs read."""
    first = paths[0] if paths[0].is_dir() else paths[0].parent
    name = first.resolve().name or "run"
    return Path("plots") / (name + (f"+{len(paths) - 1}" if len(paths) > 1 else ""))


def earlier_report(out_dir: Path) -> set[str]:
    """The files an earlier report left in out_dir: report.md, report.html and the figures its "Figures" lists."""
    from allreduce_bench.core.analysis.report import HTML_FILE

    text = (out_dir / "report.md").read_text(errors="replace") if (out_dir / "report.md").is_file() else ""
    listed = re.findall(r"^!\[[^\]]*\]\(([^/)]+)\)$", text.partition("\n## Figures\n")[2], re.M)
    return {"report.md", HTML_FILE, *listed}


def _load(paths: tuple[Path, ...], out_dir: Path, force: bool):
    """The rows, checked before drawing: readable, something to report, and a folder with no earlier report."""
    from allreduce_bench.core.analysis.report import chosen_size
    from allreduce_bench.core.config.checks import check_writable_dir
    from allreduce_bench.core.results.store import replace_own
    hooks = command_hooks()
    frame = load_results(paths, kinds=hooks.row_kinds)
    chosen_size(frame, None, hooks.sections)  # nothing to report: say so before drawing
    check_writable_dir(out_dir, "--out-dir")
    own = earlier_report(out_dir)
    replace_own(out_dir, lambda path: path.name in own, force, "--out-dir")
    return frame


@click.command()
@PATHS
@OUT_DIR
@FORMAT
@SIZE
@FORCE
def plot(paths, out_dir, fmt, size, force):
    """Draw every figure (bandwidth, latency, scaling, speedup, links) from stored results.

    PATHS are run directories or results.csv files; several runs are merged and told apart
    by their tag (and run id where tags repeat).
    """
    from allreduce_bench.core.analysis.plots import draw_all
    from allreduce_bench.core.analysis.report import chosen_size
    out_dir = out_dir or default_out_dir(paths)
    frame, sections = _load(paths, out_dir, force), command_hooks().sections
    figures = draw_all(frame, out_dir, fmt=fmt,
                       size_bytes=chosen_size(frame, size, sections), sections=sections)
    for path in figures.values():
        click.echo(f"figure: {path}")


@click.command()
@PATHS
@OUT_DIR
@FORMAT
@SIZE
@FORCE
def report(paths, out_dir, fmt, size, force):
    """Print the summary tables and write report.md with every figure beside it, and
    report.html: the same as one self-contained page (figures inline) to open or send.

    PATHS are run directories or results.csv files, merged as for `plot`.
    """
    from allreduce_bench.core.analysis.report import HTML_FILE, chosen_size, print_tables, write_report
    from allreduce_bench.core.analysis.terminal import wrapped
    out_dir = out_dir or default_out_dir(paths)
    frame, sections = _load(paths, out_dir, force), command_hooks().sections
    size_bytes = chosen_size(frame, size, sections)
    print_tables(frame, size_bytes, echo=click.echo, sections=sections)
    figures, path = write_report(frame, out_dir, size_bytes, fmt, sections=sections)
    click.echo("\n" + wrapped(f"report: {path} and {path.with_name(HTML_FILE)} (one page to open in a "
                              f"browser), {len(figures)} figures beside them"))
