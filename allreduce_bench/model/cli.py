"""`allreduce-bench model fit | predict | ddp`: the cost model as commands (no process groups)."""
from __future__ import annotations

from pathlib import Path

import click

from allreduce_bench.core import units
from allreduce_bench.core.config.checks import OUTPUT_PATH, check_positive_int
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import parse_size, parse_size_list


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


def link_options(command):
    """--model and the link parameters that override it, as keywords of predict.GivenLinks."""
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


def _echo(lines) -> None:
    """Each line; prose (not a table's indented row) within a terminal's width."""
    from allreduce_bench.core.analysis.terminal import wrapped

    for text in lines:
        click.echo("\n".join(line if line[:1].isspace() else wrapped(line) for line in text.splitlines()))


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
              help="Where model.json and plots/model.png go; a run's folder to keep them there. "
              "[plots/<first run's name>[+N] under the current directory, where `report` finds "
              "them: not into the runs read]")
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
    --min-size; writes model.json and plots/model.png (where `plot` and `report` write, unless
    --out says otherwise). Results of one node layout only
    (an imported 2 x 8 nccl-tests log) get one effective link for that layout, and the
    output says which run would separate intra- from inter-node links.
    """
    from allreduce_bench.core.cli.report import default_out_dir
    from allreduce_bench.core.config.checks import check_writable_dir
    from allreduce_bench.model import fitting
    from allreduce_bench.model.cost import best_table, fit

    out_dir = Path(out_dir or default_out_dir(paths))
    check_writable_dir(out_dir, "--out")
    frame, note = fitting.loaded(paths)
    if note:
        click.echo(f"allreduce-bench: note: {note}", err=True)
    frame = fitting.selected(frame, tag, pool)
    sources = sorted(frame["source"].unique())
    cost_model = fit(fitting.fitted_rows(frame, fit_min_size), native_as=native_as, loss=loss, sources=sources)
    comparison = fitting.comparison(frame, cost_model)
    _echo(fitting.links_lines(cost_model, loss, comparison))
    _echo(fitting.prediction_lines(comparison, parse_size(min_size, "--min-size")))
    best = best_table(comparison)
    _echo(fitting.winner_lines(best, cost_model, comparison))
    _echo(fitting.save_fit(cost_model, best, comparison, out_dir, f"fitted to {', '.join(sources)}",
                           loss, no_plot))


@model.command("predict")
@click.option("--algo", "algos", default="native,ring,naive,hierarchical", show_default=True,
              help="Comma-separated algorithms, or all (every one with a cost, ranked by time).")
@click.option("--world-size", type=int, required=True, help="Number of ranks (GPUs).")
@click.option("--ranks-per-node", type=int, default=8, show_default=True,
              help="Ranks per node; a world this size or smaller is one node.")
@click.option("--size", "sizes", default="1G", show_default=True,
              help="Comma-separated per-rank tensor sizes, binary K/M/G as in `run --sizes`.")
@link_options
def predict_command(algos, world_size, ranks_per_node, sizes, model_path, native_as, **link_parameters):
    """Predict AllReduce time, algbw and busbw for a layout, from a model or link parameters.

    \b
    e.g. allreduce-bench model predict --algo ring --world-size 64 --ranks-per-node 8 --size 1G \\
           --intra-bw 900GB/s --inter-bw 25GB/s --intra-latency 5us --inter-latency 10us
    """
    from allreduce_bench.model.cost import layout
    from allreduce_bench.model.predict import GivenLinks, algorithm_names, load_model, native_model, predictions

    size_list = parse_size_list(sizes, "--size")
    check_positive_int(world_size, "--world-size")
    check_positive_int(ranks_per_node, "--ranks-per-node")
    nodes, per_node = layout(world_size, ranks_per_node)
    cost_model = load_model(model_path)
    names = algorithm_names(algos, cost_model)
    given = GivenLinks(**link_parameters)
    # everything is computed before anything is printed: an error stays one line
    blocks = list(predictions(names, size_list, world_size, per_node, cost_model, given,
                              native_model(native_as, cost_model)))
    click.echo(f"world size {world_size} = {nodes} node(s) x {per_node} ranks"
               + (f"; model {model_path}" if model_path else ""))
    _echo(blocks)


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
                backward_share, overlappable, plot_path, model_path, native_as, **link_parameters):
    """Step time and scaling efficiency of data-parallel training (the seed's model).

    \b
    step = compute + max(0, comm - overlappable), efficiency = compute / step.
    e.g. allreduce-bench model ddp --params 7B --dtype bfloat16 --compute 0.5s \\
           --bandwidth 900GB/s --bandwidth 25GB/s
         allreduce-bench model ddp --params 7B --compute 0.5s --gpus 8,16,...,1024 \\
           --ranks-per-node 8 --bandwidth 900GB/s --bandwidth 25GB/s
    """
    from allreduce_bench.core.config.checks import check_writable_file
    from allreduce_bench.model import training
    from allreduce_bench.model.predict import GivenLinks
    from allreduce_bench.model.step import check_backward_share

    check_positive_int(ranks_per_node, "--ranks-per-node")
    check_backward_share(backward_share)
    if gpus:
        check_writable_file(plot_path, "--plot")
    step = training.training_step(params, dtype, compute, bucket, backward_share, overlappable)
    if not gpus:
        steps = training.steps_on_links(step, bandwidths)
        _echo(training.gradient_lines(step))
        _echo(training.step_lines(steps))
        return
    from allreduce_bench.model.plots import scaling_figure

    setup = training.Scaling(gpus, ranks_per_node, algo, bandwidths, model_path, GivenLinks(**link_parameters),
                             native_as)
    table, header = training.scaling(step, setup)
    _echo(training.gradient_lines(step))
    _echo(training.scaling_lines(table, header))
    figure = scaling_figure(table, plot_path, training.scaling_title(step, ranks_per_node),
                            footnote=header)
    click.echo(f"figure: {figure}")
