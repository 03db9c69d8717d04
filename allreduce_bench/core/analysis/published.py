""""Is this normal?": a run's peak busbw against published AllReduce figures, with sources.

A small table of what others measured (nccl-tests or torch, large sizes, busbw in GB/s) and a
match by GPU model, node count and rank count. Pure: reads DataFrames and meta.json only.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from allreduce_bench.core.analysis.tables import label_runs, peak_busbw, run_metas
from allreduce_bench.core.units import format_size

ALAYA = "docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests"
SATURN = "saturncloud.io/blog/crusoe-nccl-cluster-validation"
LOGS = "published log {} (shared/data/published-logs): {}"


@dataclass(frozen=True)
class Reference:
    gpu: str            # matched in the device name, case-insensitive
    multi_node: bool
    ranks: int | None   # None: any rank count
    low_GBps: float
    high_GBps: float
    what: str
    source: str
    not_in_name: str = ""  # e.g. PCIe cards are another class than SXM

    def matches(self, device: str, nodes: int | None, ranks: int) -> bool:
        """Same GPU model, one node or several (either, when unknown), same rank count if given."""
        name = device.lower()
        return (self.gpu.lower() in name and not (self.not_in_name and self.not_in_name.lower() in name)
                and (nodes is None or self.multi_node == (nodes > 1)) and self.ranks in (None, ranks))


REFERENCES = [
    Reference("H100", False, 8, 460, 480, "8x H100 SXM5, NVLink 4 + NVSwitch (NVLS), nccl-tests, large sizes",
              ALAYA, "PCIe"),
    Reference("H100", False, 4, 367, 367, "4x H100 80GB HBM3, torch 2.7 + NCCL 2.26.2, 16 GiB",
              LOGS.format(13, "dudeperf3ct.github.io distributed_communication_part1.md @ df41159"), "PCIe"),
    Reference("H100 PCIe", False, 8, 35, 45, "8x H100 PCIe without NVSwitch", ALAYA),
    Reference("A100", False, 8, 230, 250, "8x A100 SXM4, NVLink 3, nccl-tests, large sizes", ALAYA),
    Reference("A100", True, 16, 189, 189, "2x DGX A100, 8x HDR 200G per node, nccl-tests at 4 GiB",
              LOGS.format("04", "NVIDIA/deepops nvidia-network-operator.md @ 3957a42")),
    Reference("A100", True, None, 250, 300, "A100 SXM nodes, NVLink + IB HDR, >= 8 GB", SATURN),
    Reference("H100", True, None, 400, 450, "H100 SXM nodes, NVLink + IB NDR, >= 8 GB", SATURN, "PCIe"),
    Reference("H200", True, None, 400, 450, "H200 SXM nodes, NVLink + IB NDR, >= 8 GB", SATURN, "GH200"),
    Reference("GH200", True, 8, 123, 123, "2 nodes x 4 GH200, Slingshot, nccl-tests 2.17.1 at 128 MiB",
              LOGS.format("09", "eth-cscs/cscs-docs communication/nccl.md @ 80abed1")),
    Reference("GH200", True, 2, 22.9, 22.9, "2 nodes x 1 GH200, Slingshot, nccl-tests 2.18.2 at 128 MiB",
              LOGS.format(10, "eth-cscs/cscs-docs sarus-suite/index.md @ 80abed1")),
    Reference("V100", True, 16, 15.8, 15.8, "2 nodes x 8 V100 (AWS), NCCL 2.4.6, at 4 GiB",
              LOGS.format("01", "GoogleCloudPlatform/PerfKitBenchmarker nccl_output.txt @ 9fd5c18")),
]
# Per InfiniBand NDR (400 Gb/s = 50 GB/s line rate) NIC, across nodes: the figure, no
# external source; used when a run's meta.json lists its NICs.
NDR_PER_NIC = (46.0, 49.0)


def _device(meta: dict) -> str:
    gpus = meta.get("gpus") or []
    if gpus and isinstance(gpus[0], dict) and gpus[0].get("name"):
        return str(gpus[0]["name"])
    names = meta.get("device_names") or []
    return str(names[0] if names else meta.get("device_name") or meta.get("device") or "?")


def _ndr_nics(meta: dict, world_size: int) -> int:
    """NDR-rate NIC ports per node, from the peaks a run recorded (0 when unknown)."""
    recorded = (meta.get("peaks") or {}).get(str(world_size)) or {}
    first: dict = next(iter(recorded.get("per_rank") or []), {})
    return sum(1 for n in first.get("nics", []) if abs(n.get("rate_GBps", 0) - 50.0) < 1)


def judge(measured: float, low: float, high: float) -> str:
    if measured < 0.9 * low:
        return f"low: {100 * measured / low:.0f}% of the published low end"
    if measured > 1.1 * high:
        return "above the published figure"
    return "normal"


def normal_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Per series and world size: peak busbw, % of its link peak, the closest published figure."""
    peaks = peak_busbw(frame).reset_index()
    if peaks.empty:
        return pd.DataFrame()
    labelled = label_runs(frame)
    run_of = labelled.groupby("series")["run"].first()
    metas = run_metas(frame)
    rows = []
    for (series, world_size), group in peaks.groupby(["series", "world_size"], sort=False):
        best = group.loc[group["peak_busbw_GBps"].idxmax()]
        if "native" in set(group["algorithm"]):
            best = group[group["algorithm"] == "native"].iloc[0]
        meta = metas.get(run_of.get(series, ""), {})
        rows_here = labelled[(labelled["series"] == series) & (labelled["world_size"] == world_size)]
        known = rows_here["nodes"].dropna() if "nodes" in rows_here.columns else pd.Series(dtype=float)
        nodes = int(known.max()) if len(known) else None
        device = _device(meta)
        measured = float(best["peak_busbw_GBps"])
        row = {"series": series, "device": device, "world size": int(world_size), "nodes": nodes or "?",
               "algorithm": best["algorithm"], "peak busbw (GB/s)": f"{measured:.3g}",
               "at size": format_size(best["peak_size_bytes"])}
        if "busbw_pct_of_peak" in rows_here.columns and rows_here["link_peak_GBps"].notna().any():
            top = rows_here.loc[rows_here["busbw_GBps"].idxmax()]
            row["of link peak"] = f"{top['busbw_pct_of_peak']:.0f}% of {top['link_peak_GBps']:.3g}"
        reference = next((r for r in REFERENCES if r.matches(device, nodes, int(world_size))), None)
        ndr = _ndr_nics(meta, int(world_size)) if (nodes or 1) > 1 else 0
        if reference is not None:
            row.update({"published (GB/s)": f"{reference.low_GBps:g}" + (
                f"-{reference.high_GBps:g}" if reference.high_GBps != reference.low_GBps else ""),
                "for": reference.what, "source": reference.source,
                "verdict": judge(measured, reference.low_GBps, reference.high_GBps)})
        elif ndr:
            low, high = ndr * NDR_PER_NIC[0], ndr * NDR_PER_NIC[1]
            row.update({"published (GB/s)": f"{low:g}-{high:g}", "for": f"{ndr} NDR NICs per node x "
                        f"{NDR_PER_NIC[0]:g}-{NDR_PER_NIC[1]:g} GB/s", "source": "issue 13 (no external source)",
                        "verdict": judge(measured, low, high)})
        else:
            row.update({"published (GB/s)": "-", "for": "no published figure for this device and layout",
                        "source": "-", "verdict": "see % of link peak" if "of link peak" in row else "-"})
        rows.append(row)
    return pd.DataFrame(rows)


def normal_table(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """The report's "Is this normal?" section, or nothing when there are no AllReduce rows."""
    table = normal_rows(frame)
    if table.empty:
        return []
    note = ("The run's peak busbw against published AllReduce figures for the same GPU model and "
            "layout (large sizes; sources in the table), and against the peak of its own link "
            "(link_peak_GBps: NVLink, NICs, or on CPU the point-to-point probe).")
    return [("Is this normal?", note, table)]
