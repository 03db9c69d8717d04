"""What every measuring command does once its ranks have ended (the driver returns first): the
features' `after_ranks`, then the command's own finish: the summary from the stored rows,
figures and report.md (with the features' sections), `finished` in meta.json, and the exit
code from #wrong."""
from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable
from pathlib import Path

from allreduce_bench.core.extensions import NONE, Extensions
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.schema import RESULTS_FILE
from allreduce_bench.core.results.store import update_meta


def measure_then_finish(config, benchmark, finish: Callable, lent: Extensions) -> int:
    """The ranks of `benchmark` through the driver; then, where this process writes and every
    rank has ended, `lent.after_ranks` and `finish(config, lent) -> exit code`, with the output
    directory locked throughout."""
    from allreduce_bench.core.launch.driver import drive, writer_lock  # torch: not for `report`

    with writer_lock(config):
        code = drive(config, benchmark, lent)
        if code is not None:
            return code
        for after in lent.after_ranks:
            after(config)
        return finish(config, lent)


def finish(config, summarize: Callable, *, select: Callable | None = None, draw: bool = True,
           wrong_means: str = "element(s) wrong; the results above are not to be trusted",
           lent: Extensions = NONE) -> int:
    """`summarize(frame) -> text` of this run's rows (`select(frame)` first, e.g. ddp's rows);
    figures when `draw` and the run plots (with `lent.sections`); exit code 1 when any element
    was wrong."""
    frame = load_results(config.out_dir)
    if select is not None:
        frame = select(frame)
    frame = frame[frame["run_id"] == config.run_id]
    from allreduce_bench.core.analysis.terminal import wrapped

    print("\n" + wrapped(summarize(frame)))  # every line within a terminal's width
    if config.plot and draw:
        from allreduce_bench.core.analysis.report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots", sections=lent.sections)
        print(wrapped(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report} "
                      f"(one page to open in a browser: {report.with_name('report.html')})"))
    update_meta(config.out_dir,
                finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / RESULTS_FILE}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} {wrong_means}", file=sys.stderr)
        return 1
    return 0
