"""`--sched`: a rank's threads SCHED_FIFO (a woken gloo thread runs at once: doc/noise.md) where permitted."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from allreduce_bench.core.config.launch import wanted

PRIORITY = 1  # the lowest real-time priority: above every normal thread, below the kernel's own


@dataclass(frozen=True)
class Sched:
    """What one rank runs with: `asked`, `policy` fifo | other, and `why` for meta.json."""

    asked: str
    policy: str
    why: str

    @property
    def realtime(self) -> bool:
        return self.policy == "fifo"

    def as_dict(self) -> dict:
        return asdict(self)


def set_fifo(priority: int = PRIORITY) -> str | None:
    """Every thread of this process SCHED_FIFO at `priority`; None when done, else why not."""
    try:
        tasks = [int(task.name) for task in Path("/proc/self/task").iterdir()]
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except AttributeError:
        return "SCHED_FIFO is not available on this system"
    except (PermissionError, OSError) as error:
        return (f"SCHED_FIFO was not permitted ({error.strerror or error}): it needs root, "
                "CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1")
    for task in tasks:
        try:
            os.sched_setscheduler(task, os.SCHED_FIFO, os.sched_param(priority))
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            continue
    return None


def apply(option: str, device: str, times_collectives: bool = True) -> Sched:
    policy = wanted(option, device, times_collectives)
    if policy == "other":
        return Sched(option, "other", f"--sched {option}: as started")
    refused = set_fifo()
    if refused:
        return Sched(option, "other", refused)
    return Sched(option, "fifo", f"SCHED_FIFO priority {PRIORITY} (--sched other turns it off)")
