"""`--min-busbw` (nccl-tests' NCCL_TESTS_MIN_BW): after the finish, each table's footer; exit 1 below 90%."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from allreduce_bench.core.analysis.floor import footer_lines, table_averages, verdict_lines
from allreduce_bench.core.config.checks import parse_floor
from allreduce_bench.core.measure.context import Run

if TYPE_CHECKING:
    import pandas as pd

MIN_BUSBW_OPTION = click.option(
    "--min-busbw", "min_busbw", default=None, metavar="BANDWIDTH",
    help="Fail (exit 1) when a table's average bus bandwidth (the plain mean of its busbw over "
    "every size, as nccl-tests' 'Avg bus bandwidth') is below 90% of this, as nccl-tests judges "
    "NCCL_TESTS_MIN_BW; e.g. 1.2GB/s, 200Gb/s, or a bare number of GB/s. Prints nccl-tests' "
    "footer per table; results are written either way.")


def checked_floor(options: dict) -> float | None:
    """--min-busbw in GB/s, refused before any rank starts when it is not a bandwidth."""
    text = options.get("min_busbw")
    return None if text is None else parse_floor(text)


def judged(finish: Callable[[Run], int], floor_GBps: float | None,
           select: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> Callable[[Run], int]:
    """`finish(run) -> code` followed by the floor's judgement of this run's rows (`select` first)."""
    if floor_GBps is None:
        return finish

    def finish_then_judge(run: Run) -> int:
        code = finish(run)
        return max(code, judge(run, floor_GBps, select))

    return finish_then_judge


def judge(run: Run, floor_GBps: float, select: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> int:
    """Print every table's footer and a line per table that fails; 1 when any does."""
    from allreduce_bench.core.cli.finish import run_rows

    averages = table_averages(run_rows(run, select, explain_skips=False))
    print("\n".join(["#", *footer_lines(averages, floor_GBps), "#"]))
    failed = verdict_lines(averages, floor_GBps)
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0
