"""The registry of every algorithm, per collective: the built-ins below and the plug-ins of the entry-point
group (doc/algorithms.md). No torch: the CLI's help, the cost model and the report read it without."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from allreduce_bench.core.algorithms import (
    all_gather_doubling,
    alltoall,
    broadcast,
    direct,
    halving_doubling,
    hierarchical,
    naive,
    native,
    native_collectives,
    nccl,
    recursive_doubling,
    reduce,
    reduce_scatter_halving,
    ring,
    tree,
)
from allreduce_bench.core.algorithms.base import Algorithm, Step, traffic  # noqa: F401  (the public surface)
from allreduce_bench.core.environment import user_setting
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import COLLECTIVES

ENTRY_POINT_GROUP = "allreduce_bench.algorithms"  # the plug-ins' group, unchanged by the core's folder
ALL_REDUCE = "all_reduce"
NO_PLUGINS_ENV = "ALLREDUCE_BENCH_NO_PLUGINS"  # set (to anything): installed plug-ins are ignored
DEFAULT = ("native", "ring", "naive", "hierarchical")  # what `run` measures without --algos


def _by_collective(declared: list[Algorithm]) -> dict[str, dict[str, Algorithm]]:
    table: dict[str, dict[str, Algorithm]] = {c: {} for c in COLLECTIVES}
    for a in declared:
        table[a.collective][a.name] = a
    return table


BUILT_IN_BY_COLLECTIVE = _by_collective([
    native.ALGORITHM, ring.ALGORITHM, ring.STEPS, naive.ALGORITHM, hierarchical.ALGORITHM,
    recursive_doubling.ALGORITHM, halving_doubling.ALGORITHM, tree.ALGORITHM, direct.ALGORITHM,
    *nccl.variants(),
    *native_collectives.ALGORITHMS,
    ring.ALL_GATHER, all_gather_doubling.ALGORITHM, direct.ALL_GATHER,
    ring.REDUCE_SCATTER, reduce_scatter_halving.ALGORITHM, direct.REDUCE_SCATTER,
    alltoall.PAIRWISE, alltoall.DIRECT,
    broadcast.BINOMIAL, broadcast.CHAIN, broadcast.SCATTER_ALL_GATHER,
    reduce.BINOMIAL, reduce.CHAIN, reduce.REDUCE_SCATTER_GATHER,
])
BUILT_IN: dict[str, Algorithm] = BUILT_IN_BY_COLLECTIVE[ALL_REDUCE]


def default_names(collective: str) -> tuple[str, ...]:
    """What `run` measures without --algos: the AllReduce's four, every built-in otherwise."""
    return DEFAULT if collective == ALL_REDUCE else tuple(BUILT_IN_BY_COLLECTIVE[collective])


Builder = Callable  # (tensor, world) -> call()



def _entry_points() -> list:
    from importlib.metadata import entry_points

    found = entry_points()
    if hasattr(found, "select"):  # Python >= 3.10
        return list(found.select(group=ENTRY_POINT_GROUP))
    return list(found.get(ENTRY_POINT_GROUP, []))  # Python 3.9: a dict of groups


def from_object(name: str, target, origin: str) -> Algorithm:
    """An Algorithm from what an entry point names: an Algorithm, or an object with `build` (and optionally
    `COLLECTIVE`, `cost`, `supports`, `DESCRIPTION`, else its docstring's first line)."""
    if isinstance(target, Algorithm):
        return target
    build = getattr(target, "build", None)
    if not callable(build):
        raise TypeError(f"{origin} has no build(tensor, world) function")
    collective = getattr(target, "COLLECTIVE", ALL_REDUCE)
    if collective not in COLLECTIVES:
        raise ValueError(f"COLLECTIVE = {collective!r} is none of {', '.join(COLLECTIVES)}")
    text = getattr(target, "DESCRIPTION", None) or (getattr(target, "__doc__", None) or "").strip()
    return Algorithm(name, text.splitlines()[0] if text else "(plug-in)", build,
                     getattr(target, "cost", None), getattr(target, "supports", None), origin,
                     collective)


@functools.cache
def _loaded() -> tuple[dict[str, dict[str, Algorithm]], tuple[str, ...]]:
    """(collective -> name -> plug-in, a line per plug-in that could not be loaded), once."""
    found: dict[str, dict[str, Algorithm]] = {c: {} for c in COLLECTIVES}
    problems = []
    points = [] if user_setting(NO_PLUGINS_ENV) else _entry_points()
    for point in sorted(points, key=lambda p: p.name):
        origin = f"plug-in {point.name} = {point.value}"
        try:
            algorithm = from_object(point.name, point.load(), origin)
        except Exception as error:  # a broken plug-in must not break the benchmark
            problems.append(f"{origin}: {type(error).__name__}: {error}")
            continue
        if point.name in {**BUILT_IN_BY_COLLECTIVE[algorithm.collective], **found[algorithm.collective]}:
            problems.append(f"{origin}: the name is taken; ignored")
        else:
            found[algorithm.collective][point.name] = algorithm
    return found, tuple(problems)


def plugins(collective: str = ALL_REDUCE) -> dict[str, Algorithm]:
    """Algorithms of installed plug-ins for this collective (those that fail to load: `plugin_problems`)."""
    return _loaded()[0][collective]


def plugin_problems() -> tuple[str, ...]:
    return _loaded()[1]


def registry(collective: str = ALL_REDUCE) -> dict[str, Algorithm]:
    """Every algorithm of one collective: built-ins in their order, then plug-ins by name."""
    return {**BUILT_IN_BY_COLLECTIVE[collective], **plugins(collective)}


def order(collective: str = ALL_REDUCE) -> list[str]:
    """The order reports and plots list algorithms in."""
    return list(registry(collective))


def lookup(name: str, collective: str = ALL_REDUCE, backend: str | None = None) -> Algorithm:
    """The algorithm `name`; an unknown one is refused with the choices (those that run on `backend`)."""
    known = registry(collective)
    try:
        return known[name]
    except KeyError:
        elsewhere = [c for c in COLLECTIVES if c != collective and name in registry(c)]
        what = f" ({name} exists for {', '.join(elsewhere)})" if elsewhere else ""
        choices = names_for(backend, collective) if backend else list(known)
        rest = len(known) - len(choices)
        raise UsageError(f"unknown algorithm {name!r} for {collective}{what}; choose from "
                         f"{', '.join(choices)} (or all)" + (f"; {rest} more run on other backends "
                         f"than {backend} (see run --help)" if rest else "")) from None


def get(name: str, collective: str = ALL_REDUCE) -> Builder:
    return lookup(name, collective).build


def names_for(backend: str, collective: str = ALL_REDUCE) -> list[str]:
    """`--algos all`: every algorithm of the collective that applies to this backend."""
    return [name for name, a in registry(collective).items() if a.refusal(2, None, backend) is None]


def check_supported(names: Iterable[str], world_sizes: Iterable[int], ranks_per_node: int | None,
                    backend: str, collective: str = ALL_REDUCE) -> None:
    """Refuse, before any process starts, an algorithm that does not support the run's layout."""
    for name in names:
        algorithm = lookup(name, collective)
        for world_size in world_sizes:
            per_node = None if ranks_per_node is None else min(ranks_per_node, world_size)
            reason = algorithm.refusal(world_size, per_node, backend)
            if reason:
                raise UsageError(f"--algos {name}: {reason}")


def parse(text: str, backend: str, collective: str = ALL_REDUCE) -> tuple[str, ...]:
    """The names of --algos (comma-separated, or `all`), each checked against the registry."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError("--algos is empty; choose from " + ", ".join(registry(collective)) + " (or all)")
    if "all" in names:
        names = tuple(dict.fromkeys(n for name in names for n in (
            names_for(backend, collective) if name == "all" else [name])))
    for name in names:
        lookup(name, collective, backend)
    return names


def parse_collectives(text: str) -> tuple[str, ...]:
    """--collectives: comma-separated names, or `all` for every one, in COLLECTIVES' order."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if "all" in names:
        return COLLECTIVES
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown or not names:
        raise UsageError(f"--collectives {text!r}: unknown collective {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(COLLECTIVES)} (or all)")
    return names


def help_text() -> str:
    """--algos help: the built-in names and NCCL's variants."""
    plain = [name for name in BUILT_IN if not name.startswith("native:")]
    variants = ", ".join(f"native:{algo} (also {'/'.join(':' + p for p in protos)})"
                         for algo, (_, _, protos) in nccl.NCCL_ALGOS.items())
    others = "; ".join(f"{c}: {', '.join(BUILT_IN_BY_COLLECTIVE[c])}" for c in COLLECTIVES if c != ALL_REDUCE)
    return (f"Comma-separated algorithms, or all: {', '.join(plain)}; NCCL only: {variants}; "
            f"other collectives: {others}; and installed plug-ins.")
