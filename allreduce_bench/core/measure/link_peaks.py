"""The peak bandwidth of the links a run crosses (NVLink, NIC ports, else a probe on CPU), for busbw's share."""
from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

from allreduce_bench.core.host import gpus

PROBE_BYTES = 8 << 20  # the largest probe message: a fast link's transfer outlasts its latency
PROBE_ROUNDS = 5
# one transfer takes about PROBE_TARGET_S: the other ranks wait for it under --timeout
PROBE_SIZING_BYTES = 64 << 10
PROBE_TARGET_S = 0.05


def parse_rate_file(text: str) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 50.0 GB/s."""
    match = re.match(r"\s*([\d.]+)\s*Gb/sec", text)
    return float(match.group(1)) / 8 if match else None


# ---- what this host can tell -------------------------------------------------------------------

def nic_peaks(root: Path = Path("/sys/class")) -> list[dict]:
    """Active InfiniBand/RoCE ports with their rates; physical Ethernet ports when there are none."""
    found = []
    for port in sorted((root / "infiniband").glob("*/ports/*")):
        try:
            state = (port / "state").read_text()
            rate = parse_rate_file((port / "rate").read_text())
        except OSError:
            continue
        layer = (port / "link_layer").read_text().strip() if (port / "link_layer").exists() else ""
        if rate and "ACTIVE" in state:
            found.append({"name": port.parent.parent.name, "port": port.name, "rate_GBps": rate,
                          "layer": layer or "InfiniBand"})
    if found:
        return found
    for interface in sorted((root / "net").glob("*")):
        try:
            if not (interface / "device").exists() or (interface / "operstate").read_text().strip() != "up":
                continue
            speed = int((interface / "speed").read_text())
        except (OSError, ValueError):
            continue
        if speed > 0:
            found.append({"name": interface.name, "rate_GBps": speed / 8000.0, "layer": "Ethernet"})
    return found


def local_peaks(device) -> dict:
    """This rank's view: its GPU's NVLink and its node's NICs."""
    found: dict[str, Any] = {"host": socket.gethostname(), "nics": nic_peaks()}
    if getattr(device, "kind", "cpu") == "cuda":
        physical = device.physical_id
        links = gpus.nvlinks(physical) if physical else {
            "how": "CUDA_VISIBLE_DEVICES names GPUs by UUID and torch < 2.4 gives none"}
        found["gpu"] = {"index": device.torch_device.index, **links}
    return found


def probe(rank: int, group=None, largest: int = PROBE_BYTES,
          rounds: int = PROBE_ROUNDS) -> tuple[float, int] | None:
    """Point-to-point GB/s between ranks 0 and 1 (half a ping-pong, best of `rounds`) and its message size."""
    import torch
    import torch.distributed as dist

    from allreduce_bench.core.measure.device import Device

    if rank > 1:
        return None
    peer, clock = 1 - rank, Device()

    def ping_pong(buffer) -> float:
        start = clock.stamp()
        if rank == 0:
            dist.send(buffer, peer, group=group)
            dist.recv(buffer, peer, group=group)
        else:
            dist.recv(buffer, peer, group=group)
            dist.send(buffer, peer, group=group)
        return clock.elapsed_us(start, clock.stamp()) / 2e6

    size_bytes = _agreed_size(rank, peer, largest, group, ping_pong)
    buffer = torch.zeros(size_bytes // 4, dtype=torch.float32)
    times = [ping_pong(buffer) for _ in range(rounds + 2)][2:]  # two warm-ups
    best = min(times, default=0.0)
    return (size_bytes / best / 1e9, size_bytes) if best > 0 else None


def probe_size(small_bytes: int, seconds: float, largest: int) -> int:
    """The probe's message: what moves in PROBE_TARGET_S at the rate measured, within the bounds."""
    rate = small_bytes / seconds if seconds > 0 else float("inf")
    fits = min(float(largest), max(float(small_bytes), rate * PROBE_TARGET_S))
    return int(fits) // 4 * 4


def _agreed_size(rank: int, peer: int, largest: int, group, ping_pong) -> int:
    """`probe_size` at the first message (growing 4x) that outlasts a shaped link's burst; rank 0 decides."""
    import torch
    import torch.distributed as dist

    size = min(PROBE_SIZING_BYTES, largest) // 4 * 4
    ping_pong(torch.zeros(size // 4, dtype=torch.float32))
    while True:
        buffer = torch.zeros(size // 4, dtype=torch.float32)
        seconds = min(ping_pong(buffer) for _ in range(2))
        step = torch.zeros(2, dtype=torch.int64)  # (next size, 1 when it is the probe's)
        if rank == 0:
            done = size >= largest or seconds >= PROBE_TARGET_S / 4
            step[0] = probe_size(size, seconds, largest) if done else min(largest, 4 * size) // 4 * 4
            step[1] = int(done)
            dist.send(step, peer, group=group)
        else:
            dist.recv(step, peer, group=group)
        size = int(step[0])
        if step[1]:
            return size


def world_peaks(per_rank: list[dict], probe_GBps: float | None = None) -> dict:
    """Each link class's peak for the world: the slowest rank's NVLink, the weakest node's NICs, or the probe."""
    gpus: list[Any] = [r.get("gpu") for r in per_rank]
    intra = how_intra = None
    if gpus and all(g and g.get("nvlink_GBps") for g in gpus):
        intra = min(g["nvlink_GBps"] for g in gpus)
        how_intra = f"NVLink: {min(g['nvlink_links'] for g in gpus)} links ({gpus[0]['how']})"
    elif not any(gpus) and probe_GBps:
        intra, how_intra = probe_GBps, "point-to-point probe, rank 0 <-> 1"
    per_host: dict[str, float] = {}
    for r in per_rank:
        per_host.setdefault(r["host"], sum(n["rate_GBps"] for n in r.get("nics", [])))
    inter = how_inter = None
    if len(per_host) > 1 and all(per_host.values()):
        inter = min(per_host.values())
        how_inter = "sum of each node's active NIC ports (the slowest node)"
    elif len(per_host) == 1 and probe_GBps and not any(gpus):
        inter, how_inter = probe_GBps, "one host: simulated nodes share the probe's loopback"
    return {"intra_GBps": intra, "intra_how": how_intra, "inter_GBps": inter, "inter_how": how_inter}
