"""What every measuring command does once its ranks have ended: the hooks' `after_ranks`, then its finish."""
from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from allreduce_bench.core.measure.context import Run
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.schema import RESULTS_FILE
from allreduce_bench.core.results.store import update_meta


def measure_then_finish(run: Run, finish: Callable[[Run], int]) -> int:
    """The ranks through the driver, then `after_ranks` and `finish(run)` where this process writes."""
    from allreduce_bench.core.launch.driver import drive, writer_lock  # torch: not for `report`

    with writer_lock(run.launch):
        code = drive(run)
        if code is not None:
            return code
        run.hooks.call.after_ranks(config=run.config)
        return finish(run)


def run_rows(run: Run, select: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
             explain_skips: bool = True) -> pd.DataFrame:
    """This run's stored rows (`select(frame)` first, e.g. ddp's rows)."""
    frame = load_results(run.launch.out_dir, explain_skips, run.hooks.row_kinds)
    if select is not None:
        frame = select(frame)
    return frame[frame["run_id"] == run.launch.run_id]


def finish(run: Run, summarize: Callable[[pd.DataFrame], str], *,
           select: Callable[[pd.DataFrame], pd.DataFrame] | None = None, draw: bool = True,
           wrong_means: str = "element(s) wrong; the results above are not to be trusted") -> int:
    """The summary of this run's rows, figures when it plots, `finished`; 1 when any element was wrong."""
    from allreduce_bench.core.analysis.terminal import wrapped

    launch = run.launch
    frame = run_rows(run, select)
    print("\n" + wrapped(summarize(frame)))  # every line within a terminal's width
    if launch.plot and draw:
        from allreduce_bench.core.analysis.report import write_report
        figures, report = write_report(frame, Path(launch.out_dir) / "plots", sections=run.hooks.sections)
        print(wrapped(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report} "
                      f"(one page to open in a browser: {report.with_name('report.html')})"))
    update_meta(launch.out_dir,
                finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(launch.out_dir) / RESULTS_FILE}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} {wrong_means}", file=sys.stderr)
        return 1
    return 0
