"""The driver every measuring command shares: a launcher's world or local worlds, then the summary,
figures and exit code; and the driver of a whole `run`."""
from __future__ import annotations

import datetime as _dt
import signal
import sys
from pathlib import Path

from allreduce_bench.benchmarks.allreduce import rank_entry
from allreduce_bench.config import RunConfig
from allreduce_bench.launch import resume
from allreduce_bench.launch.environments import describe_failure, launch_local, launcher_env
from allreduce_bench.measure import meta as run_meta
from allreduce_bench.results.load import load_results
from allreduce_bench.results.store import read_meta, start_meta, update_meta


def finish(config: RunConfig, summarize=None, draw: bool = True) -> int:
    """After measuring: summary from the stored rows (`summarize(frame) -> text`, by default
    the AllReduce summary), figures and report.md, exit code from #wrong."""
    from allreduce_bench.analysis.report import terminal_summary

    frame = load_results(config.out_dir)
    frame = frame[frame["run_id"] == config.run_id]
    print("\n" + (summarize or terminal_summary)(frame))
    if config.plot and draw:
        from allreduce_bench.analysis.report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots")
        print(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report}")
    update_meta(config.out_dir, finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / 'results.csv'}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} element(s) wrong; the results above are not to be trusted",
              file=sys.stderr)
        return 1
    return 0


def _start_meta(config: RunConfig) -> None:
    """A fresh meta.json, or a resumed run's with this restart noted."""
    stored = read_meta(config.out_dir)
    if stored.get("run_id") == config.run_id:
        restarts = stored.get("resumed", []) + [{
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": config.command}]
        update_meta(config.out_dir, resumed=restarts)
    else:
        start_meta(config.out_dir, run_meta.host_meta(config))


def _kept(config: RunConfig) -> str:
    rows = resume.count_rows(config.out_dir)
    return (f"{rows} row(s) kept in {Path(config.out_dir) / 'results.csv'}; continue with "
            f"--resume {config.out_dir}")


def drive(config, entry, done_with, world_sizes=None) -> int:
    """The driver every measuring command shares: under a launcher run `entry` on this rank of
    its world; else start a local world for each of `world_sizes` (default: the config's), one
    after the other. Then `done_with(config)` (summary, figures, exit code) where rows are
    written. A rank that dies or Ctrl-C ends a local run with one line, the rows kept."""
    env = launcher_env()
    if env is not None:
        entry(config, env)
        return done_with(config) if env.rank == 0 else 0

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        for world_size in config.world_sizes if world_sizes is None else world_sizes:
            launch_local(world_size, entry, config.with_world_sizes((world_size,)))
    except ChildFailedError as error:
        print(f"allreduce-bench: run stopped: {describe_failure(error)}; {_kept(config)}",
              file=sys.stderr)
        return 1
    except (SignalException, KeyboardInterrupt) as error:
        sig = getattr(error, "sigval", signal.SIGINT)
        print(f"allreduce-bench: interrupted ({sig.name}); {_kept(config)}", file=sys.stderr)
        return 128 + int(sig)  # 130 for Ctrl-C, as shells report it
    return done_with(config)


def run(config: RunConfig) -> int:
    """`allreduce-bench run`: measure under a launcher's world, or a local world per world size,
    skipping the world sizes a resumed run has finished."""
    env = launcher_env()
    if env is None or env.rank == 0:
        _start_meta(config)
        resume.repair_tail(config.out_dir)  # before reading which rows are done
    if env is not None:
        return drive(config, rank_entry, finish)
    done = resume.done_keys(config.out_dir, config.run_id)
    itemsize = config.itemsize
    todo = [k for k in config.world_sizes
            if any((a, k, s // itemsize * itemsize) not in done
                   for a in config.algorithms for s in config.sizes)]
    return drive(config, rank_entry, finish, todo)
