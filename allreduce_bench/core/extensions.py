"""What the features lend the core, handed in as one context: the core imports no feature.

allreduce_bench/cli.py assembles `Extensions` from the feature packages and every command
passes it on: report.md and plots/ get the features' sections (the cost model's, DDP's, what
NCCL set up, is this busbw normal), `run`'s summary their lines, a stopped run gets the Flight
Recorder's verdict, and the writer, once the ranks have ended, runs the features'
`after_ranks` (NCCL's log read into meta.json). Pure: no torch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Section:
    """A feature's part of report.md and plots/, from the rows alone (no torch).

    `draw(frame, out_dir, fmt, footnote) -> {name: path}` saves its figures (None: it has none);
    `markdown(frame, out_dir, figures) -> list of lines`, [] where the rows do not concern it,
    with `figures` every figure drawn so far (a section embeds its own; `own_figures` names
    those, so the report does not list them again under "Figures"); `tables(frame, size_bytes)
    -> [(title, how to read it, table of strings)]`: tables that join the sweep's own, in
    report.md and on `report`'s terminal. `benchmarks`: the `benchmark` of the rows it reports,
    which make a report without AllReduce rows (tables.chosen_size)."""

    name: str
    markdown: Callable[..., list[str]] = lambda frame, out_dir, figures: []
    draw: Callable[..., dict[str, Path]] | None = None
    own_figures: Callable[[str], bool] = lambda name: False
    tables: Callable[..., list] | None = None
    benchmarks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rows:
    """A feature's rows in results.csv as the core's readers must know them: `benchmark`, their
    column's value (an analysis reads them: the load's note does not count them as skipped);
    `needs`: columns they cannot be read without; `meta_block`: its runs' meta.json has a block
    of that name, so `run --resume` refuses them before their first row."""

    benchmark: str
    needs: tuple[str, ...] = ()
    meta_block: bool = False


@dataclass(frozen=True)
class Extensions:
    """`sections`: report.md's and plots/'s parts beyond the sweep's own, in order.
    `dump_verdict(folder, world_size) -> line or None`: one line naming the rank that hung, from
    the Flight Recorder dumps in `folder` (the hang feature). `after_ranks(config)`: run by the
    writer once every rank has ended, before the summary (e.g. NCCL's log into meta.json).
    `summaries(frame) -> lines`: added to `run`'s terminal summary (is this busbw normal?).
    `expect(config) -> line`: what `run --expect` prints before the ranks start.
    `rows`: the features' rows, as results/ and `run --resume` read them."""

    sections: tuple[Section, ...] = ()
    dump_verdict: Callable[[Path, int | None], str | None] | None = None
    after_ranks: tuple[Callable[[object], None], ...] = ()
    summaries: tuple[Callable[..., list[str]], ...] = ()
    expect: Callable[[object], str] | None = None
    rows: tuple[Rows, ...] = ()


@dataclass(frozen=True)
class Runnable:
    """A benchmark `emulate` may start on every host, as its feature declares it: `name` (in
    --benchmarks), the `command` each host runs, `config(**options, started=...)` (its options
    to its config, no torch: validated up front with how each host's rank 0 will start) and,
    where it has one, `outcome(out_dir, since)`: its own exit code once final (None: torchrun's).
    `defaults`: (option, value) it gets unless given; `without`: forwarded options it never
    gets. allreduce_bench/cli.py hands emulate every feature's."""

    name: str
    command: str
    config: Callable
    outcome: Callable[[Path, float], int | None] | None = None
    defaults: tuple[tuple[str, str], ...] = ()
    without: tuple[str, ...] = ()


NONE = Extensions()  # the core alone: the sweep's own tables and figures


def current() -> Extensions:
    """What the features lend, as the command group (allreduce_bench/cli.py) put it in click's
    context; the core alone where the core is called outside a command."""
    import click

    context = click.get_current_context(silent=True)
    return (context.find_object(Extensions) if context else None) or NONE
