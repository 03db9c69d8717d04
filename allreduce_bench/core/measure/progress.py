"""Where each rank is in the sweep, published in the launch's store, so a failure names the step and the rank
that fell behind in one end line per process (doc/faults.md)."""
from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist

from allreduce_bench.core.environment import under_elastic_agent
from allreduce_bench.core.errors import PEER_LOST_EXIT, TERMINATED_EXIT
from allreduce_bench.core.host.processes import process_state
from allreduce_bench.core.text import wrapped

DONE = 1 << 30  # step value at the barrier that ends a phase
HEARTBEAT_S = 1.0  # a Board's heartbeat
STORE_WAIT_S = 2.0  # how long a failed rank waits on the store before it gives up on it
# a rank that gives up stays this long: peers may still read the store it hosts
MIN_LINGER_S = 1.0


def store_host() -> str:
    return "agent" if under_elastic_agent() else "rank 0"


def store_reachable(master: tuple[str | None, int | None], timeout_s: float = 1.0) -> bool:
    """Whether anything listens at the store's address: a socket costs no warnings from torch's client."""
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


class Board:
    """The one liveness protocol over the launch's c10d store: JSON values, counters and a heartbeat."""

    def __init__(self, name: str, rank: int, beat: bool = True):
        self.store = dist.PrefixStore(f"allreduce-bench/{name}/", dist.distributed_c10d._get_default_store())
        self.rank = rank
        self._stop = threading.Event()
        self.beaten = time.monotonic()  # when a heartbeat last went through
        if beat:
            threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat").start()

    def _heartbeat(self) -> None:
        while not self._stop.is_set():
            try:
                self.store.add(f"alive/{self.rank}", 1)
            except (RuntimeError, OSError):  # the store's host is gone: the main loop says so
                return
            self.beaten = time.monotonic()
            self._stop.wait(HEARTBEAT_S)

    def unanswered_s(self) -> float:
        """Seconds since the store last took a heartbeat (a cut-off host hangs calls)."""
        return time.monotonic() - self.beaten

    def close(self) -> None:
        self._stop.set()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def put(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value))

    def has(self, key: str) -> bool:
        return self.store.check([key])

    def get(self, key: str):
        return json.loads(self.store.get(key))

    def add(self, key: str, amount: int = 1) -> int:
        """The counter under `key` after adding `amount` (0 reads it)."""
        return int(self.store.add(key, amount))

    def beats(self, rank: int) -> int:
        return self.add(f"alive/{rank}", 0)


class Liveness:
    """Which ranks stopped beating: a counter unchanged for `timeout_s` since first watched."""

    def __init__(self, board: Board, timeout_s: float):
        self.board, self.timeout_s = board, timeout_s
        self._seen: dict[int, tuple[int, float]] = {}

    def silent(self, rank: int) -> bool:
        now, beats = time.monotonic(), self.board.beats(rank)
        last = self._seen.get(rank)
        if last is None or last[0] != beats:
            self._seen[rank] = (beats, now)
            return False
        return now - last[1] > self.timeout_s


class Progress:
    """Where this rank is on the Board and, once a collective failed, which ranks it waits on."""

    def __init__(self, rank: int, world_size: int, master: tuple[str | None, int | None] = (None, None)):
        self.rank, self.members, self.master = rank, tuple(range(world_size)), master
        self.phase, self.step, self.where = 0, 0, "start-up"
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.lost: dict[int, str] = {}  # what `missing` found: rank -> its state ('' when only behind)
        self.end = EndLine()  # this process's one end line
        try:  # private but long-standing; without it only the missing rank goes unnamed
            self.board: Board | None = Board("progress", rank, beat=False)
        except Exception:
            self.board = None
        self._publish()

    def at(self, phase: int, step: int, where: str, members: tuple[int, ...]) -> None:
        self.phase, self.step, self.where, self.members = phase, step, where, members
        self._publish()

    def _publish(self, gave_up: bool = False) -> None:
        if self.board is not None:
            try:
                self.board.put(str(self.rank), [self.phase, self.step, self.pid, self.host, gave_up])
            except Exception:
                self.board = None

    def missing(self) -> str:
        """Which ranks this failure waits on: 'missing rank 1', 'missing ranks 1,3 (1 frozen)', ..."""
        host_is_rank0 = store_host() == "rank 0" and self.rank != 0 and 0 in self.members
        if self.board is None:
            return "missing rank unknown"
        gone = "missing rank 0 (the store's host) is gone"
        # a killed process's listening socket may outlive its connections by milliseconds
        if host_is_rank0 and not (store_reachable(self.master) and _settled() and store_reachable(self.master)):
            return gone
        # a stopped store host accepts but never answers: ask from a thread, with a deadline
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
        """Ranks behind my step, or stopped or dead on this host, with that state; None if unknown."""
        board = self.board
        if board is None:
            return None
        try:
            board.store.set_timeout(_dt.timedelta(seconds=STORE_WAIT_S))
            # I gave up too: a peer that finds me gone later must not blame me
            board.put(str(self.rank), [self.phase, self.step, self.pid, self.host, True])
            found: dict[int, str] = {}
            for rank in self.members:
                if rank == self.rank:
                    continue
                if not board.has(str(rank)):
                    found[rank] = ""  # never got as far as start-up
                    continue
                phase, step, pid, host, gave_up = board.get(str(rank))
                if gave_up:
                    continue  # failed like me, waiting on the same missing rank(s)
                state = process_state(int(pid)) if host == self.host else None
                if state or (int(phase), int(step)) < (self.phase, self.step):
                    found[rank] = state or ""
            return found
        except Exception:
            return None


LOST_MARK = "lost-"  # + the rank: the ranks a rank of a local world gave up on, for its driver


def leave_lost(folder: str, rank: int, progress: Progress) -> None:
    """What `missing` found, as JSON in a local world's reasons folder, for its driver."""
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


class EndLine:
    """One end line per process: the main thread's or the SIGTERM watcher's, whichever claims first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed, self._written = threading.Event(), threading.Event()
        self._owner: int | None = None  # the thread that claimed

    def claim(self) -> bool:
        with self._lock:
            if self._owner is None:
                self._owner = threading.get_ident()
                self._claimed.set()
            return self._owner == threading.get_ident()

    def claim_or_wait(self) -> None:
        """Claim the end line; lost, the other thread is writing it and ends the process."""
        if not self.claim():
            time.sleep(60)
            os._exit(PEER_LOST_EXIT)

    def claimed(self, within_s: float) -> bool:
        return self._claimed.wait(within_s)

    def wait_written(self) -> None:
        self._written.wait()

    def exit(self, line: str, code: int = PEER_LOST_EXIT, linger_s: float = 0.0) -> None:
        """Print one line and leave at once; `linger_s` lets a launcher see the peer that died first."""
        self.claim_or_wait()
        leave(line, code, linger_s, written=self._written)


def leave(line: str, code: int = PEER_LOST_EXIT, linger_s: float = 0.0,
          written: threading.Event | None = None) -> None:
    """Print `line` in one write and exit; a rank that gave up lingers, as it may serve the store."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the line below still goes to fd 2
            pass
    try:
        os.write(2, (wrapped(line) + "\n").encode())
    except OSError:
        pass
    if written is not None:
        written.set()
    gave_up = code in (PEER_LOST_EXIT, TERMINATED_EXIT)
    time.sleep(max(linger_s, MIN_LINGER_S) if gave_up else linger_s)
    os._exit(code)
