"""The cost model's sections of report.md (its `report_sections` hook)."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.collective_tables import collective_rows
from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.hooks import Section
from allreduce_bench.core.units import format_size
from allreduce_bench.model import collectives as collective_model
from allreduce_bench.model.cost import (
    MODEL_FILE,
    CostModel,
    MissingLink,
    best_table,
    compare,
    crossover_line,
    crossovers,
    model_rows,
)


def winner_parts(frame: pd.DataFrame, out_dir: Path, figures=None) -> list[str]:
    """Which algorithm wins where, measured beside predicted, where `model fit` left a model.json: in
    the report's folder or its parent (a run's plots/), else in a run directory read."""
    read = [Path(d) for d in dict.fromkeys(frame["source"].dropna().astype(str))] if "source" in frame else []
    path = next((p / MODEL_FILE for p in (Path(out_dir), Path(out_dir).parent, *read)
                 if (p / MODEL_FILE).exists()), None)
    if path is None:
        return []
    model, left_out = CostModel.load(path), []
    rows = model_rows(frame)
    while True:  # a layout the model has no link for is left out, said in a line
        try:
            comparison = compare(rows, model)
            break
        except MissingLink as error:
            left_out.append(f"Left out: {error.missing} in `{path.name}` (fitted to other layouts).")
            world_size, per_node = error.layout
            rows = rows[(rows["world_size"] != world_size) | (rows["ranks_per_node"] != per_node)]
    if comparison.empty:
        return ["## Which algorithm wins where", "", *left_out, ""] if left_out else []
    best = best_table(comparison)
    table = pd.DataFrame({"world size": best["world_size"], "size": best["size_bytes"].map(format_size),
                          "measured best": best["measured"], "predicted best": best["predicted"],
                          "predicted best is slower by": best["predicted_best_slower_pct"].map(
                              "{:.1f}%".format)})
    cross = crossovers(model, comparison)
    lines = ["## Which algorithm wins where", "",
             f"From the cost model in `{path.name}` (`allreduce-bench model fit`): the fastest "
             "algorithm measured and the one the model predicts, among those measured at each "
             "point; the last column is how much slower the predicted one measured.", "",
             markdown_table(table), ""] + ([*left_out, ""] if left_out else [])
    if len(cross):
        lines += [crossover_line(cross), ""]
    figure = next((f for f in (Path(out_dir) / "model_best.png", path.parent / "plots" / "model_best.png")
                   if f.exists()), None)
    if figure is not None:  # beside the report, or `model fit`'s own beside model.json
        lines += [f"![fastest algorithm]({Path(os.path.relpath(figure, out_dir)).as_posix()})", ""]
    return lines


def collective_parts(frame: pd.DataFrame, out_dir: Path | None = None, figures=None) -> list[str]:
    """The fit per collective and algorithm (model/collectives.py), and the fastest per collective
    at the smallest and the largest size of each world size."""
    rows = collective_rows(frame, with_allreduce=True)
    fits = collective_model.fit(rows)
    if fits.empty:
        return []
    comparison = collective_model.compare(rows, fits)
    errors = comparison.groupby(["collective", "algorithm"], sort=False)["error_pct"].apply(
        lambda e: e.abs().median()).rename("median error (%, absolute)")
    fitted = fits.set_index(["collective", "algorithm"]).join(errors).reset_index().round(3)
    best = collective_model.best(comparison)
    ends = best.groupby(["collective", "world_size"])["size_bytes"].transform
    best = best[(best["size_bytes"] == ends("min")) | (best["size_bytes"] == ends("max"))]
    best = best.assign(size_bytes=best["size_bytes"].map(format_size)).round(1)
    return ["## Cost model per collective", "",
            "One link (alpha, B) per collective and algorithm, fitted to its rows over its "
            "declared steps (plus a reduce rate where the rows tell it apart; '-': folded into B); the "
            "detailed two-link AllReduce model is `allreduce-bench model fit`.", "",
            markdown_table(fitted.rename(columns=FIT_HEADERS)), "",
            "Fastest algorithm per collective, measured and predicted by that fit:", "",
            markdown_table(best.rename(columns=BEST_HEADERS)), ""]


FIT_HEADERS = {"alpha_us": "alpha (us)", "bandwidth_GBps": "bandwidth B (GB/s)",
                "reduce_GBps": "reduce (GB/s)"}
BEST_HEADERS = {"world_size": "world size", "size_bytes": "size", "measured": "measured best",
                "predicted": "predicted best", "measured_best_us": "measured best (us)",
                "predicted_best_measured_us": "predicted best, measured (us)"}


WINNERS = Section("model", winner_parts)
COLLECTIVES = Section("collective model", collective_parts)
