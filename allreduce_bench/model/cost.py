"""An alpha-beta(-gamma) cost model of the AllReduce algorithms over intra- and inter-node links,
over each algorithm's declared steps (doc/model.md states it)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.core import algorithms as registry
from allreduce_bench.core.algorithms.base import INTER, INTRA, Step
from allreduce_bench.core.analysis.tables import algorithm_rank
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.layout import node_layout
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.units import format_size

MODEL_FILE = "model.json"
BEST_FILE = "model_best.csv"
FORMAT = "allreduce-bench alpha-beta cost model"


@dataclass(frozen=True)
class Link:
    """One link class: seconds per message and bytes per second."""

    alpha_s: float
    bandwidth_Bps: float

    def cost(self, messages: float, size_bytes: float) -> float:
        return messages * self.alpha_s + size_bytes / self.bandwidth_Bps

    def to_json(self) -> dict:
        return {"alpha_us": self.alpha_s * 1e6, "bandwidth_GBps": self.bandwidth_Bps / 1e9}

    @classmethod
    def from_json(cls, data: dict | None) -> Link | None:
        if data is None:
            return None
        return cls(float(data["alpha_us"]) * 1e-6, float(data["bandwidth_GBps"]) * 1e9)


@dataclass(frozen=True)
class Links:
    """The two link classes (None: unknown) and the gamma term (infinite: reductions cost nothing apart)."""

    intra: Link | None
    inter: Link | None
    reduce_Bps: float = math.inf

    def get(self, link_class: str) -> Link | None:
        return self.intra if link_class == INTRA else self.inter


class MissingLink(UsageError):
    """A prediction needs a link class the links lack; `missing` says which, for a command to reword."""

    def __init__(self, link_class: str, algorithm: str, world_size: int, ranks_per_node: int):
        self.layout = (world_size, ranks_per_node)
        self.missing = (f"no {link_class}-node link parameters for {algorithm} at world size "
                        f"{world_size} ({ranks_per_node} ranks per node)")
        span = "more than one node" if link_class == INTER else "one node"
        super().__init__(f"{self.missing}; give --{link_class}-bw or fit results that span {span}")


def layout(world_size: int, ranks_per_node: int) -> tuple[int, int]:
    """(nodes, ranks per node), as the benchmark lays a world out (layout.node_layout)."""
    if world_size < 1:
        raise UsageError(f"world size must be at least 1, got {world_size}")
    per_node = node_layout(world_size, ranks_per_node)
    return world_size // per_node, per_node


def modelled() -> list[str]:
    """Every registered algorithm that declares a cost."""
    return [name for name, a in registry.registry().items() if a.cost is not None]


def steps(algorithm: str, size_bytes: float, world_size: int, ranks_per_node: int,
          native_as: str = "ring") -> list[Step]:
    _, per_node = layout(world_size, ranks_per_node)
    if algorithm == "native" and native_as != "ring":
        if native_as == "native" or native_as not in modelled():
            raise UsageError(f"native can be modelled as another algorithm with a cost "
                             f"({', '.join(a for a in modelled() if a != 'native')}), not {native_as!r}")
        algorithm = native_as
    known = registry.registry()
    if algorithm not in known:
        raise UsageError(f"unknown algorithm {algorithm!r}; choose from {', '.join(modelled())}")
    cost = known[algorithm].cost
    if cost is None:
        raise UsageError(f"{algorithm} declares no cost, so the model cannot predict it")
    return cost(float(size_bytes), world_size, per_node) if world_size > 1 else []


def allreduce_time(algorithm: str, size_bytes: float, world_size: int, ranks_per_node: int,
                   links: Links, native_as: str = "ring") -> float:
    """Predicted seconds for one AllReduce of `size_bytes` per rank."""
    total = 0.0
    for step in steps(algorithm, size_bytes, world_size, ranks_per_node, native_as):
        costs = _path_costs(step, links, algorithm, world_size, ranks_per_node).values()
        total += step.repeat * (max(costs, default=0.0) + step.reduced / links.reduce_Bps)
    return total


def _path_costs(step: Step, links: Links, algorithm: str, world_size: int, ranks_per_node: int) -> dict[str, float]:
    costs = {}
    for link_class, (messages, size) in step.paths.items():
        link = links.get(link_class)
        if link is None:
            raise MissingLink(link_class, algorithm, world_size, ranks_per_node)
        costs[link_class] = link.cost(messages, size)
    return costs


def bottleneck(algorithm: str, size_bytes: float, world_size: int, ranks_per_node: int,
               links: Links, native_as: str = "ring") -> str:
    """Which link class the longest part of the time is spent on ('intra', 'inter' or '')."""
    spent = {INTRA: 0.0, INTER: 0.0}
    for step in steps(algorithm, size_bytes, world_size, ranks_per_node, native_as):
        costs = _path_costs(step, links, algorithm, world_size, ranks_per_node)
        slowest = max(costs, key=lambda c: (costs[c], c == INTER))  # a tie: inter, as in the fit
        spent[slowest] += step.repeat * costs[slowest]
    return max(spent, key=spent.__getitem__) if any(spent.values()) else ""


# ---- fitting -------------------------------------------------------------------------------

def critical_path(found: list[Step]) -> np.ndarray:
    """[m_intra, b_intra, m_inter, b_inter, reduced] along the critical path (inter: the bottleneck
    of a step over both), so T = this . [alpha_intra, 1/B_intra, alpha_inter, 1/B_inter, 1/B_reduce]."""
    out = np.zeros(5)
    for step in found:
        out[4] += step.repeat * step.reduced
        if not step.paths:
            continue
        link_class = INTER if INTER in step.paths else INTRA
        messages, size = step.paths[link_class]
        at = 0 if link_class == INTRA else 2
        out[at:at + 2] += step.repeat * np.array([messages, size])
    return out


def _nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with every unknown >= 0 (pin the most negative to 0, solve again)."""
    free = np.ones(a.shape[1], dtype=bool)
    while True:
        x = np.zeros(a.shape[1])
        x[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if (x >= 0).all():
            return x
        free[np.argmin(np.where(free, x, np.inf))] = False


def solve_relative(design: np.ndarray, times: np.ndarray, loss: str = "absolute",
                   iterations: int = 100) -> np.ndarray:
    """x >= 0 minimising the relative errors of design @ x against times (4K and 64M rows count
    alike); 'absolute' reweights towards a median-like fit, so a few noisy sizes do not drag the line."""
    a = design / times[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a = a / scale  # columns of messages and of bytes differ by ~1e8: balance them
    ones = np.ones(len(times))
    weights = np.ones(len(times))
    x = _nonnegative_lstsq(a, ones)
    for _ in range(iterations if loss == "absolute" else 0):
        weights = 1.0 / np.maximum(np.abs(a @ x - 1.0), 1e-4)
        root = np.sqrt(weights)
        new = _nonnegative_lstsq(a * root[:, None], ones * root)
        if np.allclose(new, x, rtol=1e-7, atol=1e-12):
            break
        x = new
    if loss not in ("absolute", "squares"):
        raise UsageError(f"unknown loss {loss!r}; use absolute or squares")
    return x / scale


@dataclass(frozen=True)
class AlgorithmFit:
    links: Links
    shared: bool  # one link fitted for both classes: the rows could not tell them apart
    rows: int  # gamma not fitted (infinite reduce_Bps): the rows could not tell it from B


def _link(alpha_s: float, inverse_bandwidth: float) -> Link:
    return Link(float(alpha_s), 1.0 / inverse_bandwidth if inverse_bandwidth > 0 else math.inf)


def _rank(design: np.ndarray) -> int:
    return int(np.linalg.matrix_rank(design / np.linalg.norm(design, axis=0)))


def fit_steps(found: list[list[Step]], times_s: np.ndarray, loss: str = "absolute",
              one_link: bool = False) -> AlgorithmFit | None:
    """(alpha, B) per link class (one for both with `one_link` or where the rows cannot tell them
    apart), plus gamma where the rows tell it from B; None where fewer than two sizes fix it."""
    full = np.array([critical_path(f) for f in found]).reshape(-1, 5)
    design, reduced = full[:, :4], full[:, 4]
    has_intra, has_inter = bool(design[:, :2].any()), bool(design[:, 2:].any())
    shared = has_intra and has_inter and (one_link or _rank(design) < 4)
    if shared:
        design = design[:, :2] + design[:, 2:]
    elif not (has_intra and has_inter):
        design = design[:, :2] if has_intra else design[:, 2:]
    if not (has_intra or has_inter) or _rank(design) < design.shape[1]:
        return None
    paths = [step.paths for f in found for step in f]
    excess = design.shape[1] == 4 and any(len(p) > 1 for p in paths)
    if excess:
        # Steps over both classes cost the inter link's time in the fit, so keep the inter link
        # no faster than the intra one (then the max of the prediction agrees): solve for the
        # intra unknowns and the non-negative excess of the inter ones over them.
        design = np.column_stack([design[:, :2] + design[:, 2:], design[:, 2:]])
    # gamma only where the rows can tell it from the bandwidths (reduced bytes not a fixed
    # multiple of the bytes sent); otherwise it stays folded into them
    with_reduce = bool(reduced.any()) and _rank(np.column_stack([design, reduced])) > design.shape[1]
    x = solve_relative(np.column_stack([design, reduced]) if with_reduce else design, times_s, loss)
    reduce_Bps = 1.0 / x[-1] if with_reduce and x[-1] > 0 else math.inf
    if excess:
        x[2:4] += x[:2]
    if design.shape[1] == 4:
        links = Links(_link(x[0], x[1]), _link(x[2], x[3]), reduce_Bps)
    else:
        link = _link(x[0], x[1])
        used = {c for p in paths for c in p}  # a ring over 2 x 8: intra steps ride along, unseen
        effective = (INTRA in used) != has_intra or (INTER in used) != has_inter
        shared = shared or effective
        links = Links(link if has_intra or effective else None, link if has_inter or effective else None,
                      reduce_Bps)
    return AlgorithmFit(links, shared, len(found))


def fit_algorithm(rows: pd.DataFrame, algorithm: str, native_as: str = "ring",
                  loss: str = "absolute") -> AlgorithmFit:
    rows = rows[rows["time_us_median"] > 0]
    found = [steps(algorithm, r.size_bytes, r.world_size, r.ranks_per_node, native_as)
             for r in rows.itertuples()]
    fitted = fit_steps(found, rows["time_us_median"].to_numpy(dtype=float) * 1e-6, loss)
    if fitted is None:
        raise UsageError(f"cannot fit {algorithm}: it needs at least two different sizes at some "
                         "world size greater than 1; measure a sweep of sizes")
    return fitted


@dataclass
class CostModel:
    """Fitted link parameters per algorithm, as saved in model.json."""
    algorithms: dict[str, AlgorithmFit]
    native_as: str = "ring"
    skipped: dict[str, str] = field(default_factory=dict)  # algorithm -> why it was not fitted
    loss: str = "absolute"
    sources: list[str] = field(default_factory=list)
    setup: dict = field(default_factory=dict)  # backend, device, dtype of the rows

    def links(self, algorithm: str) -> Links:
        try:
            return self.algorithms[algorithm].links
        except KeyError:
            raise UsageError(f"the model has no fit for {algorithm!r}; it has "
                             f"{', '.join(self.algorithms)}") from None

    def time(self, algorithm: str, size_bytes: float, world_size: int, ranks_per_node: int) -> float:
        return allreduce_time(algorithm, size_bytes, world_size, ranks_per_node,
                              self.links(algorithm), self.native_as)

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": 2, "native_as": self.native_as, "loss": self.loss,
            "sources": self.sources, "setup": self.setup, "skipped": self.skipped,
            "algorithms": {name: {"intra": f.links.intra and f.links.intra.to_json(),
                                  "inter": f.links.inter and f.links.inter.to_json(),
                                  "reduce_GBps": (f.links.reduce_Bps / 1e9
                                                  if math.isfinite(f.links.reduce_Bps) else None),
                                  "shared": f.shared, "rows": f.rows}
                           for name, f in self.algorithms.items()},
        }

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_rounded(self.to_json()), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: Path | str) -> CostModel:
        path = Path(path)
        if path.is_dir():
            path = path / MODEL_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise UsageError(f"no model at {path}; make one with `allreduce-bench model fit RUN_DIR`") from None
        except (ValueError, UnicodeDecodeError):
            raise UsageError(f"{path} is not JSON; give a model.json written by `model fit`") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{path} is not a model written by `allreduce-bench model fit`")
        fits = {name: AlgorithmFit(Links(Link.from_json(f["intra"]), Link.from_json(f["inter"]),
                                         float(f["reduce_GBps"]) * 1e9 if f.get("reduce_GBps")
                                         else math.inf),
                                   bool(f["shared"]), int(f["rows"]))
                for name, f in data["algorithms"].items()}
        return cls(fits, data.get("native_as", "ring"), dict(data.get("skipped", {})),
                   data.get("loss", "absolute"), list(data.get("sources", [])),
                   dict(data.get("setup", {})))


def with_layout(frame: pd.DataFrame) -> pd.DataFrame:
    """`ranks_per_node` filled in place: one node where older rows lack it."""
    if "ranks_per_node" not in frame.columns:
        frame["ranks_per_node"] = frame["world_size"]
    frame["ranks_per_node"] = frame["ranks_per_node"].fillna(frame["world_size"]).astype(int)
    return frame


def model_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """AllReduce rows with a node layout."""
    frame = with_layout(allreduce_rows(frame).copy())
    frame["nodes"] = frame["world_size"] // frame["ranks_per_node"].clip(upper=frame["world_size"])
    return frame[frame["world_size"] > 1]


def _setup(frame: pd.DataFrame) -> dict:
    return {column: sorted(map(str, frame[column].dropna().unique()))
            for column in ("backend", "device", "dtype", "tag") if column in frame.columns}


def fit(frame: pd.DataFrame, native_as: str = "ring", loss: str = "absolute",
        sources: list[str] | None = None) -> CostModel:
    rows = model_rows(frame)
    if rows.empty:
        others = sorted(set(frame.get("collective", pd.Series(dtype=str)).dropna()) - {"all_reduce"})
        raise UsageError(f"the results hold {', '.join(others)} rows, not AllReduce; the cost model "
                         "fits AllReduce only" if others else
                         "no AllReduce rows with more than one rank to fit; measure world sizes >= 2")
    known, fits, skipped = registry.registry(), {}, {}
    for name, group in rows.groupby("algorithm", sort=False):
        if name not in known:
            skipped[name] = "not a registered algorithm here (a plug-in that is not installed?)"
        elif known[name].cost is None and not (name == "native" and native_as != "ring"):
            skipped[name] = "declares no cost (measured and reported, not modelled)"
        else:
            fits[name] = fit_algorithm(group, name, native_as, loss)
    if not fits:
        raise UsageError("none of the algorithms in the results declares a cost; nothing to fit ("
                         + "; ".join(f"{n}: {why}" for n, why in skipped.items()) + ")")
    return CostModel(fits, native_as, skipped, loss, list(sources or []), _setup(rows))


# ---- checking against the measurements -----------------------------------------------------

def compare(frame: pd.DataFrame, model: CostModel) -> pd.DataFrame:
    """Measured (median over runs) against predicted time per algorithm, layout and size, with error_pct."""
    rows = model_rows(frame)
    rows = rows[rows["algorithm"].isin(model.algorithms)]
    keys = ["algorithm", "world_size", "nodes", "ranks_per_node", "size_bytes"]
    table = rows.groupby(keys, sort=False)["time_us_median"].median().rename("measured_us").reset_index()
    table["predicted_us"] = [model.time(r.algorithm, r.size_bytes, r.world_size, r.ranks_per_node) * 1e6
                             for r in table.itertuples()]
    table["error_pct"] = 100.0 * (table["predicted_us"] - table["measured_us"]) / table["measured_us"]
    order = {name: i for i, name in enumerate(registry.order())}
    return table.sort_values(["algorithm", "world_size", "size_bytes"],
                             key=lambda c: c.map(order).fillna(99) if c.name == "algorithm" else c,
                             ignore_index=True)


def median_abs_error(comparison: pd.DataFrame, min_size_bytes: int = 1 << 20) -> pd.DataFrame:
    """Median |error_pct| over sizes >= min_size_bytes per algorithm and world size, and 'all'."""
    big = comparison[comparison["size_bytes"] >= min_size_bytes].assign(
        abs_error_pct=lambda t: t["error_pct"].abs())
    if big.empty:
        raise UsageError(f"no measured sizes of at least {min_size_bytes} bytes to judge the model on")
    per_world = big.pivot_table(index="algorithm", columns="world_size", values="abs_error_pct",
                                aggfunc="median")
    per_world.columns = [f"N={n}" for n in per_world.columns]
    per_world["all"] = big.groupby("algorithm")["abs_error_pct"].median()
    per_world["points"] = big.groupby("algorithm").size()
    return per_world.loc[sorted(per_world.index, key=algorithm_rank)]


# ---- which algorithm wins where ------------------------------------------------------------

def fastest(comparison: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of `keys`: the measured and the predicted fastest of those measured, with their measured times."""
    rows = []
    for key, group in comparison.groupby(keys, sort=True):
        measured = group.loc[group["measured_us"].idxmin()]
        predicted = group.loc[group["predicted_us"].idxmin()]
        rows.append({**dict(zip(keys, key)), "measured": measured["algorithm"],
                     "predicted": predicted["algorithm"], "measured_best_us": measured["measured_us"],
                     "predicted_best_measured_us": predicted["measured_us"]})
    return pd.DataFrame(rows)


def best_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """`fastest` per layout and size, with how much slower the predicted best measured."""
    table = fastest(comparison, ["world_size", "ranks_per_node", "size_bytes"])
    if not table.empty:
        table["predicted_best_slower_pct"] = 100.0 * (table["predicted_best_measured_us"] /
                                                      table["measured_best_us"] - 1)
    return table


def predicted_best(model: CostModel, algorithms: list[str], sizes, world_size: int,
                   ranks_per_node: int) -> list[str]:
    return [min(algorithms, key=lambda a: model.time(a, size, world_size, ranks_per_node))
            for size in sizes]


def crossovers(model: CostModel, comparison: pd.DataFrame, points_per_octave: int = 4) -> pd.DataFrame:
    """Per measured layout, the sizes on a fine grid where the predicted fastest algorithm changes."""
    rows = []
    layouts = comparison[["world_size", "ranks_per_node"]].drop_duplicates().itertuples(index=False)
    for world_size, per_node in sorted(layouts):
        here = comparison[(comparison["world_size"] == world_size) & (comparison["size_bytes"] > 0)]
        names = list(dict.fromkeys(here["algorithm"]))
        if len(names) < 2 or here["size_bytes"].nunique() < 2:
            continue  # one algorithm, or one size: nothing crosses
        lo, hi = here["size_bytes"].min(), here["size_bytes"].max()
        grid = np.unique(np.round(np.geomspace(lo, hi, int(np.log2(hi / lo) * points_per_octave) + 2)))
        best = predicted_best(model, names, grid, world_size, per_node)
        for size, before, after in zip(grid[1:], best, best[1:]):
            if before != after:
                rows.append({"world_size": world_size, "size_bytes": int(size), "below": before,
                             "above": after})
    return pd.DataFrame(rows, columns=["world_size", "size_bytes", "below", "above"])


def crossover_line(cross: pd.DataFrame) -> str:
    return "Predicted crossover sizes: " + "; ".join(
        f"N={r.world_size} at {format_size(r.size_bytes)}: {r.below} -> {r.above}" for r in cross.itertuples())


def rank_algorithms(links_for, algorithms: list[str], size_bytes: float, world_size: int,
                    ranks_per_node: int, native_as: str = "ring") -> pd.DataFrame:
    """Predicted time of each algorithm at one size and layout, fastest first."""
    rows = [{"algorithm": name, "time_s": allreduce_time(name, size_bytes, world_size, ranks_per_node,
                                                          links_for(name), native_as)}
            for name in algorithms]
    table = pd.DataFrame(rows).sort_values("time_s", ignore_index=True)
    table["vs_best"] = table["time_s"] / table["time_s"].iloc[0]
    return table


SAVED_DIGITS = 9  # significant digits kept: a refit on another machine (BLAS) differs in the 15th


def _rounded(value):
    """Floats to SAVED_DIGITS digits: refitting the same rows writes the same model.json everywhere."""
    if isinstance(value, float):
        return float(f"{value:.{SAVED_DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value
