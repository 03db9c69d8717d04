"""The collectives beside AllReduce in tables: peak busbw per collective, algorithm and world
size, the seed's decomposition measured (ring AllReduce next to ring ReduceScatter + ring
AllGather at the same size, and the native calls), what a backend ran in a collective's place,
and the section of report.md and of the terminal summary that shows them.

Rows of another collective carry benchmark = its name (as `import` writes nccl-tests'
all_gather_perf rows) and busbw with its own nccl-tests factor; the AllReduce-only analyses skip
them (results.schema.allreduce_rows) and this module reads them.
"""
from __future__ import annotations

import pandas as pd

from allreduce_bench.metrics import COLLECTIVES
from allreduce_bench.units import format_size

DECOMPOSED_FROM = 1 << 20  # the decomposition table's smallest size: below it latency rules


def collective_rows(frame: pd.DataFrame, with_allreduce: bool = False) -> pd.DataFrame:
    """Out-of-place rows of every collective but AllReduce (and AllReduce's, when asked), each
    with `collective` and `runs_as` filled."""
    if "benchmark" not in frame.columns:
        return frame.iloc[0:0]
    benchmark = frame["benchmark"].fillna("allreduce").astype(str)
    names = [c for c in COLLECTIVES if c != "all_reduce"] + (["allreduce"] if with_allreduce else [])
    rows = frame[benchmark.isin(names)].copy()
    rows["collective"] = benchmark[rows.index].replace({"allreduce": "all_reduce"})
    runs_as = rows["runs_as"].astype(object) if "runs_as" in rows.columns else pd.Series(index=rows.index)
    rows["runs_as"] = runs_as.where(runs_as.notna(), "").astype(str)
    return rows


def _order(index: pd.Index) -> pd.Index:
    return index.map({c: i for i, c in enumerate(COLLECTIVES)}.get)


def peak_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak busbw (GB/s) per (collective, algorithm) and world size, collectives in nccl-tests'
    order, algorithms as measured."""
    rows = collective_rows(frame)
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(algorithm=rows["algorithm"] + rows["runs_as"].map(
        lambda ran: f" (ran {ran})" if ran else ""))
    table = rows.pivot_table(index=["collective", "algorithm"], columns="world_size",
                             values="busbw_GBps", aggfunc="max", sort=False)
    return table.sort_index(level="collective", key=_order, sort_remaining=False)


def best_per_collective(frame: pd.DataFrame) -> pd.DataFrame:
    """Per collective and world size: the highest busbw measured and the algorithm that had it
    (AllReduce included, for the summary figure)."""
    rows = collective_rows(frame, with_allreduce=True).dropna(subset=["busbw_GBps"])
    if rows.empty:
        return pd.DataFrame(columns=["collective", "world_size", "algorithm", "busbw_GBps"])
    top = rows.loc[rows.groupby(["collective", "world_size"])["busbw_GBps"].idxmax()]
    top = top[["collective", "world_size", "algorithm", "busbw_GBps"]]
    return top.sort_values(["collective", "world_size"], key=lambda c: _order(c) if c.name ==
                           "collective" else c, ignore_index=True)


def decomposition(frame: pd.DataFrame) -> pd.DataFrame:
    """Per world size, size and algorithm family (ring, native): the AllReduce's median time
    next to ReduceScatter + AllGather at the same size (the whole buffer), and their ratio."""
    rows = collective_rows(frame, with_allreduce=True)
    rows = rows[rows["collective"].isin(["all_reduce", "reduce_scatter", "all_gather"])
                & rows["algorithm"].isin(["ring", "native"]) & (rows["size_bytes"] >= DECOMPOSED_FROM)]
    if rows.empty:
        return pd.DataFrame()
    times = rows.pivot_table(index=["world_size", "size_bytes", "algorithm"], columns="collective",
                             values="time_us_median", aggfunc="median")
    if not {"all_reduce", "reduce_scatter", "all_gather"} <= set(times.columns):
        return pd.DataFrame()
    times = times.dropna(subset=["all_reduce", "reduce_scatter", "all_gather"]).reset_index()
    times["sum_us"] = times["reduce_scatter"] + times["all_gather"]
    times["ratio"] = times["all_reduce"] / times["sum_us"]
    return times[["world_size", "size_bytes", "algorithm", "all_reduce", "reduce_scatter",
                  "all_gather", "sum_us", "ratio"]]


def stand_ins(frame: pd.DataFrame) -> list[str]:
    """One line per (collective, algorithm, backend) whose backend ran another collective."""
    rows = collective_rows(frame)
    rows = rows[rows["runs_as"] != ""]
    found = rows.groupby(["collective", "algorithm", "backend", "runs_as"]).size().index
    return [f"{backend}'s {collective} ({algorithm}) is an {ran} in disguise: it was measured as "
            f"it is and its busbw uses {collective}'s factor, but it did the work of an {ran}"
            for collective, algorithm, backend, ran in found]


def _decomposition_markdown(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"N": table["world_size"], "size": table["size_bytes"].map(format_size),
                         "algorithm": table["algorithm"],
                         "AllReduce (us)": table["all_reduce"].round(0),
                         "ReduceScatter + AllGather (us)": table["sum_us"].round(0),
                         "ratio": table["ratio"].round(2)})


def terminal_text(frame: pd.DataFrame) -> str:
    """What `run` prints after the AllReduce summary when other collectives were measured."""
    peaks = peak_table(frame)
    if peaks.empty:
        return ""
    lines = ["Peak busbw (GB/s) per collective, algorithm and world size (nccl-tests' factor of "
             "each collective):", peaks.round(3).to_string()]
    lines += [f"note: {line}" for line in stand_ins(frame)]
    table = decomposition(frame)
    if not table.empty:
        largest = table[table["size_bytes"] == table["size_bytes"].max()]
        lines.append("AllReduce vs ReduceScatter + AllGather at " + format_size(int(largest["size_bytes"].iloc[0]))
                     + ": " + ", ".join(f"{r.algorithm} N={r.world_size} {r.ratio:.2f}"
                                        for r in largest.itertuples()))
    return "\n".join(lines)


def markdown_parts(frame: pd.DataFrame, markdown_table) -> list[str]:
    """The report's collectives sections (empty without rows of other collectives); their
    figures are embedded with the others."""
    peaks = peak_table(frame)
    if peaks.empty:
        return []
    parts = ["## Other collectives", "",
             "busbw with each collective's nccl-tests factor: (N-1)/N for AllGather, ReduceScatter "
             "and AllToAll, 1 for Broadcast, Reduce and SendRecv; sizes are the whole buffer, as "
             "nccl-tests prints them.", "", markdown_table(peaks.round(3).reset_index()), ""]
    parts += [f"**Note:** {line}." for line in stand_ins(frame)] + ([""] if stand_ins(frame) else [])
    table = decomposition(frame)
    if not table.empty:
        parts += ["## AllReduce = ReduceScatter + AllGather, measured", "",
                  "The seed's decomposition: the median time of each AllReduce next to the sum "
                  "of its ReduceScatter and its AllGather of the same buffer (ratio near 1: the "
                  "AllReduce is its two halves; gloo's native ReduceScatter is itself an "
                  "AllReduce, so its native sum is not a decomposition).", "",
                  markdown_table(_decomposition_markdown(table)), ""]
    return parts + model_parts(frame, markdown_table)


def model_parts(frame: pd.DataFrame, markdown_table) -> list[str]:
    """The alpha-beta-gamma fit per collective and algorithm (analysis/collective_model.py) and
    the fastest algorithm per collective, measured beside predicted, at the smallest and the
    largest size of each world size."""
    from allreduce_bench.analysis import collective_model

    rows = collective_rows(frame, with_allreduce=True)
    fits = collective_model.fit(rows)
    if fits.empty:
        return []
    comparison = collective_model.compare(rows, fits)
    errors = comparison.groupby(["collective", "algorithm"], sort=False)["error_pct"].apply(
        lambda e: e.abs().median()).rename("median |error| (%)")
    fitted = fits.set_index(["collective", "algorithm"]).join(errors).reset_index()
    best = collective_model.best(comparison)
    ends = best.groupby(["collective", "world_size"])["size_bytes"].transform
    best = best[(best["size_bytes"] == ends("min")) | (best["size_bytes"] == ends("max"))]
    return ["## Cost model per collective", "",
            "One link (alpha, B) per collective and algorithm, fitted to its rows over its "
            "declared steps (plus gamma where the rows tell it apart); the detailed two-link "
            "AllReduce model is `allreduce-bench model fit`.", "",
            markdown_table(fitted.round(3)), "",
            "Fastest algorithm per collective, measured and predicted by that fit:", "",
            markdown_table(best.assign(size_bytes=best["size_bytes"].map(format_size)).round(1)), ""]
