"""The driver every measuring command shares: a launcher's world or local worlds, then the summary,
figures and exit code; and the driver of a whole `run`."""
from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from allreduce_bench.benchmarks.allreduce import rank_entry
from allreduce_bench.config import RunConfig
from allreduce_bench.launch import resume
from allreduce_bench.launch.environments import describe_failure, launch_local, launcher_env
from allreduce_bench.launch.reasons import DRIVER_PID_ENV, REASON_DIR_ENV, first_reason, guarded
from allreduce_bench.measure import meta as run_meta
from allreduce_bench.results.load import load_results
from allreduce_bench.results.lock import DirectoryLock
from allreduce_bench.results.schema import RESULTS_FILE
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


def _kept(config, resumable: bool) -> str:
    """What is left on disk, and only the way on that the command has."""
    path = Path(config.out_dir) / RESULTS_FILE
    if not path.exists():
        return f"no rows were written to {config.out_dir}"
    rows = resume.count_rows(config.out_dir)
    return f"{rows} row(s) kept in {path}" + (f"; continue with --resume {config.out_dir}"
                                             if resumable and rows else "")


@contextmanager
def _ranks_ignore_ctrl_c(scratch: str):
    """Ctrl-C goes to the driver only: local ranks start with SIGINT ignored, so one pressed
    while they import torch prints no KeyboardInterrupt tracebacks; the driver prints one line.
    An ignored signal stays ignored through exec, and Python then installs no KeyboardInterrupt
    handler; multiprocessing's spawn starts its children through this tiny wrapper, which
    ignores SIGINT and execs the same Python. torch's launcher stops its ranks with the signal it
    got (SIGINT), which a starting rank ignores: a watcher sees every signal this process gets
    (Python's wakeup fd) and sends the ranks SIGTERM at once instead."""
    import multiprocessing.spawn as mp_spawn
    import shlex

    wrapper = Path(scratch) / "python-ignoring-sigint"
    wrapper.write_text(f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    previous = mp_spawn.get_executable()
    mp_spawn.set_executable(str(wrapper))
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=_stop_ranks_on_sigint, args=(read_fd,), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(old_wakeup)
        os.close(write_fd)  # the watcher reads EOF and ends
        watcher.join(timeout=5)
        os.close(read_fd)
        mp_spawn.set_executable(previous)


def _stop_ranks_on_sigint(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if signal.SIGINT in data:
            for pid in _spawned_ranks():
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def _spawned_ranks() -> list[int]:
    """This process's children started by multiprocessing's spawn (not its resource tracker)."""
    found = []
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def drive(config, entry, done_with, world_sizes=None, before=None, resumable: bool = False) -> int:
    """The driver every measuring command shares: under a launcher run `entry` on this rank of
    its world; else start a local world for each of `world_sizes` (default: the config's; a
    callable is asked once the directory is locked), one after the other. Then
    `done_with(config)` (summary, figures, exit code) where rows are written. The writer holds
    the output directory's lock throughout and runs `before(config)` first. A rank that dies or
    Ctrl-C ends a local run with one line, the rows kept."""
    env = launcher_env()
    writer = env is None or env.rank == 0
    lock = DirectoryLock(config.out_dir).acquire() if writer else None
    try:
        if before is not None and writer:
            before(config)
        if env is not None:
            guarded(entry, config, env)
            return done_with(config) if writer else 0
        if callable(world_sizes):
            world_sizes = world_sizes()
        return _drive_local(config, entry, done_with, world_sizes, resumable)
    finally:
        if lock is not None:
            lock.release()


def _drive_local(config, entry, done_with, world_sizes, resumable: bool) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    with tempfile.TemporaryDirectory(prefix="allreduce-bench-") as reasons:
        os.environ[REASON_DIR_ENV] = reasons  # the ranks inherit it
        os.environ[DRIVER_PID_ENV] = str(os.getpid())
        try:
            with _ranks_ignore_ctrl_c(reasons):
                for world_size in config.world_sizes if world_sizes is None else world_sizes:
                    launch_local(world_size, guarded, entry, config.with_world_sizes((world_size,)))
        except ChildFailedError as error:
            found = first_reason(reasons)
            why = f"rank {found[0]}: {found[1]}" if found else describe_failure(error)
            killed = not found and any(f.exitcode == -signal.SIGKILL
                                       for f in (getattr(error, "failures", {}) or {}).values())
            print(f"allreduce-bench: run stopped: {why}; {_kept(config, resumable)}"
                  + (" (a SIGKILL nobody sent is the kernel's out-of-memory killer: see dmesg)"
                     if killed else ""), file=sys.stderr)
            return 1
        except (SignalException, KeyboardInterrupt) as error:
            sig = getattr(error, "sigval", signal.SIGINT)
            print(f"allreduce-bench: interrupted ({sig.name}); {_kept(config, resumable)}",
                  file=sys.stderr)
            return 128 + int(sig)  # 130 for Ctrl-C, as shells report it
        finally:
            os.environ.pop(REASON_DIR_ENV, None)
            os.environ.pop(DRIVER_PID_ENV, None)
    return done_with(config)


def run(config: RunConfig) -> int:
    """`allreduce-bench run`: measure under a launcher's world, or a local world per world size,
    skipping the world sizes a resumed run has finished."""
    def prepare(config: RunConfig) -> None:
        _start_meta(config)
        resume.repair_tail(config.out_dir)  # before reading which rows are done

    def todo() -> list[int]:
        done = resume.done_keys(config.out_dir, config.run_id)
        itemsize = config.itemsize
        return [k for k in config.world_sizes
                if any((a, k, s // itemsize * itemsize) not in done
                       for a in config.algorithms for s in config.sizes)]

    return drive(config, rank_entry, finish, None if launcher_env() is not None else todo,
                 before=prepare, resumable=True)
