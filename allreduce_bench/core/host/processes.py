"""This host's processes (psutil): the ranks a local run spawned, whether one can answer, signals."""
from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

# a stopped process (SIGSTOP, a debugger) never answers; a zombie or dead one is gone
_STATES = {psutil.STATUS_STOPPED: "frozen", psutil.STATUS_TRACING_STOP: "frozen",
           psutil.STATUS_ZOMBIE: "gone", psutil.STATUS_DEAD: "gone"}


def spawned_ranks(parent: int | None = None) -> list[int]:
    """The children of `parent` started by multiprocessing's spawn, in pid (rank) order."""
    try:
        children = psutil.Process(parent).children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if any("spawn_main" in word for word in child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return sorted(found)


def process_state(pid: int) -> str | None:
    """'gone' or 'frozen' for a process of this host that cannot answer; None if it can."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return None
    return _STATES.get(status)


def send(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
