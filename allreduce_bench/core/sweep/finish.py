"""What every benchmark's driver does after its ranks: the summary from the stored rows,
figures and report.md, `finished` in meta.json, and the exit code from #wrong."""
from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Callable
from pathlib import Path

from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.schema import RESULTS_FILE
from allreduce_bench.core.results.store import update_meta


def finish(config, summarize: Callable, *, select: Callable | None = None, draw: bool = True,
           wrong_means: str = "element(s) wrong; the results above are not to be trusted") -> int:
    """`summarize(frame) -> text` of this run's rows (`select(frame)` first, e.g. ddp's rows);
    figures when `draw` and the run plots; exit code 1 when any element was wrong."""
    frame = load_results(config.out_dir)
    if select is not None:
        frame = select(frame)
    frame = frame[frame["run_id"] == config.run_id]
    print("\n" + summarize(frame))
    if config.plot and draw:
        from allreduce_bench.core.analysis.report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots")
        print(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report}")
    update_meta(config.out_dir,
                finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / RESULTS_FILE}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} {wrong_means}", file=sys.stderr)
        return 1
    return 0


def start_meta_unless_launched(config, meta: Callable) -> None:
    """A local run's driver starts meta.json; under a launcher rank 0 does (measure/rank.py)."""
    from allreduce_bench.core.environment import launcher_env
    from allreduce_bench.core.results.store import start_meta

    if launcher_env() is None:
        start_meta(config.out_dir, meta(config))
