"""`allreduce-bench model fit | predict | ddp`: the cost model as commands (no process groups)."""
from __future__ import annotations

import math
from pathlib import Path

import click

from allreduce_bench.core import units
from allreduce_bench.core.config.checks import OUTPUT_PATH, check_positive_int
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import format_size, parse_size, parse_size_list


class Quantity(click.ParamType):
    """A click type over one of the `units` parsers, so bad units fail with one line, exit 2."""

    def __init__(self, name: str, parse):
        self.name, self.parse = name, parse

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        return self.parse(value, param.opts[0] if param else self.name)


BANDWIDTH = Quantity("bandwidth", units.parse_bandwidth)
SECONDS = Quantity("time", units.parse_seconds)
POSITIVE_SECONDS = Quantity("time", units.parse_positive_seconds)
BYTES = Quantity("bytes", units.parse_bytes)
COUNT = Quantity("count", units.parse_count)


def link_options(command):
    """--model and the explicit link parameters that override it (shared by predict and ddp)."""
    for option in reversed([
        click.option("--model", "model_path", type=click.Path(path_type=Path),
                     help="model.json from `model fit` (or the run directory holding it)."),
        click.option("--intra-bw", type=BANDWIDTH, help="Intra-node link bandwidth, e.g. 900GB/s."),
        click.option("--inter-bw", type=BANDWIDTH, help="Inter-node uplink bandwidth per node, e.g. 25GB/s."),
        click.option("--intra-latency", type=SECONDS,
                     help="Intra-node cost per message, e.g. 5us. [0 without --model]"),
        click.option("--inter-latency", type=SECONDS,
                     help="Inter-node cost per message, e.g. 10us. [0 without --model]"),
        click.option("--reduce-bw", type=BANDWIDTH,
                     help="Bytes a rank reduces (adds) per second, the gamma term, e.g. 500GB/s. "
                     "[the model's, else free]"),
        click.option("--native-as", help="How to model the backend's own AllReduce: another "
                     "algorithm with a cost, e.g. tree. [the model's, else ring]"),
    ]):
        command = option(command)
    return command


def _whole_count(text, what):
    count = units.parse_count(text, what)
    if count % 1:
        raise UsageError(f"{what} {text!r} is not a whole number; e.g. 7B or 350M")
    return count


WHOLE_COUNT = Quantity("count", _whole_count)


def _load(model_path):
    from allreduce_bench.model.cost import CostModel
    return CostModel.load(model_path) if model_path else None


def resolve_links(algorithm, cost_model, intra_bw, inter_bw, intra_latency, inter_latency,
                  reduce_bw=None):
    """The model's links for `algorithm`, with any explicitly given parameter replacing its own."""
    from allreduce_bench.model.cost import Link, Links

    base = cost_model.links(algorithm) if cost_model else Links(None, None)

    def merged(link, bandwidth, latency, name):
        if bandwidth is None and latency is None:
            return link
        if link is None:
            if bandwidth is None:
                raise UsageError(f"--{name}-latency needs --{name}-bw (or a --model to take it from)")
            return Link(latency or 0.0, bandwidth)
        return Link(link.alpha_s if latency is None else latency,
                    link.bandwidth_Bps if bandwidth is None else bandwidth)

    links = Links(merged(base.intra, intra_bw, intra_latency, "intra"),
                  merged(base.inter, inter_bw, inter_latency, "inter"),
                  base.reduce_Bps if reduce_bw is None else reduce_bw)
    if links.intra is None and links.inter is None:
        raise UsageError("give --model MODEL.json, or --intra-bw (and --inter-bw across nodes), "
                         "e.g. --intra-bw 900GB/s --inter-bw 25GB/s")
    return links


def describe(links) -> str:
    parts = []
    for name, link in (("intra", links.intra), ("inter", links.inter)):
        if link is not None:
            parts.append(f"{name} {units.format_bandwidth(link.bandwidth_Bps)} + "
                         f"{units.format_seconds(link.alpha_s)}/message")
    if math.isfinite(links.reduce_Bps):
        parts.append(f"reduction {units.format_bandwidth(links.reduce_Bps)}")
    return ", ".join(parts)


@click.group("model")
def model():
    """An alpha-beta cost model fitted to results: predict AllReduce time and DDP efficiency.

    \b
    fit      fit link latency and bandwidth per algorithm to results, check it, save model.json
    predict  time and busbw of any algorithm, size, world size and node layout
    ddp      the seed's training-step model: does AllReduce hide behind compute?
    """


@model.command("fit")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=OUTPUT_PATH,
              help="Where model.json and plots/model.png go. [the first PATH (its directory)]")
@click.option("--native-as", default="ring", show_default=True,
              help="How to model the backend's own AllReduce: another algorithm with a cost.")
@click.option("--loss", default="absolute", show_default=True, type=click.Choice(["absolute", "squares"]),
              help="Minimise the sum of |relative error| (robust to noisy sizes) or of its squares.")
@click.option("--min-size", default="1M", show_default=True,
              help="Smallest size counted in the median-error summary (binary K/M/G); with no "
              "size that large, every size is counted and the output says so.")
@click.option("--fit-min-size", help="Fit only sizes >= this (binary K/M/G), e.g. where a shaped "
              "link's burst lets small transfers through unshaped. [every size]")
@click.option("--tag", help="Fit only the rows with this tag (fit one setup at a time).")
@click.option("--pool", is_flag=True, help="Fit rows of different backends, dtypes or timing "
              "methods together (refused by default: they measure different things).")
@click.option("--no-plot", is_flag=True, help="No figure.")
def fit_command(paths, out_dir, native_as, loss, min_size, fit_min_size, tag, pool, no_plot):
    """Fit the model to results (run directories or results.csv files) and check it.

    Prints the fitted link parameters per algorithm, measured against predicted time per
    algorithm, world size and size with the error, and the median |error| over sizes >=
    --min-size; writes model.json and plots/model.png. Results of one node layout only
    (an imported 2 x 8 nccl-tests log) get one effective link for that layout, and the
    output says which run would separate intra- from inter-node links.
    """
    from allreduce_bench.core.config.checks import check_writable_dir
    from allreduce_bench.model.cost import best_table, fit

    out_dir = Path(out_dir or (paths[0] if paths[0].is_dir() else paths[0].parent))
    check_writable_dir(out_dir, "--out")
    frame = _selected(_loaded(paths), tag, pool)
    sources = sorted(frame["source"].unique())
    cost_model = fit(_fitted_rows(frame, fit_min_size), native_as=native_as, loss=loss, sources=sources)
    comparison = _comparison(frame, cost_model)
    _echo_links(cost_model, loss, comparison)
    _echo_predictions(comparison, parse_size(min_size, "--min-size"))
    best = best_table(comparison)
    _echo_winners(best, cost_model, comparison)
    _save_fit(cost_model, best, comparison, out_dir, f"fitted to {', '.join(sources)}", loss, no_plot)


def _loaded(paths):
    """The results; the note on rows the model leaves out only when some rows remain (else
    the fit's own one line says what the rows are)."""
    from allreduce_bench.core.results.load import load_results, skipped_note
    from allreduce_bench.core.results.schema import allreduce_rows

    frame = load_results(paths, explain_skips=False)
    note = skipped_note(frame)
    if note and not allreduce_rows(frame).empty:
        click.echo(f"allreduce-bench: note: {note}", err=True)
    return frame


def _selected(frame, tag, pool):
    """The rows of --tag, refused when they mix setups (without --pool)."""
    from allreduce_bench.model.cost import model_rows
    from allreduce_bench.model.pooling import check_poolable

    if tag is not None:
        tags = sorted(frame["tag"].unique()) if "tag" in frame.columns else []
        frame = frame[frame["tag"] == tag] if tag in tags else frame.iloc[:0]
        if frame.empty:
            raise UsageError(f"no rows with --tag {tag!r}; the results have tags "
                             f"{', '.join(repr(t) for t in tags) or 'none'}")
    check_poolable(model_rows(frame), pool)
    return frame


def _fitted_rows(frame, fit_min_size):
    if fit_min_size is None:
        return frame
    fitted = frame[frame["size_bytes"] >= parse_size(fit_min_size, "--fit-min-size")]
    if fitted.empty:
        raise UsageError(f"no rows of --fit-min-size {fit_min_size} or more; choose a smaller size")
    return fitted


def _comparison(frame, cost_model):
    """Measured against predicted, every measured row; refused in one line when the fitted
    rows lack a link some measured layout needs (fitted with --fit-min-size or --tag apart)."""
    from allreduce_bench.model.cost import compare

    try:
        return compare(frame, cost_model)
    except UsageError as error:  # the model's message names predict's --intra-bw/--inter-bw
        if "-bw" not in str(error):
            raise
        raise UsageError(f"the fitted rows cannot predict every measured row ({error}".split("; give")[0]
                         + "); fit rows of every node layout you compare: check --fit-min-size "
                         "and --tag") from None


def _layouts(comparison, algorithm: str) -> list[str]:
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


def _echo_links(cost_model, loss, comparison) -> None:
    import pandas as pd

    click.echo(f"Fitted links per algorithm ({loss} relative error; alpha = cost per message, "
               "bandwidth in decimal GB/s):")
    params = []
    for name, result in cost_model.algorithms.items():
        row = {"algorithm": name}
        for cls in ("intra", "inter"):
            link = result.links.get(cls)
            row[f"{cls} alpha"] = units.format_seconds(link.alpha_s) if link else "-"
            row[f"{cls} bandwidth"] = units.format_bandwidth(link.bandwidth_Bps) if link else "-"
        row["reduction"] = (units.format_bandwidth(result.links.reduce_Bps)
                            if math.isfinite(result.links.reduce_Bps) else "in bandwidth")
        row["rows"], row["note"] = result.rows, _note(name, result, comparison)
        params.append(row)
    click.echo(pd.DataFrame(params).to_string(index=False))
    click.echo("(reduction 'in bandwidth': bytes reduced grow with bytes sent in every row, so the "
               "gamma term is folded into the bandwidth)")
    if any(result.shared for result in cost_model.algorithms.values()):
        click.echo(_separating_run(comparison))
    for name, why in cost_model.skipped.items():
        click.echo(f"note: {name} not fitted: {why}")


def _separating_run(comparison) -> str:
    """What the rows cannot separate and which run would."""
    per_node = int(comparison["ranks_per_node"].max())
    multi = (comparison["nodes"] > 1).any()
    if multi:
        return (f"note: every measured layout sends across nodes, so intra- and inter-node links are "
                f"timed together: the effective link predicts these layouts only. Measure one node "
                f"alone too (a world of {per_node} ranks on one node, e.g. nccl-tests -g {per_node} "
                "on one host, or `allreduce-bench links`) to fit the two links apart.")
    return ("note: these rows cannot tell the two link classes apart; measure another layout "
            "(more nodes, or fewer ranks per node) to fit them apart.")


def _echo_predictions(comparison, threshold: int) -> None:
    from allreduce_bench.model.cost import median_abs_error

    click.echo("\nMeasured (median over runs of time_us_median) against predicted time:")
    shown = comparison.assign(
        layout=lambda t: t["nodes"].astype(str) + "x" + t["ranks_per_node"].astype(str),
        size=lambda t: t["size_bytes"].map(format_size),
        measured=lambda t: (t["measured_us"] * 1e-6).map(units.format_seconds),
        predicted=lambda t: (t["predicted_us"] * 1e-6).map(units.format_seconds),
        error=lambda t: t["error_pct"].map("{:+.1f}%".format))
    click.echo(shown[["algorithm", "world_size", "layout", "size", "measured", "predicted",
                      "error"]].to_string(index=False))
    if not (comparison["size_bytes"] >= threshold).any():
        sizes = sorted(comparison["size_bytes"].unique())
        click.echo(f"\nnote: no size of {format_size(threshold)} or more was measured (sizes: "
                   f"{', '.join(map(format_size, sizes))}); the summary below counts every size. "
                   f"Measure sizes of {format_size(threshold)} and up (a run without --quick) for "
                   "the large-message summary, or give --min-size.")
        threshold = int(sizes[0])
    click.echo(f"\nMedian |error| (%) over sizes >= {format_size(threshold)}:")
    click.echo(median_abs_error(comparison, threshold).round(1).to_string())


def _echo_winners(best, cost_model, comparison) -> None:
    from allreduce_bench.model.cost import crossovers

    hits = (best["predicted_best_slower_pct"] <= 10).mean() * 100
    click.echo("\nFastest algorithm per world size and size, measured and predicted (among those "
               "measured there):")
    click.echo(best.assign(size=best["size_bytes"].map(format_size),
                           slower=best["predicted_best_slower_pct"].map("{:.1f}%".format))[
        ["world_size", "size", "measured", "predicted", "slower"]].to_string(index=False))
    click.echo(f"the predicted best measured within 10% of the measured best at {hits:.0f}% of "
               f"{len(best)} points ('slower': how much slower the predicted best measured)")
    cross = crossovers(cost_model, comparison)
    if len(cross):
        click.echo("Predicted crossover sizes: " + "; ".join(
            f"N={r.world_size} at {format_size(r.size_bytes)}: {r.below} -> {r.above}"
            for r in cross.itertuples()))


def _save_fit(cost_model, best, comparison, out_dir: Path, fitted_to: str, loss: str, no_plot: bool) -> None:
    """model.json, model_best.csv and (unless --no-plot) the two figures."""
    from allreduce_bench.model.cost import BEST_FILE, MODEL_FILE

    path = cost_model.save(out_dir / MODEL_FILE)
    best[["world_size", "size_bytes", "measured", "predicted", "measured_best_us",
          "predicted_best_measured_us", "predicted_best_slower_pct"]].to_csv(out_dir / BEST_FILE, index=False)
    click.echo(f"model: {path}; winners: {out_dir / BEST_FILE}")
    if not no_plot:
        _plot_fit(cost_model, best, comparison, out_dir, fitted_to, loss)


def _plot_fit(cost_model, best, comparison, out_dir: Path, fitted_to: str, loss: str) -> None:
    from allreduce_bench.model.plots import model_figure, winners_figure

    figure = model_figure(comparison, cost_model, out_dir / "plots" / "model.png",
                          footnote=f"{fitted_to}; {loss} relative error")
    click.echo(f"figure: {figure}")
    figure = winners_figure(best, out_dir / "plots" / "model_best.png", footnote=fitted_to)
    click.echo(f"figure: {figure}")


@model.command("predict")
@click.option("--algo", "algos", default="native,ring,naive,hierarchical", show_default=True,
              help="Comma-separated algorithms, or all (every one with a cost, ranked by time).")
@click.option("--world-size", type=int, required=True, help="Number of ranks (GPUs).")
@click.option("--ranks-per-node", type=int, default=8, show_default=True,
              help="Ranks per node; a world this size or smaller is one node.")
@click.option("--size", "sizes", default="1G", show_default=True,
              help="Comma-separated per-rank tensor sizes, binary K/M/G as in `run --sizes`.")
@link_options
def predict_command(algos, world_size, ranks_per_node, sizes, model_path, intra_bw, inter_bw,
                    intra_latency, inter_latency, reduce_bw, native_as):
    """Predict AllReduce time, algbw and busbw for a layout, from a model or link parameters.

    \b
    e.g. allreduce-bench model predict --algo ring --world-size 64 --ranks-per-node 8 --size 1G \\
           --intra-bw 900GB/s --inter-bw 25GB/s --intra-latency 5us --inter-latency 10us
    """
    from allreduce_bench.core.metrics import algbw_GBps, busbw_GBps
    from allreduce_bench.model.cost import allreduce_time, bottleneck, layout, rank_algorithms

    size_list = parse_size_list(sizes, "--size")
    check_positive_int(world_size, "--world-size")
    check_positive_int(ranks_per_node, "--ranks-per-node")
    nodes, per_node = layout(world_size, ranks_per_node)
    cost_model = _load(model_path)
    names = _algorithm_names(algos, cost_model)
    native_as = native_as or (cost_model.native_as if cost_model else "ring")

    def links_for(name):
        return resolve_links(name, cost_model, intra_bw, inter_bw, intra_latency, inter_latency,
                             reduce_bw)

    blocks = []  # everything is computed before anything is printed: an error stays one line
    if len(names) > 1:
        for size in size_list:
            ranked = rank_algorithms(links_for, names, size, world_size, per_node, native_as)
            blocks.append(f"\n# ranking at {format_size(size)} (fastest first)\n" + "\n".join(
                f"{i + 1:>3}. {r.algorithm:<20} {units.format_seconds(r.time_s):>10}  x{r.vs_best:.2f}"
                for i, r in enumerate(ranked.itertuples())))
    for name in names:
        links = links_for(name)
        label = f"{name} (as {native_as})" if name == "native" else name
        lines = [f"\n# {label}: {describe(links)}",
                 f"{'size':>8} {'time':>10} {'algbw':>12} {'busbw':>12}  bottleneck"]
        for size in size_list:
            seconds = allreduce_time(name, size, world_size, per_node, links, native_as)
            us = seconds * 1e6
            lines.append(f"{format_size(size):>8} {units.format_seconds(seconds):>10} "
                         f"{algbw_GBps(size, us):>7.3g} GB/s {busbw_GBps(size, us, world_size):>7.3g} GB/s  "
                         f"{bottleneck(name, size, world_size, per_node, links, native_as) or '-'}")
        blocks.append("\n".join(lines))
    click.echo(f"world size {world_size} = {nodes} node(s) x {per_node} ranks"
               + (f"; model {model_path}" if model_path else ""))
    click.echo("\n".join(blocks))


@model.command("ddp")
@click.option("--params", type=WHOLE_COUNT, required=True, help="Parameter count, e.g. 7B or 350M.")
@click.option("--dtype", default="bfloat16", show_default=True, help="Gradient dtype: bfloat16, float16, float32, ...")
@click.option("--compute", type=POSITIVE_SECONDS, required=True,
              help="Forward + backward time per step per GPU, e.g. 0.5s.")
@click.option("--bandwidth", "bandwidths", type=BANDWIDTH, multiple=True,
              help="A link bandwidth, e.g. 900GB/s; repeat to compare links (comm = 2 x gradient "
                   "bytes / bandwidth). With --gpus: one value for every link, or two for intra "
                   "then inter.")
@click.option("--gpus", help="GPU counts for a weak-scaling table and figure, e.g. 8,16,...,1024.")
@click.option("--ranks-per-node", type=int, default=8, show_default=True, help="GPUs per node, with --gpus.")
@click.option("--algo", default="native", show_default=True, help="AllReduce algorithm, with --gpus.")
@click.option("--bucket", type=BYTES, default="25MiB", show_default=True,
              help="DDP bucket size (torch's bucket_cap_mb=25 is 25MiB).")
@click.option("--backward-share", type=float, default=2 / 3, show_default="2/3",
              help="Share of compute that is the backward pass, the window AllReduce can overlap.")
@click.option("--overlappable", type=SECONDS,
              help="Seconds of communication that overlap compute. [all but the last bucket, "
                   "bounded by the backward pass]")
@click.option("--plot", "plot_path", type=OUTPUT_PATH,
              default=Path("plots/ddp-scaling.png"),
              show_default=True, help="Figure of efficiency against GPU count, with --gpus.")
@link_options
def ddp_command(params, dtype, compute, bandwidths, gpus, ranks_per_node, algo, bucket,
                backward_share, overlappable, plot_path, model_path, intra_bw, inter_bw,
                intra_latency, inter_latency, reduce_bw, native_as):
    """Step time and scaling efficiency of data-parallel training (the seed's model).

    \b
    step = compute + max(0, comm - overlappable), efficiency = compute / step.
    e.g. allreduce-bench model ddp --params 7B --dtype bfloat16 --compute 0.5s \\
           --bandwidth 900GB/s --bandwidth 25GB/s
         allreduce-bench model ddp --params 7B --compute 0.5s --gpus 8,16,...,1024 \\
           --ranks-per-node 8 --bandwidth 900GB/s --bandwidth 25GB/s
    """
    from allreduce_bench.core.config.checks import check_finite, check_writable_file
    from allreduce_bench.model import step as ddp

    check_positive_int(ranks_per_node, "--ranks-per-node")
    check_finite(backward_share, "--backward-share", low=None)
    if not 0 <= backward_share <= 1:
        raise UsageError(f"--backward-share must be between 0 and 1, got {backward_share:g}")
    if gpus:
        check_writable_file(plot_path, "--plot")
    grad = ddp.gradient_bytes(params, dtype)
    overlap = {"backward_share": backward_share, "overlappable_s": overlappable}
    full, last = ddp.buckets(grad, bucket)
    if gpus:
        table, header = _scaling(ddp, grad, compute, gpus, ranks_per_node, algo, bucket, overlap,
                                 bandwidths, model_path, intra_bw, inter_bw, intra_latency,
                                 inter_latency, native_as, reduce_bw)
    elif bandwidths:
        steps = [(bandwidth, ddp.seed_step(grad, compute, bandwidth, bucket, **overlap))
                 for bandwidth in bandwidths]
    else:
        raise UsageError("give --bandwidth (e.g. --bandwidth 900GB/s --bandwidth 25GB/s), or --gpus "
                         "with link parameters for a scaling table")

    click.echo(f"gradients: {units.format_count(params)} parameters x {ddp.dtype_bytes(dtype)} B "
               f"({dtype}) = {units.format_bytes(grad)}; AllReduce traffic per step 2 x "
               f"{units.format_bytes(grad)} = {units.format_bytes(ddp.traffic_bytes(grad))}")
    window = (f"{units.format_seconds(overlappable, 's')} given as overlappable" if overlappable is not None
              else f"backward {units.format_seconds(backward_share * compute, 's')} can overlap all "
                   "but the last bucket")
    click.echo(f"compute {units.format_seconds(compute, 's')} per step; {full + 1} buckets of up to "
               f"{units.format_bytes(bucket)}; {window}")
    if gpus:
        title = (f"DDP weak scaling: {units.format_count(params)} {dtype} gradients, "
                 f"{units.format_seconds(compute, 's')} compute, {ranks_per_node} GPUs/node")
        _echo_scaling(table, header, plot_path, title)
    else:
        _echo_steps(steps)


def _echo_scaling(table, header: str, plot_path: Path, title: str) -> None:
    from allreduce_bench.model.plots import scaling_figure

    click.echo(header)
    click.echo(f"\n{'gpus':>6} {'nodes':>6} {'comm':>10} {'exposed':>10} {'step':>10} "
               f"{'efficiency':>11}  communication")
    for row in table.itertuples():
        click.echo(f"{row.gpus:>6} {row.nodes:>6} {units.format_seconds(row.comm_s, 's'):>10} "
                   f"{units.format_seconds(row.exposed_s, 's'):>10} {units.format_seconds(row.step_s, 's'):>10} "
                   f"{row.efficiency:>10.1%}  {'hidden' if row.hidden else 'exposed'}")
    click.echo(f"figure: {scaling_figure(table, plot_path, title, footnote=header)}")


def _echo_steps(steps) -> None:
    click.echo(f"\n{'bandwidth':>12} {'comm':>10} {'exposed':>10} {'step':>10} {'efficiency':>11}  communication")
    for bandwidth, step in steps:
        click.echo(f"{units.format_bandwidth(bandwidth):>12} {units.format_seconds(step.comm_s, 's'):>10} "
                   f"{units.format_seconds(step.exposed_s, 's'):>10} {units.format_seconds(step.step_s, 's'):>10} "
                   f"{step.efficiency:>10.1%}  {_verdict(step)}")


def _verdict(step) -> str:
    if step.hidden:
        return (f"hidden behind compute (only the last bucket, "
                f"{units.format_seconds(step.last_bucket_s)}, is exposed)")
    text = f"exposed: {units.format_seconds(step.exposed_s, 's')} added to every step"
    return text + (f"; comm is {step.comm_s / step.compute_s:.1f}x compute, the bottleneck"
                   if step.comm_s > step.compute_s else "")


def _algorithm_names(text, cost_model) -> list[str]:
    """--algo: names (each with a cost), or all: every algorithm with a cost (those the model
    fitted, with a model)."""
    from allreduce_bench.model.cost import modelled

    known = modelled()
    names = [a.strip() for a in text.split(",") if a.strip()]
    if "all" in names:
        fitted = cost_model.algorithms if cost_model else known
        names = [a for a in known if a in fitted and not a.startswith("native:")]
    for name in names:
        if name not in known:
            raise UsageError(f"unknown algorithm {name!r} in --algo (or one without a cost); "
                             f"choose from {', '.join(known)}, or all")
    if not names:
        raise UsageError("--algo is empty; name algorithms, or all")
    return names


def _scaling(ddp, grad, compute, gpus, ranks_per_node, algo, bucket, overlap, bandwidths,
             model_path, intra_bw, inter_bw, intra_latency, inter_latency, native_as, reduce_bw=None):
    """The weak-scaling table and a line saying what it assumed."""
    from allreduce_bench.model.cost import modelled

    if algo not in modelled():
        raise UsageError(f"unknown --algo {algo!r}; choose from {', '.join(modelled())}")
    if len(bandwidths) > 2:
        raise UsageError("with --gpus give at most two --bandwidth values: intra-node, then inter-node")
    if bandwidths:
        intra_bw = intra_bw or bandwidths[0]
        inter_bw = inter_bw or bandwidths[-1]
    counts = ddp.parse_gpu_counts(gpus)
    cost_model = _load(model_path)
    native_as = native_as or (cost_model.native_as if cost_model else "ring")
    links = resolve_links(algo, cost_model, intra_bw, inter_bw, intra_latency, inter_latency,
                          reduce_bw)
    table = ddp.weak_scaling(counts, ranks_per_node, grad, compute, links, algo, bucket, native_as,
                             **overlap)
    label = f"{algo} (as {native_as})" if algo == "native" else algo
    return table, (f"weak scaling, {ranks_per_node} GPUs per node, one {label} AllReduce per bucket; "
                   f"{describe(links)}")
