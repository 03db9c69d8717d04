"""One link (alpha, B), plus gamma, per collective and algorithm, fitted as the AllReduce model is
(cost.fit_steps), so every collective stands on the same footing for "which algorithm wins where"."""
from __future__ import annotations

import math

import pandas as pd

from allreduce_bench.core import algorithms as registry
from allreduce_bench.core.algorithms.base import Step
from allreduce_bench.core.layout import node_layout
from allreduce_bench.model.cost import critical_path, fastest, fit_steps, with_layout

KEYS = ["collective", "algorithm", "world_size", "ranks_per_node", "size_bytes"]


def with_collective(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows with `collective` and `runs_as` filled (rows from before collectives: AllReduce)."""
    frame = frame.copy()
    frame["collective"] = frame.get("collective", pd.Series("all_reduce", index=frame.index)).fillna("all_reduce")
    runs_as = frame.get("runs_as", pd.Series("", index=frame.index)).astype(object)
    runs_as = runs_as.where(runs_as.notna(), "")
    frame["runs_as"] = runs_as.where(runs_as != "", frame["collective"])
    return with_layout(frame)[frame["world_size"] > 1]


def steps(collective: str, algorithm: str, runs_as: str, size_bytes: float, world_size: int,
          ranks_per_node: int) -> list[Step] | None:
    """The declared steps (a row run as another collective, `runs_as`, has its native cost), or None
    where the algorithm declares no cost or is not installed."""
    known = registry.registry(runs_as)
    name = "native" if runs_as != collective else algorithm
    cost = known[name].cost if name in known else None
    if cost is None:
        return None
    return cost(float(size_bytes), world_size, node_layout(world_size, ranks_per_node))


def fit(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (collective, algorithm): alpha_us, bandwidth_GBps, reduce_GBps (NaN: folded into B),
    rows; algorithms without a cost, or with too few sizes, are left out."""
    out = []
    rows = with_collective(frame)
    rows = rows[rows["time_us_median"] > 0]
    for (collective, algorithm), group in rows.groupby(["collective", "algorithm"], sort=False):
        found = [steps(r.collective, r.algorithm, r.runs_as, r.size_bytes, r.world_size, r.ranks_per_node)
                 for r in group.itertuples()]
        declared = [f for f in found if f is not None]
        fitted = None if len(declared) < len(found) else fit_steps(
            declared, group["time_us_median"].to_numpy(dtype=float) * 1e-6, one_link=True)
        if fitted is None:
            continue
        link, reduce_Bps = fitted.links.intra or fitted.links.inter, fitted.links.reduce_Bps
        assert link is not None  # a fit has at least one link class
        out.append({"collective": collective, "algorithm": algorithm, "alpha_us": link.alpha_s * 1e6,
                    "bandwidth_GBps": link.bandwidth_Bps / 1e9,
                    "reduce_GBps": reduce_Bps / 1e9 if math.isfinite(reduce_Bps) else math.nan,
                    "rows": len(group)})
    return pd.DataFrame(out, columns=["collective", "algorithm", "alpha_us", "bandwidth_GBps",
                                      "reduce_GBps", "rows"])


def predict_us(fitted: pd.Series, found: list[Step] | None) -> float:
    if found is None:  # a row run as a collective without a cost, beside fitted ones
        return math.nan
    m_intra, b_intra, m_inter, b_inter, reduced = critical_path(found)
    messages, size = m_intra + m_inter, b_intra + b_inter
    gamma = 0.0 if math.isnan(fitted["reduce_GBps"]) else reduced / (fitted["reduce_GBps"] * 1e9)
    return (messages * fitted["alpha_us"] * 1e-6 + size / (fitted["bandwidth_GBps"] * 1e9) + gamma) * 1e6


def compare(frame: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """Measured (median over runs) against predicted time per KEYS, with error_pct."""
    rows = with_collective(frame)
    table = rows.groupby(KEYS + ["runs_as"], sort=False)["time_us_median"].median().rename(
        "measured_us").reset_index()
    table = table.merge(fits, on=["collective", "algorithm"])
    table["predicted_us"] = [
        predict_us(r, steps(r.collective, r.algorithm, r.runs_as, r.size_bytes, r.world_size,
                            r.ranks_per_node)) for _, r in table.iterrows()]
    table["error_pct"] = 100.0 * (table["predicted_us"] - table["measured_us"]) / table["measured_us"]
    return table[KEYS + ["runs_as", "measured_us", "predicted_us", "error_pct"]]


def best(comparison: pd.DataFrame) -> pd.DataFrame:
    """Per collective, world size and size: the measured fastest and the predicted fastest."""
    return fastest(comparison, ["collective", "world_size", "size_bytes"])
