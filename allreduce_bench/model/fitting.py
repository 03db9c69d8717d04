"""`model fit`'s work: the rows to fit, the fit checked against every measured row, its lines and files."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.load import load_results, skipped_note
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.units import format_size, parse_size
from allreduce_bench.model import cost
from allreduce_bench.model.pooling import check_poolable


def loaded(paths) -> tuple[pd.DataFrame, str | None]:
    """The results, and a note on rows the model leaves out where some remain (else the fit says)."""
    frame = load_results(paths, explain_skips=False)
    note = skipped_note(frame)
    return frame, note if note and not allreduce_rows(frame).empty else None


def selected(frame: pd.DataFrame, tag: str | None, pool: bool) -> pd.DataFrame:
    """The rows of --tag, refused when they mix setups (without --pool)."""
    if tag is not None:
        tags = sorted(frame["tag"].unique()) if "tag" in frame.columns else []
        frame = frame[frame["tag"] == tag] if tag in tags else frame.iloc[:0]
        if frame.empty:
            raise UsageError(f"no rows with --tag {tag!r}; the results have tags "
                             f"{', '.join(repr(t) for t in tags) or 'none'}")
    check_poolable(cost.model_rows(frame), pool)
    return frame


def fitted_rows(frame: pd.DataFrame, fit_min_size: str | None) -> pd.DataFrame:
    if fit_min_size is None:
        return frame
    fitted = frame[frame["size_bytes"] >= parse_size(fit_min_size, "--fit-min-size")]
    if fitted.empty:
        raise UsageError(f"no rows of --fit-min-size {fit_min_size} or more; choose a smaller size")
    return fitted


def comparison(frame: pd.DataFrame, cost_model: cost.CostModel) -> pd.DataFrame:
    """Measured against predicted; one line where the fitted rows lack a link a measured layout needs."""
    try:
        return cost.compare(frame, cost_model)
    except cost.MissingLink as error:  # its own advice names predict's --intra-bw/--inter-bw
        raise UsageError(f"the fitted rows cannot predict every measured row ({error.missing}); "
                         "fit rows of every node layout you compare: check --fit-min-size "
                         "and --tag") from None


def _layouts(comparison: pd.DataFrame, algorithm: str) -> list[str]:
    rows = comparison[comparison["algorithm"] == algorithm]
    return sorted({f"{n}x{r}" for n, r in zip(rows["nodes"], rows["ranks_per_node"])})


def _note(name, result, comparison) -> str:
    if result.shared:
        return f"one effective link for intra and inter ({', '.join(_layouts(comparison, name))})"
    if result.links.inter is None:
        return "one node only: no inter link"
    if result.links.intra is None:
        return "no one-node rows: no intra link"
    return "inter = intra: steps across nodes were no slower" if result.links.intra == result.links.inter else ""


def links_lines(cost_model: cost.CostModel, loss: str, comparison: pd.DataFrame) -> Iterator[str]:
    """The fitted links per algorithm as a table, and what the rows could not tell."""
    yield (f"Fitted links per algorithm ({loss} relative error; alpha = cost per message, "
           "bandwidth in decimal GB/s):")
    params = []
    for name, result in cost_model.algorithms.items():
        row: dict[str, object] = {"algorithm": name}
        for cls in ("intra", "inter"):
            link = result.links.get(cls)
            row[f"{cls} alpha"] = units.format_seconds(link.alpha_s) if link else "-"
            row[f"{cls} bandwidth"] = units.format_bandwidth(link.bandwidth_Bps) if link else "-"
        row["reduction"] = (units.format_bandwidth(result.links.reduce_Bps)
                            if math.isfinite(result.links.reduce_Bps) else "in bandwidth")
        row["rows"], row["note"] = result.rows, _note(name, result, comparison)
        params.append(row)
    yield pd.DataFrame(params).to_string(index=False)
    yield ("(reduction 'in bandwidth': bytes reduced grow with bytes sent in every row, so the "
           "gamma term is folded into the bandwidth)")
    if any(result.shared for result in cost_model.algorithms.values()):
        yield _separating_run(comparison)
    for name, why in cost_model.skipped.items():
        yield f"note: {name} not fitted: {why}"


def _separating_run(comparison: pd.DataFrame) -> str:
    per_node = int(comparison["ranks_per_node"].max())
    multi = (comparison["nodes"] > 1).any()
    if multi:
        return (f"note: every measured layout sends across nodes, so intra- and inter-node links are "
                f"timed together: the effective link predicts these layouts only. Measure one node "
                f"alone too (a world of {per_node} ranks on one node, e.g. nccl-tests -g {per_node} "
                "on one host, or `allreduce-bench links`) to fit the two links apart.")
    return ("note: these rows cannot tell the two link classes apart; measure another layout "
            "(more nodes, or fewer ranks per node) to fit them apart.")


def prediction_lines(comparison: pd.DataFrame, threshold: int) -> Iterator[str]:
    """Measured against predicted per row, and the median |error| over sizes >= threshold (or every size)."""
    yield "\nMeasured (median over runs of time_us_median) against predicted time:"
    shown = comparison.assign(
        layout=lambda t: t["nodes"].astype(str) + "x" + t["ranks_per_node"].astype(str),
        size=lambda t: t["size_bytes"].map(format_size),
        measured=lambda t: (t["measured_us"] * 1e-6).map(units.format_seconds),
        predicted=lambda t: (t["predicted_us"] * 1e-6).map(units.format_seconds),
        error=lambda t: t["error_pct"].map("{:+.1f}%".format))
    yield shown[["algorithm", "world_size", "layout", "size", "measured", "predicted",
                 "error"]].to_string(index=False)
    if not (comparison["size_bytes"] >= threshold).any():
        sizes = sorted(comparison["size_bytes"].unique())
        yield (f"\nnote: no size of {format_size(threshold)} or more was measured (sizes: "
               f"{', '.join(map(format_size, sizes))}); the summary below counts every size. "
               f"Measure sizes of {format_size(threshold)} and up (a run without --quick) for "
               "the large-message summary, or give --min-size.")
        threshold = int(sizes[0])
    yield f"\nMedian |error| (%) over sizes >= {format_size(threshold)}:"
    yield cost.median_abs_error(comparison, threshold).round(1).to_string()


def winner_lines(best: pd.DataFrame, cost_model: cost.CostModel, comparison: pd.DataFrame) -> Iterator[str]:
    """The fastest algorithm per point, measured and predicted, and the predicted crossovers."""
    hits = (best["predicted_best_slower_pct"] <= 10).mean() * 100
    yield ("\nFastest algorithm per world size and size, measured and predicted (among those "
           "measured there):")
    yield best.assign(size=best["size_bytes"].map(format_size),
                      slower=best["predicted_best_slower_pct"].map("{:.1f}%".format))[
        ["world_size", "size", "measured", "predicted", "slower"]].to_string(index=False)
    yield (f"the predicted best measured within 10% of the measured best at {hits:.0f}% of "
           f"{len(best)} points ('slower': how much slower the predicted best measured)")
    cross = cost.crossovers(cost_model, comparison)
    if len(cross):
        yield cost.crossover_line(cross)


def save_fit(cost_model: cost.CostModel, best: pd.DataFrame, comparison: pd.DataFrame, out_dir: Path,
             fitted_to: str, loss: str, no_plot: bool) -> Iterator[str]:
    """Write model.json, model_best.csv and (unless no_plot) the two figures; a line on each."""
    path = cost_model.save(out_dir / cost.MODEL_FILE)
    best[["world_size", "size_bytes", "measured", "predicted", "measured_best_us",
          "predicted_best_measured_us", "predicted_best_slower_pct"]].to_csv(out_dir / cost.BEST_FILE, index=False)
    yield f"model: {path}; winners: {out_dir / cost.BEST_FILE}"
    if no_plot:
        return
    from allreduce_bench.model.plots import model_figure, winners_figure  # matplotlib: on use

    figure = model_figure(comparison, cost_model, out_dir / "plots" / "model.png",
                          footnote=f"{fitted_to}; {loss} relative error")
    yield f"figure: {figure}"
    figure = winners_figure(best, out_dir / "plots" / "model_best.png", footnote=fitted_to)
    yield f"figure: {figure}"
