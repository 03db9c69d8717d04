"""`model ddp`'s work as lines of text: the step model (model/step.py) on each link, or its weak scaling."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError
from allreduce_bench.model import step as ddp
from allreduce_bench.model.cost import modelled
from allreduce_bench.model.predict import GivenLinks, describe, load_model, native_model, resolve_links
from allreduce_bench.model.step import TrainingStep


def training_step(params: float, dtype: str, compute_s: float, bucket_bytes: float,
                  backward_share: float, overlappable_s: float | None) -> TrainingStep:
    """One line on an unknown dtype or bucket."""
    grad = ddp.gradient_bytes(params, dtype)
    full, _ = ddp.buckets(grad, bucket_bytes)
    return TrainingStep(params, dtype, compute_s, bucket_bytes, backward_share, overlappable_s,
                        grad, full + 1)


def steps_on_links(step: TrainingStep, bandwidths) -> list[tuple[float, ddp.StepTime]]:
    """The seed's step on each --bandwidth."""
    if not bandwidths:
        raise UsageError("give --bandwidth (e.g. --bandwidth 900GB/s --bandwidth 25GB/s), or --gpus "
                         "with link parameters for a scaling table")
    return [(bandwidth, ddp.seed_step(step.gradient_bytes, step.compute_s, bandwidth,
                                      step.bucket_bytes, **step.overlap))
            for bandwidth in bandwidths]


@dataclass(frozen=True)
class Scaling:
    """`model ddp --gpus`: the GPU counts, layout, algorithm and where its links come from."""

    gpus: str
    ranks_per_node: int
    algo: str
    bandwidths: tuple[float, ...]
    model_path: Path | None
    given: GivenLinks
    native_as: str | None


def scaling(step: TrainingStep, setup: Scaling) -> tuple[pd.DataFrame, str]:
    """The table and a line on what it assumed; one --bandwidth is every link's, two are intra then inter."""
    algo, bandwidths, given = setup.algo, setup.bandwidths, setup.given
    if algo not in modelled():
        raise UsageError(f"unknown --algo {algo!r}; choose from {', '.join(modelled())}")
    if len(bandwidths) > 2:
        raise UsageError("with --gpus give at most two --bandwidth values: intra-node, then inter-node")
    if bandwidths:
        given = replace(given, intra_bw=given.intra_bw or bandwidths[0],
                        inter_bw=given.inter_bw or bandwidths[-1])
    counts = ddp.parse_gpu_counts(setup.gpus)
    cost_model = load_model(setup.model_path)
    native_as = native_model(setup.native_as, cost_model)
    links = resolve_links(algo, cost_model, given)
    table = ddp.weak_scaling(step, counts, setup.ranks_per_node, links, algo, native_as)
    label = f"{algo} (as {native_as})" if algo == "native" else algo
    return table, (f"weak scaling, {setup.ranks_per_node} GPUs per node, one {label} AllReduce per bucket; "
                   f"{describe(links)}")


def gradient_lines(step: TrainingStep) -> Iterator[str]:
    grad = step.gradient_bytes
    yield (f"gradients: {units.format_count(step.params)} parameters x {ddp.dtype_bytes(step.dtype)} B "
           f"({step.dtype}) = {units.format_bytes(grad)}; AllReduce traffic per step 2 x "
           f"{units.format_bytes(grad)} = {units.format_bytes(ddp.traffic_bytes(grad))}")
    window = (f"{units.format_seconds(step.overlappable_s, 's')} given as overlappable"
              if step.overlappable_s is not None
              else f"backward {units.format_seconds(step.backward_share * step.compute_s, 's')} "
                   "can overlap all but the last bucket")
    yield (f"compute {units.format_seconds(step.compute_s, 's')} per step; {step.buckets} buckets "
           f"of up to {units.format_bytes(step.bucket_bytes)}; {window}")


def scaling_title(step: TrainingStep, ranks_per_node: int) -> str:
    return (f"DDP weak scaling: {units.format_count(step.params)} {step.dtype} gradients, "
            f"{units.format_seconds(step.compute_s, 's')} compute, {ranks_per_node} GPUs/node")


def scaling_lines(table: pd.DataFrame, header: str) -> Iterator[str]:
    yield header
    yield (f"\n{'gpus':>6} {'nodes':>6} {'comm':>10} {'exposed':>10} {'step':>10} "
           f"{'efficiency':>11}  communication")
    for row in table.itertuples():
        yield (f"{row.gpus:>6} {row.nodes:>6} {units.format_seconds(row.comm_s, 's'):>10} "
               f"{units.format_seconds(row.exposed_s, 's'):>10} {units.format_seconds(row.step_s, 's'):>10} "
               f"{row.efficiency:>10.1%}  {'hidden' if row.hidden else 'exposed'}")


def step_lines(steps: list[tuple[float, ddp.StepTime]]) -> Iterator[str]:
    yield f"\n{'bandwidth':>12} {'comm':>10} {'exposed':>10} {'step':>10} {'efficiency':>11}  communication"
    for bandwidth, step in steps:
        yield (f"{units.format_bandwidth(bandwidth):>12} {units.format_seconds(step.comm_s, 's'):>10} "
               f"{units.format_seconds(step.exposed_s, 's'):>10} {units.format_seconds(step.step_s, 's'):>10} "
               f"{step.efficiency:>10.1%}  {_verdict(step)}")


def _verdict(step: ddp.StepTime) -> str:
    if step.hidden:
        return f"hidden behind compute but the last bucket ({units.format_seconds(step.last_bucket_s)})"
    text = f"exposed: {units.format_seconds(step.exposed_s, 's')} a step"  # the row within 120 columns
    return text + (f"; comm {step.comm_s / step.compute_s:.1f}x compute: the bottleneck"
                   if step.comm_s > step.compute_s else "")
