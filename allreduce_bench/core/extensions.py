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
    those, so the report does not list them again under "Figures")."""

    name: str
    markdown: Callable[..., list[str]]
    draw: Callable[..., dict[str, Path]] | None = None
    own_figures: Callable[[str], bool] = lambda name: False


@dataclass(frozen=True)
class Extensions:
    """`sections`: report.md's and plots/'s parts beyond the sweep's own, in order.
    `dump_verdict(folder, world_size) -> line or None`: one line naming the rank that hung, from
    the Flight Recorder dumps in `folder` (the hang feature). `after_ranks(config)`: run by the
    writer once every rank has ended, before the summary (e.g. NCCL's log into meta.json).
    `summaries(frame) -> lines`: added to `run`'s terminal summary (is this busbw normal?).
    `expect(config) -> line`: what `run --expect` prints before the ranks start."""

    sections: tuple[Section, ...] = ()
    dump_verdict: Callable[[Path, int | None], str | None] | None = None
    after_ranks: tuple[Callable[[object], None], ...] = ()
    summaries: tuple[Callable[..., list[str]], ...] = ()
    expect: Callable[[object], str] | None = None


NONE = Extensions()  # the core alone: the sweep's own tables and figures
