"""A rank that its launcher ends (SIGTERM) still says where it was and which rank it waited on.

srun --kill-on-bad-exit, mpirun and torchrun send SIGTERM to every other rank as soon as one
fails; Slurm does the same at a job's time limit and on `scancel`. By default that signal ends
a rank silently, often before its own failure line ("a peer's connection closed; missing rank
0 ...") is out. Under a busy machine, then, no survivor named the rank that died.

Under an outer launcher each rank therefore watches for SIGTERM on a thread, woken through
Python's wakeup fd: a rank blocked in a collective runs no Python signal handler until the
collective returns. On SIGTERM the watcher first gives the main thread GRACE_S to report a
failure of its own, which is the truer cause. Otherwise it writes one line,
`stopped at <step>: ended by its launcher (SIGTERM); missing ...`, dumps the Flight Recorder
(with --flight-recorder), and exits with 143. Each rank writes one end line: the main thread
and the watcher claim it through the Progress's EndLine. A local run's ranks are not watched,
because the local driver reports their end itself. The driver watches its own signals the
same way (`signals_seen`): Ctrl-C must reach ranks that still ignore it while they start.
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from allreduce_bench.core.errors import TERMINATED_EXIT
from allreduce_bench.core.measure import flight_recorder
from allreduce_bench.core.measure.context import Run
from allreduce_bench.core.measure.progress import Progress

GRACE_S = 0.5  # the main thread's own failure, already on its way, goes first


@contextmanager
def signals_seen(handle: Callable[[int], None]) -> Iterator[None]:
    """Within the block, hand `handle(signum)`, on a thread, every signal that has a Python
    handler, as it arrives, even while the main thread is blocked in C++ (Python's wakeup fd).
    Call it from the main thread."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    relay = threading.Thread(target=_relay, args=(read_fd, handle), name="allreduce-bench-signals",
                             daemon=True)
    relay.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write_fd)  # the relay reads EOF, closes the read end and ends
        relay.join()  # a relay inside `handle` (a rank's end line) ends the process itself


def _relay(read_fd: int, handle: Callable[[int], None]) -> None:
    try:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                handle(signum)
    finally:
        os.close(read_fd)


@contextmanager
def watch(run: Run, progress: Progress, world_size: int) -> Iterator[None]:
    """Within the block, report this rank's end on SIGTERM (see the module's text). Call it
    from the main thread. Nothing where SIGTERM is ignored on purpose."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def on_signal(signum: int) -> None:
        if signum == signal.SIGTERM:
            try:
                _end(run, progress, world_size)
            finally:  # whatever went wrong, the launcher asked this rank to end
                os._exit(TERMINATED_EXIT)

    with signals_seen(on_signal):
        # a Python handler, so that the signal no longer ends the process; the relay acts on it
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)  # before the wakeup fd goes: none is lost


def _end(run: Run, progress: Progress, world_size: int) -> None:
    rank, end = progress.rank, progress.end
    if end.claimed(GRACE_S) or not end.claim():
        # the main thread is writing its own line: let it out, then leave without lingering
        end.wait_written()
        os._exit(TERMINATED_EXIT)
    line = f"allreduce-bench: rank {rank}: stopped at {progress.where}: ended by its launcher (SIGTERM)"
    who = progress.missing()
    if who != "missing rank unknown":  # a time limit or scancel: nobody is missing
        line += f"; {who}"
    line += flight_recorder.after_failure(run, rank, world_size, local=False)
    # lingers like any rank that gives up: on a scancel every rank got the signal at once, and
    # under srun and mpirun the others still ask rank 0's store who is missing
    end.exit(line, TERMINATED_EXIT)
