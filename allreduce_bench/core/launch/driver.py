"""The driver every measuring command shares: it runs a run's ranks on a launcher's world or a local one and
returns; what comes after is the command's (core/cli/finish.py)."""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from allreduce_bench.core.config.launch import LaunchConfig
from allreduce_bench.core.environment import is_writer, launcher_env
from allreduce_bench.core.host.processes import spawned_ranks
from allreduce_bench.core.launch.local import describe_failure, launch_local, stopped_record
from allreduce_bench.core.launch.reasons import first_reason, guarded
from allreduce_bench.core.measure import flight_recorder, stopped
from allreduce_bench.core.measure.context import LocalRun, Run
from allreduce_bench.core.measure.rank import rank_main
from allreduce_bench.core.results.lock import DirectoryLock
from allreduce_bench.core.results.resume import kept
from allreduce_bench.core.results.schema import META_FILE
from allreduce_bench.core.results.store import update_meta
from allreduce_bench.core.text import wrapped


@contextmanager
def _ranks_ignore_ctrl_c(scratch: str):
    """Ctrl-C goes to the driver only: local ranks start with SIGINT ignored (a wrapper execs them) and get
    SIGTERM on the driver's SIGINT."""
    import multiprocessing.spawn as mp_spawn
    import shlex

    wrapper = Path(scratch) / "python-ignoring-sigint"
    wrapper.write_text(f"#!/bin/sh\ntrap '' INT\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    previous = mp_spawn.get_executable()
    mp_spawn.set_executable(str(wrapper))
    try:
        with stopped.signals_seen(_stop_ranks_on_sigint):
            yield
    finally:
        mp_spawn.set_executable(previous)


def _stop_ranks_on_sigint(signum: int) -> None:
    if signum == signal.SIGINT:
        for pid in spawned_ranks():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@contextmanager
def writer_lock(launch: LaunchConfig) -> Iterator[None]:
    """The output directory locked for the whole command where this process writes: one run per directory."""
    lock = DirectoryLock(launch.out_dir).acquire() if is_writer(launcher_env()) else None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def drive(run: Run) -> int | None:
    """Run the benchmark's ranks on the launcher's world, else on one local world of the largest world size
    left, whose first k ranks measure size k. None when the command finishes the run, else the exit code."""
    env, benchmark = launcher_env(), run.benchmark
    if benchmark.prepare is not None and is_writer(env):
        benchmark.prepare(run.config)
    if env is not None:
        # a world of the ranks that came (health) is finished by its first rank
        return None if guarded(None, rank_main, run, env) else 0
    world_sizes = (benchmark.world_sizes(run.config) if benchmark.world_sizes is not None
                   else run.launch.world_sizes)
    return _drive_local(run, tuple(world_sizes))


def _abandoned_ranks(error) -> str:
    """'1,3': the ranks the watcher killed as stopped after the others returned."""
    pids = set(getattr(error, "abandoned", ()))
    failures = getattr(error, "failures", {}) or {}
    return ",".join(str(rank) for rank, failure in sorted(failures.items())
                    if getattr(failure, "pid", None) in pids)


def _drive_local(run: Run, world_sizes: tuple[int, ...]) -> int | None:
    """None when every world finished, else the exit code after one line saying why."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    launch = run.launch
    how_to_continue = f"--resume {launch.out_dir}" if run.benchmark.resumable else None
    started_at = time.time()
    with tempfile.TemporaryDirectory(prefix="allreduce-bench-") as reasons:
        local = LocalRun(reasons, os.getpid())  # every rank gets it
        local_run = replace(run, config=replace(run.config, launch=replace(launch, world_sizes=world_sizes)))
        try:
            with _ranks_ignore_ctrl_c(reasons):
                if world_sizes:
                    launch_local(max(world_sizes), guarded, local, rank_main, local_run, marks=reasons)
        except ChildFailedError as error:
            if stopped := _abandoned_ranks(error):
                print(f"allreduce-bench: rank(s) {stopped} stayed stopped (SIGSTOP) after every other "
                      f"rank had finished: killed them", file=sys.stderr)
                return None
            failures = getattr(error, "failures", {}) or {}
            if run.benchmark.salvage is not None:  # its verdict, from what survived
                return run.benchmark.salvage(run, {rank: f.exitcode for rank, f in failures.items()},
                                             started_at)
            found = first_reason(reasons)
            why = f"rank {found[0]}: {found[1]}" if found else describe_failure(error)
            record = stopped_record(error, reasons)
            if (Path(launch.out_dir) / META_FILE).exists():
                update_meta(launch.out_dir, stopped=record)
            if record["rank"] not in failures:  # frozen: the others gave up on it
                why = f"rank {record['rank']} {record['how']}"
            killed = not found and any(f.exitcode == -signal.SIGKILL for f in failures.values())
            print(wrapped(f"allreduce-bench: run stopped: {why}; {kept(launch.out_dir, how_to_continue)}"
                          + (" (a SIGKILL nobody sent is the kernel's out-of-memory killer: see dmesg)"
                             if killed else "")), file=sys.stderr)
            if recorded := flight_recorder.stopped_line(run):  # --flight-recorder: who hung, on what
                print(wrapped(recorded), file=sys.stderr)
            return 1
        except (SignalException, KeyboardInterrupt) as error:
            sig = getattr(error, "sigval", signal.SIGINT)
            print(f"allreduce-bench: interrupted ({sig.name}); "
                  f"{kept(launch.out_dir, how_to_continue)}", file=sys.stderr)
            return 128 + int(sig)  # 130 for Ctrl-C, as shells report it
    return None
