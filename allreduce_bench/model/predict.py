"""`model predict`'s work, shared with `model ddp`: the links to predict with, and the predictions."""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import algbw_GBps, busbw_GBps
from allreduce_bench.core.units import format_size
from allreduce_bench.model.cost import CostModel, Link, Links, allreduce_time, bottleneck, modelled, rank_algorithms


@dataclass(frozen=True)
class GivenLinks:
    """The link parameters given by hand (bytes/s, seconds); None where not given."""

    intra_bw: float | None = None
    inter_bw: float | None = None
    intra_latency: float | None = None
    inter_latency: float | None = None
    reduce_bw: float | None = None


def load_model(model_path: Path | None) -> CostModel | None:
    return CostModel.load(model_path) if model_path else None


def native_model(native_as: str | None, cost_model: CostModel | None) -> str:
    """What native is modelled as: as given, else the model's, else ring."""
    return native_as or (cost_model.native_as if cost_model else "ring")


def _merged(link: Link | None, bandwidth, latency, name: str) -> Link | None:
    if bandwidth is None and latency is None:
        return link
    if link is None:
        if bandwidth is None:
            raise UsageError(f"--{name}-latency needs --{name}-bw (or a --model to take it from)")
        return Link(latency or 0.0, bandwidth)
    return Link(link.alpha_s if latency is None else latency,
                link.bandwidth_Bps if bandwidth is None else bandwidth)


def resolve_links(algorithm: str, cost_model: CostModel | None, given: GivenLinks) -> Links:
    """The model's links for `algorithm`, any parameter given by hand replacing its own."""
    base = cost_model.links(algorithm) if cost_model else Links(None, None)
    links = Links(_merged(base.intra, given.intra_bw, given.intra_latency, "intra"),
                  _merged(base.inter, given.inter_bw, given.inter_latency, "inter"),
                  base.reduce_Bps if given.reduce_bw is None else given.reduce_bw)
    if links.intra is None and links.inter is None:
        raise UsageError("give --model MODEL.json, or --intra-bw (and --inter-bw across nodes), "
                         "e.g. --intra-bw 900GB/s --inter-bw 25GB/s")
    return links


def describe(links: Links) -> str:
    parts = []
    for name, link in (("intra", links.intra), ("inter", links.inter)):
        if link is not None:
            parts.append(f"{name} {units.format_bandwidth(link.bandwidth_Bps)} + "
                         f"{units.format_seconds(link.alpha_s)}/message")
    if math.isfinite(links.reduce_Bps):
        parts.append(f"reduction {units.format_bandwidth(links.reduce_Bps)}")
    return ", ".join(parts)


def algorithm_names(text: str, cost_model: CostModel | None) -> list[str]:
    """--algo: names each with a cost, or all (those the model fitted, with a model)."""
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


def predictions(names: list[str], sizes: list[int], world_size: int, per_node: int,
                cost_model: CostModel | None, given: GivenLinks, native_as: str) -> Iterator[str]:
    """The ranking per size (with several algorithms), then each algorithm's table: a text block each."""
    def links_for(name):
        return resolve_links(name, cost_model, given)

    if len(names) > 1:
        for size in sizes:
            ranked = rank_algorithms(links_for, names, size, world_size, per_node, native_as)
            yield f"\n# ranking at {format_size(size)} (fastest first)\n" + "\n".join(
                f"{i + 1:>3}. {r.algorithm:<20} {units.format_seconds(r.time_s):>10}  x{r.vs_best:.2f}"
                for i, r in enumerate(ranked.itertuples()))
    for name in names:
        links = links_for(name)
        label = f"{name} (as {native_as})" if name == "native" else name
        lines = [f"\n# {label}: {describe(links)}",
                 f"{'size':>8} {'time':>10} {'algbw':>12} {'busbw':>12}  bottleneck"]
        for size in sizes:
            seconds = allreduce_time(name, size, world_size, per_node, links, native_as)
            us = seconds * 1e6
            lines.append(f"{format_size(size):>8} {units.format_seconds(seconds):>10} "
                         f"{algbw_GBps(size, us):>7.3g} GB/s {busbw_GBps(size, us, world_size):>7.3g} GB/s  "
                         f"{bottleneck(name, size, world_size, per_node, links, native_as) or '-'}")
        yield "\n".join(lines)
