"""A system (GPU model, GPUs per node, nodes, NICs) and the busbw its links allow at best: NVLink
on one node; across nodes also NICs per node x NIC rate, whatever the ranks per node (derived in
doc/methodology.md, "The link limit")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host.gpus import inventory
from allreduce_bench.expect.catalogue import link_row, model_of


@dataclass(frozen=True)
class System:
    device: str                     # a device name ('NVIDIA H100 80GB HBM3') or a model ('H100')
    gpus_per_node: int              # ranks per node
    nodes: int
    nics_per_node: int | None = None
    nic_Gbps: float | None = None   # one NIC's line rate
    intra_GBps: float | None = None  # NVLink as this host measured it (link_peaks), over the table
    said_by: str = "as given"       # where the facts come from

    @property
    def model(self) -> str | None:
        return model_of(self.device)

    def describe(self) -> str:
        nics = (f", {self.nics_per_node} x {self.nic_Gbps:g} Gb/s NICs per node" if self.nics_per_node and self.nic_Gbps
                else f", {self.nics_per_node} NICs per node (rate unknown)" if self.nics_per_node else "")
        return (f"{self.nodes or '?'} node(s) x {self.gpus_per_node} {self.model or self.device}{nics} "
                f"({self.said_by})")


@dataclass(frozen=True)
class Limit:
    GBps: float | None
    bound: str      # which bound applies, in words
    source: str


def _intra(system: System) -> tuple[float | None, str, str]:
    row = link_row(system.model)
    if system.intra_GBps:
        return system.intra_GBps, "NVLink as this host reports it", "nvidia-smi / NVML (link_peaks)"
    if row is None:
        return None, "", ""
    rate, what = float(row["intra_GBps"]), f"{row['fabric']} {row['intra_GBps']:g} GB/s per GPU"
    if row["peer_GBps"] == row["peer_GBps"] and system.gpus_per_node > 1:  # a mesh: one link per peer
        mesh = float(row["peer_GBps"]) * (system.gpus_per_node - 1)
        if mesh < rate:
            rate, what = mesh, f"{row['fabric']} {row['peer_GBps']:g} GB/s per peer x {system.gpus_per_node - 1} peers"
    return rate, what, f"{row['source']}: {row['where']}"


def link_limit(system: System) -> Limit:
    intra, intra_what, intra_source = _intra(system) if system.gpus_per_node > 1 else (None, "", "")
    if system.nodes == 1:
        if intra is None:
            return Limit(None, "no intra-node rate known for this GPU" if system.gpus_per_node > 1
                         else "one GPU: no link to bound it", "")
        return Limit(intra, f"intra-node: {intra_what} (NVLS can read above it)", intra_source)
    nic = system.nics_per_node * system.nic_Gbps / 8 if system.nics_per_node and system.nic_Gbps else None
    if nic is not None and system.nodes and (intra is None or nic <= intra):
        return Limit(nic, f"across nodes: {system.nics_per_node} x {system.nic_Gbps:g} Gb/s NICs per node "
                     f"(NVLSTree, Tree or SHARP on few nodes can read above it)",
                     "nccl-tests doc/PERFORMANCE.md, derived in doc/methodology.md")
    if intra is not None:
        unknown = ("; the nodes are not known (import --nodes), so this is an upper bound" if not system.nodes
                   else "" if nic is not None else
                   "; the NICs' rate is not known (--nics), so this is an upper bound")
        return Limit(intra, f"intra-node: {intra_what}{unknown}", intra_source)
    return Limit(None, "neither the NICs nor the GPU's fabric are known", "")


def parse_nics(text: str | None) -> tuple[int | None, float | None]:
    """'8x400' (count x Gb/s) -> (8, 400.0); None -> (None, None)."""
    if not text:
        return None, None
    match = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*([\d.]+)\s*(?:Gb/?s|G|Gbps)?\s*", text)
    if not match or int(match.group(1)) < 1 or float(match.group(2)) <= 0:
        raise UsageError(f"--nics {text!r}: write NICs per node x Gb/s each, e.g. 8x400")
    return int(match.group(1)), float(match.group(2))


def detect(nodes: int = 1, sys_class: Path = Path("/sys/class")) -> System | None:
    """This host's GPUs and NIC ports; None without an NVIDIA GPU."""
    from allreduce_bench.core.measure.link_peaks import nic_peaks

    gpus = inventory()
    if not gpus:
        return None
    ports = nic_peaks(sys_class)  # RDMA ports (IB or RoCE), else Ethernet ones
    rates = sorted({p["rate_GBps"] for p in ports})
    return System(gpus[0].name, len(gpus), nodes, len(ports) or None, rates[-1] * 8 if rates else None,
                  said_by="detected on this host: nvidia-smi, /sys/class/infiniband")
