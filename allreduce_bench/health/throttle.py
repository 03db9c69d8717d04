"""Is this rank's CPU throttled? The kernel's own counters, read for the health check.

A rank under a CFS quota (a container's CPU limit, `emulate --host-cpu`) that exhausts it is
stopped until the next period: the kernel counts those periods (`nr_throttled`) and the time
(`throttled_time` ns in cgroup v1, `throttled_usec` in v2) in the `cpu.stat` of the cgroup that
holds the quota. Timing alone cannot always tell such a host apart: where every rank shares a
few cores (the emulated cluster), its neighbours get no more CPU than the quota either, and a
rank waiting on the wire needs little. The counters say it directly, as nvidia-smi's clock
event reasons say it for a GPU held back by power or heat (read with `gpu_events`).

Read-only, best effort: no cgroup, no cpu controller or no quota gives `quota_cpus` None and
zero counts. Each value is cumulative; the check reports the difference since its start.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def _own_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """(v1 cpu controller path, v2 path) of this process, from /proc/self/cgroup's text."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "cpu" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    return v1, v2


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stat(text: str | None) -> dict[str, int]:
    found = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            found[key] = int(value)
    return found


def _v1_quota(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _v2_quota(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if not text or text.split()[0] == "max":
        return None
    quota, period = text.split()[:2]
    return int(quota) / int(period)


def _ancestors(root: Path, path: str) -> list[Path]:
    """The cgroup directories from this process's own up to the root, own first."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [root.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def cpu_throttle(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> dict:
    """{quota_cpus, nr_throttled, throttled_s, cgroup}: the tightest CPU quota over this
    process's cgroup and its ancestors, and that cgroup's throttling counters."""
    text = proc_cgroup if proc_cgroup is not None else (_read(Path("/proc/self/cgroup")) or "")
    v1, v2 = _own_paths(text)
    candidates = []
    if v1 is not None:
        for mount in V1_MOUNTS:
            if (root / mount).is_dir():
                candidates += [(d, _v1_quota(d), "throttled_time", 1e-9) for d in _ancestors(root / mount, v1)]
                break
    if v2 is not None and (root / "cgroup.controllers").exists():
        candidates += [(d, _v2_quota(d), "throttled_usec", 1e-6) for d in _ancestors(root, v2)]
    limited = [c for c in candidates if c[1] is not None]
    if not limited:
        return {"quota_cpus": None, "nr_throttled": 0, "throttled_s": 0.0, "cgroup": None}
    directory, quota, key, scale = min(limited, key=lambda c: c[1])
    stat = _stat(_read(directory / "cpu.stat"))
    return {"quota_cpus": round(quota, 4), "nr_throttled": stat.get("nr_throttled", 0),
            "throttled_s": stat.get(key, 0) * scale, "cgroup": str(directory)}


def since(start: dict, now: dict) -> dict:
    """The throttling between two readings (the quota as now)."""
    return {"quota_cpus": now["quota_cpus"], "cgroup": now.get("cgroup"),
            "nr_throttled": max(0, now["nr_throttled"] - start["nr_throttled"]),
            "throttled_s": round(max(0.0, now["throttled_s"] - start["throttled_s"]), 4)}


def gpu_events(gpu: str | None) -> list[str]:
    """The active clock event (throttle) reasons of the GPU nvidia-smi's --id names `gpu`
    (CudaDevice.physical_id), other than idle; [] where nvidia-smi is missing or says nothing,
    or the GPU has no such id. Newer drivers call them clocks_event_reasons, older ones
    clocks_throttle_reasons."""
    if gpu is None:
        return []
    fields = ["gpu_idle", "sw_power_cap", "hw_slowdown",
              "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        query = ",".join(f"{prefix}.{f}" for f in fields)
        try:
            done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader",
                                   f"--id={gpu}"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return []
        if done.returncode == 0 and done.stdout.strip():
            values = [v.strip() for v in done.stdout.strip().split(",")]
            return [f for f, v in zip(fields, values) if v == "Active" and f != "gpu_idle"]
    return []
