"""This process's cgroup (v1 or v2): its cpuset, the tightest CPU quota over it and its throttling. Best effort."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from allreduce_bench.core.host import read_stripped

ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
# the cpuset's CPUs (a container's or a Slurm job's): v2, then v1
CPUSET_FILES = ("cpuset.cpus.effective", "cpuset/cpuset.effective_cpus")


def own() -> str:
    return read_stripped(PROC_CGROUP) or ""


def memberships(proc_cgroup: str) -> dict[str, str]:
    """{controllers: path} from /proc/self/cgroup's text (v2's under '')."""
    found = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found[parts[1]] = parts[2]
    return found


def v1_cpu_mount(root: Path = ROOT) -> Path | None:
    """Where the v1 cpu controller is mounted (None on v2 or without it)."""
    return next((root / m for m in V1_CPU_MOUNTS if (root / m / "cpu.cfs_quota_us").exists()), None)


def is_v2(root: Path = ROOT) -> bool:
    return (root / "cgroup.controllers").exists()


def cpuset(root: Path = ROOT) -> str | None:
    """The CPUs the cgroup allows, in cpulist notation; None where it does not say."""
    return next((text for name in CPUSET_FILES if (text := read_stripped(root / name))), None)


def _stat(text: str | None) -> dict[str, int]:
    found = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            found[key] = int(value)
    return found


def _v1_quota(directory: Path) -> float | None:
    quota, period = read_stripped(directory / "cpu.cfs_quota_us"), read_stripped(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _v2_quota(directory: Path) -> float | None:
    text = read_stripped(directory / "cpu.max")
    if not text or text.split()[0] == "max":
        return None
    quota, period = text.split()[:2]
    return int(quota) / int(period)


def _ancestors(root: Path, path: str) -> list[Path]:
    """The cgroup directories from this process's own up to the root."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def cpu_throttle(root: Path = ROOT, proc_cgroup: str | None = None) -> dict[str, Any]:
    """The tightest CPU quota over this process's cgroup and its ancestors, and that cgroup's throttling."""
    text = own() if proc_cgroup is None else proc_cgroup
    groups = memberships(text)
    v1 = next((path for controllers, path in groups.items() if "cpu" in controllers.split(",")), None)
    v2, mount = groups.get(""), v1_cpu_mount(root)
    candidates = []
    if v1 is not None and mount is not None:
        candidates += [(d, _v1_quota(d), "throttled_time", 1e-9) for d in _ancestors(mount, v1)]
    if v2 is not None and is_v2(root):
        candidates += [(d, _v2_quota(d), "throttled_usec", 1e-6) for d in _ancestors(root, v2)]
    limited = [(d, quota, key, scale) for d, quota, key, scale in candidates if quota is not None]
    if not limited:
        return {"quota_cpus": None, "nr_throttled": 0, "throttled_s": 0.0, "cgroup": None}
    directory, quota, key, scale = min(limited, key=lambda c: c[1])
    stat = _stat(read_stripped(directory / "cpu.stat"))
    return {"quota_cpus": round(quota, 4), "nr_throttled": stat.get("nr_throttled", 0),
            "throttled_s": stat.get(key, 0) * scale, "cgroup": str(directory)}


def throttled_since(start: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    return {"quota_cpus": now["quota_cpus"], "cgroup": now.get("cgroup"),
            "nr_throttled": max(0, now["nr_throttled"] - start["nr_throttled"]),
            "throttled_s": round(max(0.0, now["throttled_s"] - start["throttled_s"]), 4)}
