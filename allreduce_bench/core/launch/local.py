"""How ranks come to exist locally (torch's launcher on this host), and the line saying why one failed."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from allreduce_bench.core.environment import expand_nodelist, is_writer, launcher_env
from allreduce_bench.core.errors import PEER_LOST_EXIT, UsageError
from allreduce_bench.core.host.processes import process_state, send, spawned_ranks
from allreduce_bench.core.launch.reasons import first_reason

LOCAL_SHUTDOWN_S = 3  # a local run's launcher waits this long after SIGTERM before SIGKILL


# ---- a local world -------------------------------------------------------------------------

def quiet_elastic_logs() -> None:
    """torch's launcher logs every start and stop: keep what breaks it only."""
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher",
                "torch.multiprocessing.spawn")
    for name in list(logging.root.manager.loggerDict) + list(prefixes):
        if name.startswith(prefixes):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _watch_stopped_ranks(nprocs: int, done: threading.Event, killed: list[int], marks: Path) -> None:
    """Wake a stopped (SIGSTOP) rank once a sibling ended, so torch's SIGTERM reaches it; kill it (into
    `killed`) once every other rank returned, as torch would wait for it for ever."""
    if not os.path.isdir("/proc"):
        return
    pids: set[int] = set()
    left_before = False
    while not done.wait(0.5):
        if len(pids) < nprocs:
            pids.update(spawned_ranks())
        states = {pid: process_state(pid) for pid in pids}
        frozen = [pid for pid, state in states.items() if state == "frozen"]
        if frozen and "gone" in states.values():
            send(frozen, signal.SIGCONT)
            continue
        returned = {pid for pid in pids if (marks / f"returned-{pid}").exists()}
        left = bool(frozen and returned) and len(pids) == nprocs and set(frozen) | returned == pids
        if left and left_before:  # twice in a row: not a stop that passes
            killed.extend(frozen)
            send(frozen, signal.SIGKILL)
        left_before = left


def launch_local(nprocs: int, entrypoint: Callable, *args, marks: str | Path | None = None) -> dict[int, object]:
    """`nprocs` ranks on this host under torch's elastic launcher, on loopback (a port the OS picks); each
    rank's return value. Raises ChildFailedError or SignalException."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: ranks share the cores
    # ranks the launcher stopped leave semaphores the tracker would warn about: nothing is lost
    os.environ.setdefault("PYTHONWARNINGS", "ignore:resource_tracker:UserWarning")
    quiet_elastic_logs()
    options: dict[str, Any] = {}  # keywords of torch's LaunchConfig
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        # the SIGKILL after SIGTERM, for a stopped rank; ours hold nothing worth torch's 30 s
        options["shutdown_timeout"] = LOCAL_SHUTDOWN_S
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nprocs, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0,
        monitor_interval=0.1, start_method="spawn", **options)
    done, killed = threading.Event(), list[int]()
    threading.Thread(target=_watch_stopped_ranks, args=(nprocs, done, killed, Path(marks or os.devnull)),
                     daemon=True).start()
    try:
        return elastic_launch(config, entrypoint)(*args)
    except ChildFailedError as error:
        # the pids the watcher killed (the driver says so), on torch's error: not one of its fields
        error.abandoned = sorted(killed)  # type: ignore[attr-defined]
        raise
    finally:
        done.set()


def _how(failure) -> str:
    if failure.exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-failure.exitcode).name}"
        except ValueError:
            return f"was killed by signal {-failure.exitcode}"
    if failure.exitcode == PEER_LOST_EXIT:
        return "gave up on a peer that stopped answering (see its line above)"
    return f"exited with code {failure.exitcode}"


def _ordered(error: BaseException) -> list:
    """(rank, failure) of a failed local world, a rank killed by a signal first, then by time."""
    failures = getattr(error, "failures", {}) or {}
    return sorted(failures.items(), key=lambda kv: (kv[1].exitcode >= 0, kv[1].timestamp, kv[0]))


def describe_failure(error: BaseException) -> str:
    """One line for a failed local world: which rank died first and how."""
    ordered = _ordered(error)
    if not ordered:
        return f"a rank failed: {error}"
    first_rank, first = ordered[0]
    line = f"rank {first_rank} (pid {first.pid}) {_how(first)}"
    others = [str(r) for r, _ in ordered[1:]]
    if others:
        line += f"; rank(s) {','.join(others)} stopped after it"
    return line


def stopped_record(error: BaseException, reason_dir) -> dict:
    """meta.json's `stopped`: which rank, where, how and when: one killed by a signal, else one that left a
    reason, else the rank the others gave up on, else the first that failed."""
    from allreduce_bench.core.measure.progress import LOST_MARK  # torch: not for the shell scripts' _main

    ordered = _ordered(error)
    rank, failure = ordered[0] if ordered else (None, None)
    how, at = (_how(failure), failure.timestamp) if failure else ("failed", time.time())
    marks = []
    for path in Path(reason_dir).glob(f"{LOST_MARK}*"):
        try:
            marks.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    first = min((m for m in marks if m["lost"]), key=lambda m: m["t"], default=None)
    if not (failure and failure.exitcode < 0):
        if (found := first_reason(reason_dir)) is not None:
            rank, how = found
        elif first is not None:  # the ranks that gave up name whom they waited on
            rank = min(map(int, first["lost"]))
            state = first["lost"][str(rank)]
            how, at = f"stopped answering{f' ({state})' if state else ''} at {first['where']}", first["t"]
    return {"host": socket.gethostname(), "rank": rank, "how": how,
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(at))}


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "first-host":
        try:
            print(expand_nodelist(argv[1])[0])
        except UsageError as error:
            print(f"allreduce-bench: error: {error}", file=sys.stderr)
            return 2
        return 0
    print("usage: python -m allreduce_bench.core.launch first-host NODELIST", file=sys.stderr)
    return 2


def announce(line: str) -> None:
    """Print a start line once per run: by rank 0 under a launcher, else by this driver."""
    if is_writer(launcher_env()):
        from allreduce_bench.core.text import wrapped

        print(wrapped(line), file=sys.stderr, flush=True)
