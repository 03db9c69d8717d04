"""A rank its launcher ends (SIGTERM) still says where it was and whom it waited on, watched on a thread
through Python's wakeup fd: a rank blocked in a collective runs no Python handler (doc/faults.md)."""
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
    """Within the block, hand `handle(signum)` every signal with a Python handler, on a thread."""
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
    """Within the block, report this rank's end on SIGTERM and exit 143 (not where SIGTERM is ignored)."""
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
    # lingers like any rank that gives up: the others may still ask rank 0's store
    end.exit(line, TERMINATED_EXIT)
