"""What others published, as CSV shipped beside this module (doc/expect.md, "The catalogue"):
published figures, intra-node link rates, and the NCCL settings that change the answer."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pandas as pd

DATA = Path(__file__).parent
KINDS = ("measurement", "maintainer", "threshold")  # the order a verdict prefers them in
ANY = "any"
DEFAULT_SETTINGS = ("", "NVLS (NCCL's choice)")  # what a run that sets nothing gets
RING_LIKE = ("all_gather", "reduce_scatter")


@lru_cache(maxsize=None)
def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / name, dtype={"gpu": str, "setting": str, "nccl": str}, keep_default_na=False,
                       na_values={c: [""] for c in ("gpus_per_node", "nodes", "nics_per_node", "nic_Gbps",
                                                    "size_bytes", "busbw_GBps", "intra_GBps", "peer_GBps")})


def catalogue() -> pd.DataFrame:
    return _read("catalogue.csv").copy()


def links() -> pd.DataFrame:
    return _read("links.csv").copy()


def settings() -> pd.DataFrame:
    return _read("settings.csv").copy()


def model_of(device: str | None) -> str | None:
    """'NVIDIA GH200 120GB' -> 'GH200' (the longest model named); 'H100 PCIe' apart from SXM."""
    if not device:
        return None
    name = device.upper()
    models = set(catalogue()["gpu"]) | set(links()["gpu"])
    named = [m for m in models - {ANY} if re.search(rf"(?<![A-Z0-9]){re.escape(m.upper())}(?![0-9])", name)]
    if not named:
        return None
    model = max(named, key=len)
    return f"{model} PCIe" if "PCIE" in name else model


def matching(model: str | None, gpus_per_node: int, nodes: int, collective: str = "all_reduce") -> pd.DataFrame:
    """The rows of this GPU model and collective on the same side of the node boundary, closest
    first (doc/expect.md); NVLS only above 4 GPUs per node, where NCCL leaves the ring, and for
    AllGather and ReduceScatter then AllReduce's ring figures, as they run the same ring."""
    rows = catalogue()
    rows = rows[(rows["gpu"] == model) & ((rows["nodes"] > 1) == (nodes > 1))].copy()
    if gpus_per_node <= 4:
        rows = rows[~rows["setting"].str.startswith("NVLS")]
    rows["_collective"] = (rows["collective"] != collective).astype(int)
    ring = _ring(rows)
    rows = rows[(rows["collective"] == collective) | ((rows["collective"] == "all_reduce") & ring
                                                      if collective in RING_LIKE else False)]
    rows["_per_node"] = (rows["gpus_per_node"] != gpus_per_node).astype(int)
    rows["_nodes"] = (rows["nodes"] - nodes).abs()
    default = rows["setting"].isin(DEFAULT_SETTINGS) if gpus_per_node > 4 else ring[rows.index]
    rows["_setting"] = (~default).astype(int)
    rows["_changed"] = (~rows["setting"].isin(DEFAULT_SETTINGS)).astype(int)  # a setting someone changed
    rows["_kind"] = rows["kind"].map({k: i for i, k in enumerate(KINDS)})
    rows = rows.sort_values(["_collective", "_per_node", "_nodes", "_setting", "_changed", "_kind", "date"],
                            ascending=[True, True, True, True, True, True, False])
    return rows.drop(columns=[c for c in rows.columns if c.startswith("_")])


def _ring(rows: pd.DataFrame) -> pd.Series:
    """Rows measured on the ring: said so, or of a GPU without NVLS and not NVLS."""
    found = settings()
    nvls = found[(found["setting"] == "NCCL_NVLS_ENABLE") & (found["applies"] == "one node")]
    nvls = set(" ".join(nvls["gpus"]).split())
    said = rows["setting"].str.contains("Ring|NVLS_ENABLE=0")
    return said | (~rows["gpu"].isin(nvls) & ~rows["setting"].str.contains("NVLS"))


def per_nic(nic_Gbps: float | None) -> pd.DataFrame:
    rows = catalogue()
    return rows[(rows["gpu"] == ANY) & (rows["nic_Gbps"] == nic_Gbps)]


def link_row(model: str | None) -> pd.Series | None:
    rows = links()
    found = rows[rows["gpu"] == model]
    return found.iloc[0] if len(found) else None
