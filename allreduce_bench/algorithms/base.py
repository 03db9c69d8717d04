"""What an algorithm declares, and the vocabulary of its cost (no torch: the cost model reads it).

An `Algorithm` is a name, a one-line description, `build(tensor, world) -> call` (allocation and
planning in `build`; the call is what gets timed), optionally its cost and the layouts it
supports. The cost is a list of `Step`s on the critical path, in the alpha-beta-gamma model:
in each step, every link class carries some messages and bytes on its busiest link (a rank's own
intra-node link; a node's uplink for inter-node traffic), and some bytes are summed on the way.
A step lasts max over classes of (messages x alpha_c + bytes / B_c), plus gamma x bytes reduced.

`traffic` turns a step's list of transfers (source rank, destination rank, bytes) into those
per-class numbers, so a schedule written once serves both the builder and the cost.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

INTRA, INTER = "intra", "inter"


@dataclass(frozen=True)
class Step:
    """`repeat` identical steps: per link class (messages, bytes) on its busiest link, and the
    bytes a rank on the critical path reduces (adds) in the step."""

    repeat: int
    paths: dict[str, tuple[float, float]]
    reduced: float = 0.0


Cost = Callable[[float, int, int], "list[Step]"]  # (size_bytes, world_size, ranks_per_node)
# (world_size, ranks_per_node or None when the launcher decides, backend) -> why not, or None
Supports = Callable[[int, "int | None", str], "str | None"]


@dataclass(frozen=True)
class Algorithm:
    name: str
    description: str
    build: Callable  # (tensor, world) -> call() that sums `tensor` over the world, in place
    cost: Cost | None = None  # None: measured and reported, but not in the cost model
    supports: Supports | None = None  # None: every world size, layout and backend
    origin: str = "built-in"  # or the plug-in's entry point

    def refusal(self, world_size: int, ranks_per_node: int | None, backend: str) -> str | None:
        return self.supports(world_size, ranks_per_node, backend) if self.supports else None


def traffic(transfers: Iterable[tuple[int, int, float]], ranks_per_node: int,
            reduced: float = 0.0, repeat: int = 1) -> Step:
    """The step in which every (source, destination, bytes) transfer happens at once.

    Intra-node: the busiest rank, by messages and by bytes, each the larger of what it sends and
    what it receives (links are full duplex). Inter-node: messages per rank likewise, bytes
    through the busiest node's uplink (every rank of a node shares it).
    """
    sent = defaultdict(lambda: [0, 0.0])  # (class, 'out'|'in', rank or node) -> [messages, bytes]
    for source, destination, size in transfers:
        if source == destination or size <= 0:
            continue
        a, b = source // ranks_per_node, destination // ranks_per_node
        link = INTRA if a == b else INTER
        for key in ((link, "out", source), (link, "in", destination)):
            sent[key][0] += 1
        for key in (((INTRA, "out", source), (INTRA, "in", destination)) if link == INTRA
                    else ((INTER, "out node", a), (INTER, "in node", b))):
            sent[key][1] += size
    paths = {}
    for link in (INTRA, INTER):
        counts = [v for k, v in sent.items() if k[0] == link]
        if counts:
            paths[link] = (float(max(v[0] for v in counts)), float(max(v[1] for v in counts)))
    return Step(repeat, paths, float(reduced))


def chunk_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of `parts` chunks covering `numel` elements, the first numel % parts longer."""
    base, extra = divmod(numel, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


# --- folding a world into a power of two (recursive doubling, halving-doubling) -------------

def fold(world_size: int) -> tuple[int, int]:
    """(p, extra): the largest power of two p <= N and the r = N - p ranks folded in first.

    Ranks 2i and 2i+1, i < r, pair up: the even one hands its vector to the odd one before the
    power-of-two part and gets the result back after it.
    """
    p = 1 << (world_size.bit_length() - 1)
    return p, world_size - p


def virtual_rank(rank: int, world_size: int) -> int | None:
    """Rank in the power-of-two part, or None for a rank folded out (an even rank below 2r)."""
    _, extra = fold(world_size)
    if rank < 2 * extra:
        return rank // 2 if rank % 2 else None
    return rank - extra


def real_rank(virtual: int, world_size: int) -> int:
    _, extra = fold(world_size)
    return 2 * virtual + 1 if virtual < extra else virtual + extra


def fold_steps(size_bytes: float, world_size: int, ranks_per_node: int) -> tuple[list[Step], list[Step]]:
    """The fold-in step (even ranks send their whole vector, odd ones add it) and the fold-out
    step (the result back), empty for a power of two."""
    _, extra = fold(world_size)
    if not extra:
        return [], []
    pairs = [(2 * i, 2 * i + 1) for i in range(extra)]
    into = traffic([(a, b, size_bytes) for a, b in pairs], ranks_per_node, reduced=size_bytes)
    back = traffic([(b, a, size_bytes) for a, b in pairs], ranks_per_node)
    return [into], [back]

