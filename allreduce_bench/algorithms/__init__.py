"""The registry: every algorithm's declaration (name, description, build, cost, supported layouts).

Built-ins are listed in BUILT_IN (one line each); other packages add theirs through the
entry-point group `allreduce_bench.algorithms`, naming a module or an object with a `build`
(and optionally `cost`, `supports`, `DESCRIPTION`; see README "Plug-in algorithms"). Nothing
here imports torch, so the CLI's help, the cost model and the report read the registry without
it; `build` imports torch when it runs.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from allreduce_bench.algorithms import (
    direct,
    halving_doubling,
    hierarchical,
    naive,
    native,
    nccl,
    recursive_doubling,
    ring,
    tree,
)
from allreduce_bench.algorithms.base import Algorithm, Step, traffic  # noqa: F401  (the public surface)
from allreduce_bench.errors import UsageError

ENTRY_POINT_GROUP = "allreduce_bench.algorithms"
NO_PLUGINS_ENV = "ALLREDUCE_BENCH_NO_PLUGINS"  # set (to anything): installed plug-ins are ignored
DEFAULT = ("native", "ring", "naive", "hierarchical")  # what `run` measures without --algos

BUILT_IN: dict[str, Algorithm] = {a.name: a for a in [
    native.ALGORITHM,
    ring.ALGORITHM,
    naive.ALGORITHM,
    hierarchical.ALGORITHM,
    recursive_doubling.ALGORITHM,
    halving_doubling.ALGORITHM,
    tree.ALGORITHM,
    direct.ALGORITHM,
    *nccl.variants(),
]}

Builder = Callable  # (tensor, world) -> call()

_plugins: dict[str, Algorithm] | None = None
PLUGIN_PROBLEMS: list[str] = []  # plug-ins that could not be loaded, one line each


def _entry_points() -> list:
    from importlib.metadata import entry_points

    found = entry_points()
    if hasattr(found, "select"):  # Python >= 3.10
        return list(found.select(group=ENTRY_POINT_GROUP))
    return list(found.get(ENTRY_POINT_GROUP, []))  # Python 3.9: a dict of groups


def from_object(name: str, target, origin: str) -> Algorithm:
    """An Algorithm from what an entry point names: an Algorithm, or a module / object with
    `build` and optionally `cost`, `supports` and `DESCRIPTION` (else its docstring's first line)."""
    if isinstance(target, Algorithm):
        return target
    build = getattr(target, "build", None)
    if not callable(build):
        raise TypeError(f"{origin} has no build(tensor, world) function")
    text = getattr(target, "DESCRIPTION", None) or (getattr(target, "__doc__", None) or "").strip()
    return Algorithm(name, text.splitlines()[0] if text else "(plug-in)", build,
                     getattr(target, "cost", None), getattr(target, "supports", None), origin)


def plugins() -> dict[str, Algorithm]:
    """Algorithms of installed plug-ins, loaded once. One that fails to load (say it imports
    torch where there is none) is left out and noted in PLUGIN_PROBLEMS."""
    global _plugins
    if _plugins is None:
        _plugins = {}
        points = [] if os.environ.get(NO_PLUGINS_ENV) else _entry_points()
        for point in sorted(points, key=lambda p: p.name):
            origin = f"plug-in {point.name} = {point.value}"
            if point.name in BUILT_IN or point.name in _plugins:
                PLUGIN_PROBLEMS.append(f"{origin}: the name is taken; ignored")
                continue
            try:
                _plugins[point.name] = from_object(point.name, point.load(), origin)
            except Exception as error:  # a broken plug-in must not break the benchmark
                PLUGIN_PROBLEMS.append(f"{origin}: {type(error).__name__}: {error}")
    return _plugins


def registry() -> dict[str, Algorithm]:
    """Every algorithm: built-ins in their order, then plug-ins by name."""
    return {**BUILT_IN, **plugins()}


def order() -> list[str]:
    """The order reports and plots list algorithms in."""
    return list(registry())


def lookup(name: str) -> Algorithm:
    known = registry()
    try:
        return known[name]
    except KeyError:
        raise UsageError(f"unknown algorithm {name!r}; choose from {', '.join(known)} "
                         "(or all)") from None


def get(name: str) -> Builder:
    return lookup(name).build


def names_for(backend: str) -> list[str]:
    """`--algos all`: every algorithm that applies to this backend."""
    return [name for name, a in registry().items() if a.refusal(2, None, backend) is None]


def check_supported(names: Iterable[str], world_sizes: Iterable[int], ranks_per_node: int | None,
                    backend: str) -> None:
    """Refuse, before any process starts, an algorithm that does not support a world size,
    layout or backend of the run (one line, exit 2)."""
    for name in names:
        algorithm = lookup(name)
        for world_size in world_sizes:
            per_node = None if ranks_per_node is None else min(ranks_per_node, world_size)
            reason = algorithm.refusal(world_size, per_node, backend)
            if reason:
                raise UsageError(f"--algos {name}: {reason}")


def parse(text: str, backend: str) -> tuple[str, ...]:
    """The names of --algos (comma-separated, or `all`), each checked against the registry."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError("--algos is empty; choose from " + ", ".join(registry()) + " (or all)")
    if "all" in names:
        names = tuple(dict.fromkeys(n for name in names
                                    for n in (names_for(backend) if name == "all" else [name])))
    for name in names:
        lookup(name)
    return names


def help_text() -> str:
    """--algos help: the built-in names (their descriptions are in the README)."""
    plain = [name for name in BUILT_IN if not name.startswith("native:")]
    return (f"Comma-separated algorithms, or all: {', '.join(plain)}; NCCL only: native:ring, "
            "native:tree, native:nvls (each also :LL, :LL128, :Simple); and installed plug-ins.")


def allreduce(name: str, tensor, world) -> None:
    """One-off in-place SUM AllReduce with the named algorithm (allocates; not for timing)."""
    get(name)(tensor, world)()


ALGORITHMS = BUILT_IN  # the former name of the built-ins' table
