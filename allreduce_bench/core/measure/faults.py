"""Where each rank is in the sweep, so a failure names the step and the rank that fell behind;
and the test-only fault hook that makes ranks fail on purpose.

Every rank publishes a (phase, step) counter, with its pid and host, in the rendezvous store
before each measurement (outside the timed region). When a collective fails or times out, a
surviving rank reads the counters of its world: the ranks behind it never reached this step, so
they are the ones missing; a peer on this host that is at the same step but whose process is
gone or stopped (SIGSTOP) is missing too. The store lives in the launcher's agent (torchrun,
local runs) or in rank 0 (srun, mpirun); when rank 0 hosts it and it no longer answers, rank 0
is the one missing. Only when none of this can tell is the missing rank reported as unknown.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from allreduce_bench.core.environment import under_elastic_agent, user_setting
from allreduce_bench.core.errors import PEER_LOST_EXIT, TERMINATED_EXIT
from allreduce_bench.core.host.processes import process_state

DONE = 1 << 30  # step value at the barrier that ends a phase
FAULT_ENV = "ALLREDUCE_BENCH_FAULT"
STORE_WAIT_S = 2.0  # how long a failed rank waits on the store before it gives up on it
# A rank that gives up stays this long before it exits, so that peers can still read the store
# it may host (rank 0 under srun/mpirun) before the launcher kills the job.
MIN_LINGER_S = 1.0


def store_host() -> str:
    """Who serves the rendezvous store: torch's elastic agent (torchrun, a local run), else rank
    0 (env:// under srun or mpirun: rank 0 opens MASTER_ADDR:MASTER_PORT)."""
    return "agent" if under_elastic_agent() else "rank 0"


def store_reachable(master: tuple[str | None, int | None], timeout_s: float = 1.0) -> bool:
    """Whether anything still listens at the store's (address, port) (environment.master_of); a
    plain socket, so a dead store host costs no C++ warnings from torch's store client."""
    addr, port = master
    if port is None:
        return False
    try:
        with socket.create_connection((addr or "127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _settled(seconds: float = 0.2) -> bool:
    time.sleep(seconds)
    return True


class Progress:
    def __init__(self, rank: int, world_size: int, master: tuple[str | None, int | None] = (None, None)):
        self.rank, self.members, self.master = rank, tuple(range(world_size)), master
        self.phase, self.step, self.where = 0, 0, "start-up"
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.lost: dict[int, str] = {}  # what `missing` found: rank -> its state ('' when only behind)
        try:  # private but long-standing; without it only the missing rank goes unnamed
            self.store: dist.PrefixStore | None = dist.PrefixStore("allreduce_bench/progress",
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
                self.store.set(str(self.rank), f"{self.phase} {self.step} {self.pid} {self.host}")
            except Exception:
                self.store = None

    def missing(self) -> str:
        """Which ranks of my world this rank's failure is waiting on, in words:
        'missing rank 1', 'missing ranks 1,3 (1 frozen)', 'missing rank 0 (the store's host) is
        gone', or 'missing rank unknown'."""
        host_is_rank0 = store_host() == "rank 0" and self.rank != 0 and 0 in self.members
        if self.store is None:
            return "missing rank unknown"
        gone = "missing rank 0 (the store's host) is gone"
        # A killed process's sockets close one by one: the listening one may outlive, by a few
        # milliseconds, the connection whose loss brought us here. Probe twice.
        if host_is_rank0 and not (store_reachable(self.master) and _settled() and store_reachable(self.master)):
            return gone
        # A store whose host is stopped accepts the connection but never answers, and not every
        # store call honours the store's timeout: ask from a thread and stop waiting for it.
        answer: list[dict[int, str] | None] = []
        asking = threading.Thread(target=lambda: answer.append(self._not_here()), daemon=True)
        asking.start()
        asking.join(STORE_WAIT_S)
        if not answer or answer[0] is None:
            if host_is_rank0:  # reachable but silent: stopped, or it died meanwhile
                return gone if not store_reachable(self.master) else \
                    "missing rank 0 (the store's host) does not answer"
            return "missing rank unknown"
        found = answer[0]
        if not found:
            return "missing rank unknown"
        self.lost = found
        ranks = sorted(found)
        text = f"missing rank {ranks[0]}" if len(ranks) == 1 else \
            f"missing ranks {','.join(map(str, ranks))}"
        if len(ranks) == 1 and found[ranks[0]]:
            return f"{text} ({found[ranks[0]]})"
        states = [f"{r} {found[r]}" for r in ranks if found[r]]
        return f"{text} ({', '.join(states)})" if states else text

    def _not_here(self) -> dict[int, str] | None:
        """Ranks of my world behind my step, or on this host and stopped or dead, with that
        state ('' when only behind); None when the store cannot tell."""
        if self.store is None:
            return None
        try:
            self.store.set_timeout(_dt.timedelta(seconds=STORE_WAIT_S))
            # Say that I gave up too: a peer that finds me gone later must not blame me.
            self.store.set(str(self.rank), f"{self.phase} {self.step} {self.pid} {self.host} "
                                           "gave-up")
            found: dict[int, str] = {}
            for rank in self.members:
                if rank == self.rank:
                    continue
                if not self.store.check([str(rank)]):
                    found[rank] = ""  # never got as far as start-up
                    continue
                phase, step, pid, host, *gave_up = self.store.get(str(rank)).decode().split(" ")
                if gave_up:
                    continue  # failed like me, waiting on the same missing rank(s)
                # A peer at my step whose process is stopped or dead froze inside it.
                state = process_state(int(pid)) if host == self.host else None
                if state or (int(phase), int(step)) < (self.phase, self.step):
                    found[rank] = state or ""
            return found
        except Exception:
            return None


LOST_MARK = "lost-"  # + the rank: the ranks a rank of a local world gave up on, for its driver


def leave_lost(folder: str, rank: int, progress: Progress) -> None:
    """What `progress.missing` found, as JSON in a local world's reasons folder
    (launch/environments.py `stopped_record` names the stopped rank from it)."""
    try:
        (Path(folder) / f"{LOST_MARK}{rank}").write_text(json.dumps(
            {"lost": progress.lost, "where": progress.where, "t": time.time()}))
    except OSError:
        pass  # the driver then names the first rank that failed


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
    who = progress.missing()
    return (f"allreduce-bench: rank {rank}: stopped at {progress.where}: "
            f"{explain(error, timeout_s)}; {who}")


def peer_died(error: BaseException) -> bool:
    return explain(error, 0) == "a peer's connection closed"


def peer_silent(error: BaseException) -> bool:
    return explain(error, 0).startswith("no answer within")


# One end line per process: the main thread's own failure, or the SIGTERM watcher's (stopped.py),
# whichever claims it first; the other waits for that line and leaves.
_claim_lock = threading.Lock()
_claimed = threading.Event()
_written = threading.Event()
_owner: int | None = None  # the thread that claimed


def claim_report() -> bool:
    """True for the thread that claims first (and on its later calls): it writes this
    process's end line (exit_now)."""
    global _owner
    with _claim_lock:
        if _owner is None:
            _owner = threading.get_ident()
            _claimed.set()
        return _owner == threading.get_ident()


def claim_or_wait() -> None:
    """Claim the end line; lost, the other thread is writing it and ends the process."""
    if not claim_report():
        time.sleep(60)
        os._exit(PEER_LOST_EXIT)


def report_claimed(within_s: float) -> bool:
    return _claimed.wait(within_s)


def report_written() -> None:
    """Until the claimed line is out (the launcher's SIGKILL bounds the wait)."""
    _written.wait()


def exit_now(line: str, code: int = PEER_LOST_EXIT, linger_s: float = 0.0) -> None:
    """Print one line and leave at once: after a failed collective, tearing the process group
    down cleanly can itself block. One line per process: a second thread's call waits.

    `linger_s`: when a peer died, stay a moment before exiting, so a launcher that watches every
    rank (torchrun, a local run) sees the rank that died first and reports it, rather than
    this one; it stops us itself in the meantime.
    """
    claim_or_wait()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the line below still goes to fd 2
            pass
    try:
        os.write(2, (line + "\n").encode())  # one write: lines of several ranks never interleave
    except OSError:
        pass
    _written.set()
    # a rank that gave up (or was ended) may serve the store its peers still read
    gave_up = code in (PEER_LOST_EXIT, TERMINATED_EXIT)
    time.sleep(max(linger_s, MIN_LINGER_S) if gave_up else linger_s)
    os._exit(code)


# ---- test-only fault hook ------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    """ALLREDUCE_BENCH_FAULT='rank=1,after_rows=2,action=kill|stall|stop|delay[,seconds=600]
    [,at=row|start]' (tests only): global rank `rank` SIGKILLs itself, sleeps `seconds`, or
    SIGSTOPs itself (frozen, as a debugger or a hung kernel would leave it) after it has
    finished `after_rows` measurements, between two measurements (never inside the timed
    region), or with `at=start` as it starts, before it joins the world (a host that hangs
    while it starts: no rank has heard of it); `delay` instead
    makes the rank start every sample `seconds` late (after the alignment, before its clock
    starts): a straggler the slowest-rank analysis must name."""

    rank: int
    after_rows: int
    action: str
    seconds: float = 600.0
    at: str = "row"  # row: after `after_rows` measurements; start: before the rank joins the world

    @classmethod
    def from_env(cls, environ=None) -> Fault | None:
        text = user_setting(FAULT_ENV, environ=environ)
        if not text:
            return None
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        fault = cls(int(fields["rank"]), int(fields.get("after_rows", 0)), fields["action"],
                    float(fields.get("seconds", 600)), fields.get("at", "row"))
        if fault.action not in ("kill", "stall", "stop", "delay"):
            raise ValueError(f"{FAULT_ENV}: action must be kill, stall, stop or delay, not "
                             f"{fault.action!r}")
        if fault.at not in ("row", "start") or (fault.at == "start" and fault.action == "delay"):
            raise ValueError(f"{FAULT_ENV}: at must be row or start (start: kill, stall or stop), "
                             f"not {fault.at!r}")
        return fault

    def before_clock(self, rank: int):
        """The delay to run before every sample's clock on `rank` (None: not this rank)."""
        if self.action != "delay" or rank != self.rank:
            return None
        return lambda: time.sleep(self.seconds)

    def at_start(self, rank: int) -> None:
        if self.at == "start" and rank == self.rank:
            self._act(rank, "as it starts")

    def after_row(self, rank: int, rows_done: int, on_disk: Callable[[], int] | None = None) -> None:
        """`on_disk()`: the rows the writer has kept so far. The writer records the same row at
        about the same time as this rank; waiting (10 s at most) until it has lets a test count
        the rows kept exactly (on a loaded machine the launcher's SIGTERM otherwise beat the
        writer's last row now and then)."""
        if self.at != "row" or rank != self.rank or rows_done != self.after_rows or self.action == "delay":
            return
        deadline = time.monotonic() + 10
        while on_disk is not None and on_disk() < rows_done and time.monotonic() < deadline:
            time.sleep(0.01)
        self._act(rank, f"after {rows_done} rows")

    def _act(self, rank: int, when: str) -> None:
        print(f"allreduce-bench: test fault: rank {rank} {self.action}s {when} "
              f"at t={time.time():.3f}", file=sys.stderr, flush=True)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(self.seconds)
