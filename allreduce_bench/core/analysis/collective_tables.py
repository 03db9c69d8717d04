"""The collectives beside AllReduce in tables: their peaks, the seed's decomposition measured
(AllReduce next to ReduceScatter + AllGather), and their report and terminal sections."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.metrics import COLLECTIVES, IN_PLACE, benchmark_of
from allreduce_bench.core.units import format_size

DECOMPOSED_FROM = 1 << 20  # the decomposition table's smallest size: below it latency rules
IN_PLACE_LABEL = " (in place)"  # after the algorithm, on an in-place half's line


def collective_rows(frame: pd.DataFrame, with_allreduce: bool = False,
                    in_place: bool = False) -> pd.DataFrame:
    """Out-of-place rows of every collective but AllReduce (each of these too, when asked), with
    `collective`, `runs_as` and `in_place` filled."""
    if "benchmark" not in frame.columns:
        return frame.iloc[0:0].assign(in_place=pd.Series(dtype=bool))
    benchmark = frame["benchmark"].fillna("allreduce").astype(str)
    chosen = [c for c in COLLECTIVES if c != "all_reduce" or with_allreduce]
    names = {benchmark_of(c, half): c for c in chosen for half in ((False, True) if in_place else (False,))}
    rows = frame[benchmark.isin(list(names))].copy()
    rows["collective"] = benchmark[rows.index].map(names)
    rows["in_place"] = benchmark[rows.index].str.endswith(IN_PLACE)
    runs_as = rows["runs_as"].astype(object) if "runs_as" in rows.columns else pd.Series(index=rows.index)
    rows["runs_as"] = runs_as.where(runs_as.notna(), "").astype(str)
    return rows


def named_halves(rows: pd.DataFrame) -> pd.DataFrame:
    """`algorithm` with ` (in place)` on the in-place halves' rows, so they are lines of their own."""
    return rows.assign(algorithm=rows["algorithm"].astype(str) + rows["in_place"].map(
        {True: IN_PLACE_LABEL, False: ""}))


def _order(index: pd.Index) -> pd.Index:
    return index.map({c: i for i, c in enumerate(COLLECTIVES)}.get)


def peak_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Peak busbw (GB/s) per (collective, algorithm) and world size, in nccl-tests' order."""
    rows = named_halves(collective_rows(frame, in_place=True))
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(algorithm=rows["algorithm"] + rows["runs_as"].map(
        lambda ran: f" (ran {ran})" if ran else ""))
    table = rows.pivot_table(index=["collective", "algorithm"], columns="world_size",
                             values="busbw_GBps", aggfunc="max", sort=False)
    return table.sort_index(level="collective", key=_order, sort_remaining=False)


def best_per_collective(frame: pd.DataFrame) -> pd.DataFrame:
    """Per collective (AllReduce too) and world size: the highest busbw and its algorithm."""
    rows = collective_rows(frame, with_allreduce=True).dropna(subset=["busbw_GBps"])
    if rows.empty:
        return pd.DataFrame(columns=["collective", "world_size", "algorithm", "busbw_GBps"])
    top = rows.loc[rows.groupby(["collective", "world_size"])["busbw_GBps"].idxmax()]
    top = top[["collective", "world_size", "algorithm", "busbw_GBps"]]
    return top.sort_values(["collective", "world_size"], key=lambda c: _order(c) if c.name ==
                           "collective" else c, ignore_index=True)


def decomposition(frame: pd.DataFrame) -> pd.DataFrame:
    """Per world size, size and algorithm (ring, native): the AllReduce's median time against
    ReduceScatter + AllGather of the same buffer, the in-place halves where measured (like for like)."""
    rows = collective_rows(frame, with_allreduce=True, in_place=True)
    rows = rows[rows["collective"].isin(["all_reduce", "reduce_scatter", "all_gather"])
                & rows["algorithm"].isin(["ring", "native"]) & (rows["size_bytes"] >= DECOMPOSED_FROM)]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(half=rows["collective"] + rows["in_place"].map({True: IN_PLACE, False: ""}))
    times = rows.pivot_table(index=["world_size", "size_bytes", "algorithm"], columns="half",
                             values="time_us_median", aggfunc="median")
    if not {"all_reduce", "reduce_scatter", "all_gather"} <= set(times.columns):
        return pd.DataFrame()
    times = times.dropna(subset=["all_reduce", "reduce_scatter", "all_gather"]).reset_index()
    out_of_place = times["all_reduce"] / (times["reduce_scatter"] + times["all_gather"])
    for name in ("all_reduce", "reduce_scatter", "all_gather"):
        if name + IN_PLACE not in times.columns:
            times[name + IN_PLACE] = float("nan")
    both = times["reduce_scatter" + IN_PLACE].notna() & times["all_gather" + IN_PLACE].notna()
    times["halves"] = both.map({True: "in place", False: "out of place"})
    for name in ("reduce_scatter", "all_gather"):
        times[name] = times[name + IN_PLACE].where(both, times[name])
    times["all_reduce"] = times["all_reduce" + IN_PLACE].where(both, float("nan")).fillna(times["all_reduce"])
    times["sum_us"] = times["reduce_scatter"] + times["all_gather"]
    times["ratio"] = times["all_reduce"] / times["sum_us"]
    times["ratio_out_of_place"] = out_of_place
    return times[["world_size", "size_bytes", "algorithm", "halves", "all_reduce", "reduce_scatter",
                  "all_gather", "sum_us", "ratio", "ratio_out_of_place"]]


def stand_ins(frame: pd.DataFrame) -> list[str]:
    """One line per (collective, algorithm, backend) whose backend ran another collective."""
    rows = collective_rows(frame)
    rows = rows[rows["runs_as"] != ""]
    found = rows.groupby(["collective", "algorithm", "backend", "runs_as"]).size().index
    return [f"{backend}'s {collective} ({algorithm}) is an {ran} in disguise: it was measured as "
            f"it is and its busbw uses {collective}'s factor, but it did the work of an {ran}"
            for collective, algorithm, backend, ran in found]


def _decomposition_markdown(table: pd.DataFrame) -> pd.DataFrame:
    shown = pd.DataFrame({"N": table["world_size"], "size": table["size_bytes"].map(format_size),
                          "algorithm": table["algorithm"], "halves": table["halves"],
                          "AllReduce (us)": table["all_reduce"].round(0),
                          "ReduceScatter + AllGather (us)": table["sum_us"].round(0),
                          "ratio": table["ratio"].round(2)})
    if (table["halves"] == "in place").any():
        shown["ratio, out-of-place halves"] = table["ratio_out_of_place"].round(2)
    return shown


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
                                        + (f" (in-place halves; out of place {r.ratio_out_of_place:.2f})"
                                           if r.halves == "in place" else "")
                                        for r in largest.itertuples()))
    return "\n".join(lines)


def markdown_parts(frame: pd.DataFrame, markdown_table) -> list[str]:
    """The report's collectives sections (none without other collectives' rows)."""
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
                  "AllReduce, so its native sum is not a decomposition). `halves`: in place "
                  "where the run measured them (`run --in-place`), the like-for-like comparison "
                  "with the AllReduce, which works in place on one buffer; out of place, each "
                  "half also copies or writes a buffer of its own.", "",
                  markdown_table(_decomposition_markdown(table)), ""]
    return parts
