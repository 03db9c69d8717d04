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
and the watcher claim it through faults.claim_report. A local run's ranks are not watched,
because the local driver reports their end itself.
"""
from __future__ import annotations

import os
import signal
import threading

from allreduce_bench.measure import faults, flight_recorder

TERMINATED_EXIT = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM
GRACE_S = 0.5  # the main thread's own failure, already on its way, goes first
WRITTEN_WAIT_S = 5.0  # once claimed by the main thread: how long its line may take to come out


class Watch:
    """Installed by `watch`; `close()` restores the signal's previous handling."""

    def __init__(self, read_fd: int, write_fd: int, previous_fd: int, previous_handler):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.previous_fd, self.previous_handler = previous_fd, previous_handler

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        signal.signal(signal.SIGTERM, self.previous_handler)
        os.close(self.write_fd)  # the watcher reads EOF and ends; it closes the read end


def watch(rank: int, world_size: int, progress: faults.Progress, config) -> Watch | None:
    """Report this rank's end on SIGTERM (see the module's text). Call it from the main thread.
    Returns None where SIGTERM is ignored on purpose, or another wakeup fd is in use."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return None
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous_fd != -1:  # someone else's: leave it alone
        signal.set_wakeup_fd(previous_fd)
        os.close(read_fd)
        os.close(write_fd)
        return None
    # a Python handler, so that the signal no longer ends the process; the watcher acts on it
    previous_handler = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    threading.Thread(target=_watch, args=(read_fd, rank, world_size, progress, config),
                     name="allreduce-bench-sigterm", daemon=True).start()
    return Watch(read_fd, write_fd, previous_fd, previous_handler)


def _watch(read_fd: int, rank: int, world_size: int, progress: faults.Progress, config) -> None:
    try:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                _end(rank, world_size, progress, config)
    finally:
        os.close(read_fd)


def _end(rank: int, world_size: int, progress: faults.Progress, config) -> None:
    if faults.report_claimed(GRACE_S) or not faults.claim_report():
        # the main thread is writing its own line: let it out, then leave without lingering
        faults.report_written(WRITTEN_WAIT_S)
        os._exit(TERMINATED_EXIT)
    line = f"allreduce-bench: rank {rank}: stopped at {progress.where}: ended by its launcher (SIGTERM)"
    who = progress.missing()
    if who != "missing rank unknown":  # a time limit or scancel: nobody is missing
        line += f"; {who}"
    line += flight_recorder.after_failure(config, rank, world_size, local=False)
    faults.exit_now(line, TERMINATED_EXIT)
