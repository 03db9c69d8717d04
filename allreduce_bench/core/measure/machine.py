"""What decides whether this machine's noise reaches the numbers, from /proc and /sys; None off Linux."""
from __future__ import annotations

import os
from pathlib import Path

from allreduce_bench.core.host import read_stripped

CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")
PROC_STAT = Path("/proc/stat")
# /proc/stat's `cpu` line: user nice system idle iowait irq softirq steal (guest counted in user)
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpus_allowed() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpuidle(root: Path = CPUIDLE) -> dict:
    """{"driver": ..., "governor": ...}: None where sysfs does not say."""
    return {"driver": read_stripped(root / "current_driver"),
            "governor": read_stripped(root / "current_governor_ro") or read_stripped(root / "current_governor")}


def cpu_times(path: Path = PROC_STAT) -> dict | None:
    """The whole machine's CPU time so far in clock ticks, per /proc/stat field; None if unreadable."""
    text = read_stripped(path)
    if not text:
        return None
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(STAT_FIELDS)]]
            return dict(zip(STAT_FIELDS, values + [0] * (len(STAT_FIELDS) - len(values))))
    return None


def _share(start: dict | None, end: dict | None, fields: tuple[str, ...]) -> float | None:
    """The share of all CPU time between two `cpu_times` that `fields` took; None when unknown."""
    if not start or not end:
        return None
    total = sum(end.get(k, 0) - start.get(k, 0) for k in STAT_FIELDS)
    return None if total <= 0 else sum(end.get(k, 0) - start.get(k, 0) for k in fields) / total


def steal_share(start: dict | None, end: dict | None) -> float | None:
    """The share of CPU time between two `cpu_times` the hypervisor gave to others (steal)."""
    return _share(start, end, ("steal",))


def busy_share(start: dict | None, end: dict | None) -> float | None:
    idle = _share(start, end, ("idle", "iowait"))
    return None if idle is None else 1.0 - idle


def others_share(start: dict | None, end: dict | None, own_s: float | None) -> float | None:
    """The share of CPU time processes other than this run's took (busy time less `own_s`): unlike the load
    average, what ran during the run."""
    if not start or not end or own_s is None:
        return None
    total = sum(end.get(k, 0) - start.get(k, 0) for k in STAT_FIELDS)
    idle = sum(end.get(k, 0) - start.get(k, 0) for k in ("idle", "iowait", "steal"))
    if total <= 0:
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return min(1.0, max(0.0, (total - idle - own_s * tick) / total))


def own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children: the local ranks."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def facts_at_start() -> dict:
    return {"cpus_allowed": cpus_allowed(), "cpu_count": os.cpu_count(),
            "cpuidle": cpuidle(), "load_average_start": load_average(),
            "cpu_times_start": cpu_times(), "own_cpu_s_start": own_cpu_s()}


def facts_at_end(started: dict, ranks_are_children: bool = False) -> dict:
    """`started` completed over the run; with `ranks_are_children` the share others took."""
    end = cpu_times()
    start = started.get("cpu_times_start")
    own = started.get("own_cpu_s_start")
    own_s = own_cpu_s() - own if ranks_are_children and own is not None else None
    return {**started, "load_average_end": load_average(), "cpu_times_end": end,
            "steal_share": steal_share(start, end), "busy_share": busy_share(start, end),
            "others_share": others_share(start, end, own_s)}
