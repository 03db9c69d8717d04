"""Faults put on one emulated host on purpose, with every benchmark: a slower link (`--host-bandwidth
node2=100mbit`, its own tbf) and less CPU (`--host-cpu node2=25%`, the cgroup cpu controller's quota)."""
from __future__ import annotations

import contextlib
import math
import re
import time
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host import cgroups
from allreduce_bench.emulate import rates

# A 10 ms CFS period: a slower CPU, not one stopped for 50 ms at a time while the link idles (the
# kernel's 100 ms); the least quota is 1 ms, so shares under 10% get a longer period.
PERIOD_US, LEAST_QUOTA_US = 10_000, 1_000
_HOST = re.compile(r"^node(\d+)(:\d+)?$")


def cgroup_mounts(proc_cgroup: str | None = None) -> str:
    """Shell that mounts this machine's cgroup hierarchies (v1 each, or cgroup2) at /sys/fs/cgroup again
    inside an emulated host's fresh sysfs, so its ranks and slurmd find them; '' without cgroups."""
    proc_cgroup = cgroups.own() if proc_cgroup is None else proc_cgroup
    v1 = [controllers for controllers in cgroups.memberships(proc_cgroup) if controllers]
    if not v1:
        return "mount -t cgroup2 cgroup2 /sys/fs/cgroup" if proc_cgroup.strip() else ""
    steps = ["mount -t tmpfs cgroup /sys/fs/cgroup"]
    for controllers in v1:
        name = controllers.split("name=", 1)[1] if controllers.startswith("name=") else controllers
        options = f"none,{controllers}" if controllers.startswith("name=") else controllers
        steps.append(f"mkdir -p /sys/fs/cgroup/{name} && "
                     f"mount -t cgroup -o {options} cgroup /sys/fs/cgroup/{name}")
    return "; ".join(steps)


def _host(text: str, nodes: int, option: str) -> int:
    match = _HOST.match(text)
    if not match:
        raise UsageError(f"{option} {text!r}: name an emulated host node0..node{nodes - 1}, "
                         "e.g. node2=100mbit")
    if match.group(2):
        raise UsageError(f"{option} {text!r}: one rail of a host needs a veth per local rank, "
                         "which this emulator does not build; shape the whole host (node2=...)")
    index = int(match.group(1))
    if index >= nodes:
        raise UsageError(f"{option} {text!r}: there are only {nodes} hosts, node0..node{nodes - 1}")
    return index


def _pairs(items, nodes: int, option: str):
    for item in items:
        host, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"{option} {item!r} is not HOST=VALUE, e.g. node2=100mbit")
        yield _host(host.strip(), nodes, option), value.strip()


def parse_host_rates(items, nodes: int) -> dict[int, float]:
    """['node2=100mbit'] -> {2: 1e8} (bit/s)."""
    return {i: rates.parse_tc_rate(v) for i, v in _pairs(items, nodes, "--host-bandwidth")}


def parse_host_cpu(items, nodes: int) -> dict[int, float]:
    """['node2=25%'] -> {2: 0.25} (of one CPU)."""
    found = {}
    for i, value in _pairs(items, nodes, "--host-cpu"):
        match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*%", value)
        share = float(match.group(1)) / 100 if match else 0.0
        if not 0.01 <= share <= 64:
            raise UsageError(f"--host-cpu node{i}={value!r}: give a share of one CPU between 1% "
                             "and 6400%, e.g. node2=25%")
        found[i] = share
    return found


class CpuLimits:
    """One cgroup per limited host, `<prefix>-h<i>` in the cpu controller, removed at exit; each host's
    launch joins `procs(i)` before it execs torchrun."""

    def __init__(self, name: str, shares: dict[int, float], root: Path = cgroups.ROOT):
        self.name, self.shares = name, shares
        v1 = cgroups.v1_cpu_mount(root)
        self.v1, self.parent, self.usable = v1 is not None, v1 or root, v1 is not None or cgroups.is_v2(root)
        self.made: list[Path] = []

    def _dir(self, i: int) -> Path:
        return self.parent / f"{self.name}-h{i}"

    def __enter__(self) -> CpuLimits:
        if self.shares and not self.usable:
            raise UsageError("--host-cpu needs the cgroup cpu controller (v1 /sys/fs/cgroup/cpu or "
                             "v2 /sys/fs/cgroup), which is not mounted here")
        for i, share in self.shares.items():
            path = self._dir(i)
            path.mkdir()
            self.made.append(path)
            period = max(PERIOD_US, math.ceil(LEAST_QUOTA_US / share))
            quota = round(share * period)
            if self.v1:
                (path / "cpu.cfs_period_us").write_text(str(period))
                (path / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (path / "cpu.max").write_text(f"{quota} {period}")
        return self

    def procs(self, i: int) -> str | None:
        return str(self._dir(i) / "cgroup.procs") if i in self.shares else None

    def __exit__(self, *_exc) -> None:
        for path in self.made:  # empty once the namespaces' processes are gone
            for attempt in range(20):
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1 * (attempt + 1))


def stale_cgroups(alive) -> list[Path]:
    """Cgroups of emulate runs whose driver is gone (`alive(pid) -> bool`)."""
    root = cgroups.v1_cpu_mount() or cgroups.ROOT
    return [path for path in root.glob("arb-*-h*")
            if (match := re.match(r"^arb-(\d+)-", path.name)) and not alive(int(match.group(1)))]


def remove_cgroups(paths) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.rmdir()  # a cgroup with processes left stays; the next clean-up tries again
