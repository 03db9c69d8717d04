"""What an algorithm declares, and the vocabulary of its cost in the alpha-beta-gamma model (no
torch: the cost model reads it). doc/algorithms.md says how to write one."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

INTRA, INTER = "intra", "inter"


@dataclass(frozen=True)
class Step:
    """`repeat` identical steps: per link class (messages, bytes) on its busiest link, and the bytes reduced."""

    repeat: int
    paths: dict[str, tuple[float, float]]
    reduced: float = 0.0


Cost = Callable[[float, int, int], "list[Step]"]  # (size_bytes, world_size, ranks_per_node)
# (world_size, ranks_per_node or None when the launcher decides, backend) -> why not, or None
Supports = Callable[[int, "int | None", str], "str | None"]


# what `send` and `recv` hold per collective (c: one rank's count; the root is rank 0, as in nccl-tests)
BUFFERS = {
    "all_gather": "send: c elements; recv: N c, rank q's part at q c (in place: send is that part)",
    "reduce_scatter": "send: N c; recv: c, the sum of everyone's part r (in place: send's part r)",
    "alltoall": "send: N c, part q for rank q; recv: N c, part q from rank q",
    "broadcast": "one tensor of c: the root's values everywhere",
    "reduce": "one tensor of c: the sum on the root (other ranks' values are left undefined)",
    "sendrecv": "send: c to rank r+1; recv: c from rank r-1",
}


@dataclass(frozen=True)
class Algorithm:
    name: str
    description: str
    build: Callable  # AllReduce: (tensor, world) -> call(); others: (send, recv, world) -> call()
    cost: Cost | None = None  # None: measured and reported, but not in the cost model
    supports: Supports | None = None  # None: every world size, layout and backend
    origin: str = "built-in"  # or the plug-in's entry point
    collective: str = "all_reduce"
    # backend -> the collective it really runs in this one's place (gloo's ReduceScatter: an AllReduce)
    runs_as: Callable[[str], str] | None = None

    def refusal(self, world_size: int, ranks_per_node: int | None, backend: str) -> str | None:
        return self.supports(world_size, ranks_per_node, backend) if self.supports else None

    def ran_as(self, backend: str) -> str:
        """What the backend ran: this collective, or what it stands in for it."""
        return (self.runs_as(backend) if self.runs_as else "") or self.collective


def in_sequence(*costs: Cost) -> Cost:
    """The cost of running algorithms one after the other: their steps in order."""
    def cost(size_bytes: float, world_size: int, ranks_per_node: int) -> list[Step]:
        return [step for part in costs for step in part(size_bytes, world_size, ranks_per_node)]
    return cost


def traffic(transfers: Iterable[tuple[int, int, float]], ranks_per_node: int,
            reduced: float = 0.0, repeat: int = 1) -> Step:
    """The step of these (source, destination, bytes) transfers at once: the busiest rank intra-node (full
    duplex), the busiest node's uplink inter-node."""
    # (class, 'out'|'in', rank or node) -> [messages, bytes]
    sent: defaultdict[tuple, list[float]] = defaultdict(lambda: [0, 0.0])
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
    """(p, extra): the largest power of two p <= N and the N - p pairs (2i, 2i+1) folded in first."""
    p = 1 << (world_size.bit_length() - 1)
    return p, world_size - p


def virtual_rank(rank: int, world_size: int) -> int | None:
    """Rank in the power-of-two part, or None for a rank folded out."""
    _, extra = fold(world_size)
    if rank < 2 * extra:
        return rank // 2 if rank % 2 else None
    return rank - extra


def real_rank(virtual: int, world_size: int) -> int:
    _, extra = fold(world_size)
    return 2 * virtual + 1 if virtual < extra else virtual + extra


def fold_steps(size_bytes: float, world_size: int, ranks_per_node: int, back_bytes: float | None = None,
               reduced: float | None = None) -> tuple[list[Step], list[Step]]:
    """The fold-in step (`size_bytes` sent, `reduced` added) and fold-out step, empty for a power of two."""
    _, extra = fold(world_size)
    if not extra:
        return [], []
    back_bytes = size_bytes if back_bytes is None else back_bytes
    pairs = [(2 * i, 2 * i + 1) for i in range(extra)]
    into = traffic([(a, b, size_bytes) for a, b in pairs], ranks_per_node,
                   reduced=size_bytes if reduced is None else reduced)
    back = traffic([(b, a, back_bytes) for a, b in pairs], ranks_per_node)
    return [into], [back]


def members(virtual: int, world_size: int) -> list[int]:
    """The real ranks a virtual rank stands for: two for a folded pair, else one."""
    _, extra = fold(world_size)
    return [2 * virtual, 2 * virtual + 1] if virtual < extra else [virtual + extra]


def window_ranks(window: tuple[int, int], world_size: int) -> list[int]:
    """The real ranks behind virtual ranks [a, b), in increasing order."""
    return [q for v in range(*window) for q in members(v, world_size)]
