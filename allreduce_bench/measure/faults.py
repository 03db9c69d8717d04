"""Where each rank is in the sweep, so a failure names the step and the rank that fell behind;
and the test-only fault hook that makes ranks fail on purpose.

Every rank publishes a (phase, step) counter in the rendezvous store before each measurement
(outside the timed region). When a collective fails or times out, a surviving rank reads the
counters of its world: the ranks behind it never reached this step, so they are the ones
missing. The store lives in the launcher's agent (torchrun, local runs) or in rank 0 (srun,
mpirun); if it is gone too, the missing rank is reported as unknown.
"""
from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import time
from dataclasses import dataclass

import torch.distributed as dist

from allreduce_bench.launch.environments import PEER_LOST_EXIT

DONE = 1 << 30  # step value at the barrier that ends a phase
FAULT_ENV = "ALLREDUCE_BENCH_FAULT"


class Progress:
    def __init__(self, rank: int, world_size: int):
        self.rank, self.members = rank, tuple(range(world_size))
        self.phase, self.step, self.where = 0, 0, "start-up"
        try:  # private but long-standing; without it only the missing rank goes unnamed
            self.store = dist.PrefixStore("allreduce_bench/progress",
                                          dist.distributed_c10d._get_default_store())
        except Exception:
            self.store = None
        self._publish()

    def at(self, phase: int, step: int, where: str, members: tuple[int, ...]) -> None:
        self.phase, self.step, self.where, self.members = phase, step, where, members
        self._publish()

    def _publish(self) -> None:
        if self.store is not None:
            try:
                self.store.set(str(self.rank), f"{self.phase} {self.step}")
            except Exception:
                self.store = None

    def behind(self) -> list[int] | None:
        """Ranks of my world that have not reached my step; None when it cannot be known."""
        if self.store is None:
            return None
        try:
            self.store.set_timeout(_dt.timedelta(seconds=3))
            found = []
            for rank in self.members:
                if rank == self.rank:
                    continue
                if not self.store.check([str(rank)]):
                    found.append(rank)  # never got as far as start-up
                    continue
                phase, step = map(int, self.store.get(str(rank)).split())
                if (phase, step) < (self.phase, self.step):
                    found.append(rank)
            return found
        except Exception:
            return None


def explain(error: BaseException, timeout_s: float) -> str:
    text = str(error)
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return f"no answer within --timeout {timeout_s:g} s"
    if any(word in lowered for word in ("connection", "closed", "reset", "broken pipe", "eof")):
        return "a peer's connection closed"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:160]


def failure_line(rank: int, progress: Progress, error: BaseException, timeout_s: float) -> str:
    missing = progress.behind()
    who = ("missing rank unknown" if not missing else
           f"missing rank {missing[0]}" if len(missing) == 1 else
           f"missing ranks {','.join(map(str, missing))}")
    return (f"allreduce-bench: rank {rank}: stopped at {progress.where}: "
            f"{explain(error, timeout_s)}; {who}")


def peer_died(error: BaseException) -> bool:
    return explain(error, 0) == "a peer's connection closed"


def peer_silent(error: BaseException) -> bool:
    return explain(error, 0).startswith("no answer within")


def exit_now(line: str, code: int = PEER_LOST_EXIT, linger_s: float = 0.0) -> None:
    """Print one line and leave at once: after a failed collective, tearing the process group
    down cleanly can itself block.

    `linger_s`: when a peer died, stay a moment before exiting, so a launcher that watches every
    rank (torchrun, a local run) sees the rank that died first and reports it, rather than
    this one; it stops us itself in the meantime.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(2, (line + "\n").encode())  # one write: lines of several ranks never interleave
    time.sleep(linger_s)
    os._exit(code)


# ---- test-only fault hook ------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    """ALLREDUCE_BENCH_FAULT='rank=1,after_rows=2,action=kill|stall|delay[,seconds=600]' (tests
    only): global rank `rank` SIGKILLs itself, or sleeps `seconds`, after it has finished
    `after_rows` measurements, between two measurements (never inside the timed region);
    `delay` instead makes the rank start every sample `seconds` late (after the alignment,
    before its clock starts): a straggler the slowest-rank analysis must name."""

    rank: int
    after_rows: int
    action: str
    seconds: float = 600.0

    @classmethod
    def from_env(cls, environ=os.environ) -> Fault | None:
        text = environ.get(FAULT_ENV)
        if not text:
            return None
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        fault = cls(int(fields["rank"]), int(fields.get("after_rows", 0)), fields["action"],
                    float(fields.get("seconds", 600)))
        if fault.action not in ("kill", "stall", "delay"):
            raise ValueError(f"{FAULT_ENV}: action must be kill, stall or delay, not {fault.action!r}")
        return fault

    def before_clock(self, rank: int):
        """The delay to run before every sample's clock on `rank` (None: not this rank)."""
        if self.action != "delay" or rank != self.rank:
            return None
        return lambda: time.sleep(self.seconds)

    def after_row(self, rank: int, rows_done: int) -> None:
        if rank != self.rank or rows_done != self.after_rows or self.action == "delay":
            return
        print(f"allreduce-bench: test fault: rank {rank} {self.action}s after {rows_done} rows "
              f"at t={time.time():.3f}", file=sys.stderr, flush=True)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(self.seconds)
