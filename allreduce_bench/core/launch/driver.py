"""The driver every measuring command shares: it is handed a benchmark's declaration and runs its
ranks on a launcher's world or on local worlds, then returns; what comes after the ranks
(summary, figures, verdicts, exit code) is the command's (core/cli/finish.py). It names no
benchmark and no feature: what a feature lends (the hang verdict) comes in `extensions`."""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from allreduce_bench.core.environment import is_writer, launcher_env
from allreduce_bench.core.extensions import NONE, Extensions
from allreduce_bench.core.host.processes import spawned_ranks
from allreduce_bench.core.launch.environments import describe_failure, launch_local, stopped_record
from allreduce_bench.core.launch.flight import flight_recorder_line
from allreduce_bench.core.launch.reasons import LocalRun, first_reason, guarded
from allreduce_bench.core.measure import stopped
from allreduce_bench.core.measure.rank import Benchmark, rank_main
from allreduce_bench.core.results.lock import DirectoryLock
from allreduce_bench.core.results.resume import kept
from allreduce_bench.core.results.schema import META_FILE
from allreduce_bench.core.results.store import update_meta


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
def writer_lock(config):
    """The output directory locked for the whole command where this process writes (the local
    driver, rank 0 under a launcher): one run per directory."""
    lock = DirectoryLock(config.out_dir).acquire() if is_writer(launcher_env()) else None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def drive(config, benchmark: Benchmark, extensions: Extensions = NONE) -> int | None:
    """Run `benchmark`'s ranks: under a launcher on this rank of its world; else on one local
    world of the largest world size `benchmark.world_sizes(config)` leaves to do, whose first k
    ranks measure world size k, as under a launcher: one start of ranks and torch instead of
    one per world size. The writer runs `benchmark.prepare(config)` first (call it inside
    `writer_lock`). None when every rank finished and this process writes: the command then
    finishes the run; else the exit code (0 for a rank that does not write). A rank that dies
    or Ctrl-C ends a local run with one line, the rows kept."""
    env = launcher_env()
    writer = is_writer(env)
    if benchmark.prepare is not None and writer:
        benchmark.prepare(config)
    if env is not None:
        # a world of the ranks that came (health) is finished by its first rank
        finishes = guarded(None, rank_main, config, benchmark, env, extensions.dump_verdict)
        return None if finishes else 0
    world_sizes = (benchmark.world_sizes(config) if benchmark.world_sizes is not None
                   else config.world_sizes)
    return _drive_local(config, benchmark, world_sizes, extensions)


def _abandoned_ranks(error) -> str:
    """'1,3': the ranks the watcher killed as stopped after the others had returned."""
    pids = set(getattr(error, "abandoned", ()))
    failures = getattr(error, "failures", {}) or {}
    return ",".join(str(rank) for rank, failure in sorted(failures.items())
                    if getattr(failure, "pid", None) in pids)


def _drive_local(config, benchmark: Benchmark, world_sizes, extensions: Extensions) -> int | None:
    """None when every world finished, else the exit code after the one line saying why not."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    how_to_continue = f"--resume {config.out_dir}" if benchmark.resumable else None
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="allreduce-bench-") as reasons:
        local = LocalRun(reasons, os.getpid())  # every rank gets it
        try:
            with _ranks_ignore_ctrl_c(reasons):
                if world_sizes:
                    launch_local(max(world_sizes), guarded, local, rank_main,
                                 config.with_world_sizes(tuple(world_sizes)), benchmark, None,
                                 extensions.dump_verdict, local, marks=reasons)
        except ChildFailedError as error:
            if stopped := _abandoned_ranks(error):
                print(f"allreduce-bench: rank(s) {stopped} stayed stopped (SIGSTOP) after every other "
                      f"rank had finished: killed them", file=sys.stderr)
                return None
            failures = getattr(error, "failures", {}) or {}
            if benchmark.salvage is not None:  # its verdict, from what survived
                return benchmark.salvage(config, {rank: f.exitcode for rank, f in failures.items()}, started)
            found = first_reason(reasons)
            why = f"rank {found[0]}: {found[1]}" if found else describe_failure(error)
            record = stopped_record(error, reasons)
            if (Path(config.out_dir) / META_FILE).exists():
                update_meta(config.out_dir, stopped=record)
            if record["rank"] not in failures:  # frozen: the others gave up on it
                why = f"rank {record['rank']} {record['how']}"
            killed = not found and any(f.exitcode == -signal.SIGKILL for f in failures.values())
            print(f"allreduce-bench: run stopped: {why}; {kept(config.out_dir, how_to_continue)}"
                  + (" (a SIGKILL nobody sent is the kernel's out-of-memory killer: see dmesg)"
                     if killed else ""), file=sys.stderr)
            # --flight-recorder: who hung, on what
            if recorded := flight_recorder_line(config, extensions.dump_verdict):
                print(recorded, file=sys.stderr)
            return 1
        except (SignalException, KeyboardInterrupt) as error:
            sig = getattr(error, "sigval", signal.SIGINT)
            print(f"allreduce-bench: interrupted ({sig.name}); "
                  f"{kept(config.out_dir, how_to_continue)}", file=sys.stderr)
            return 128 + int(sig)  # 130 for Ctrl-C, as shells report it
    return None
