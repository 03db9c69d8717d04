"""Who measures with whom: the circle method (its first round is one perfect matching),
re-pairing with known-good hosts, and the halves of a bisection. Plain functions of names.

Pairs of a round are disjoint, so on a non-blocking fabric (a fat tree, the emulator's switch)
no two groups measured at once share a link they are not testing.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

Pair = tuple[str, str]


def repair(suspects: Sequence[str], good: Sequence[str],
           tried: dict[str, set[str]]) -> tuple[list[Pair], list[str]]:
    """(pairs, suspects left without a partner): each suspect with a different known-good host
    it has not been measured with, every good host in at most one pair of the round.

    Greedy in suspect order over the good hosts in order; with at least as many good hosts as
    suspects plus partners already tried, every suspect finds one."""
    free = list(good)
    pairs, unpaired = [], []
    for suspect in suspects:
        partner = next((g for g in free if g != suspect and g not in tried.get(suspect, ())), None)
        if partner is None:
            unpaired.append(suspect)
            continue
        free.remove(partner)
        pairs.append((suspect, partner))
    return pairs, unpaired


def circle_rounds(hosts: Sequence[str]) -> Iterator[tuple[list[Pair], list[str]]]:
    """Every pair exactly once: the circle (round-robin) method, N-1 rounds of N/2 disjoint
    pairs for even N; odd N adds a bye, so N rounds with one host sitting out each.

    Round 1 pairs host i with host N-1-i, one perfect matching across the two halves of the
    list, which keeps neighbours (often hosts of one leaf switch) apart, so a pair's traffic
    crosses the fabric as production traffic does. Rounds are made as they are asked for."""
    ring: list[str | None] = list(hosts) + ([None] if len(hosts) % 2 else [])
    n = len(ring)
    for _ in range(n - 1):
        pairs: list[Pair] = []
        out: list[str] = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is None or b is None:
                sits_out = a if b is None else b
                if sits_out is not None:
                    out.append(sits_out)
            else:
                pairs.append((a, b))
        yield pairs, out
        ring = [ring[0], ring[-1], *ring[1:-1]]  # host 0 stays, the others turn by one


def halves(hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The two halves a bisection measures side by side (the first gets the smaller half)."""
    half = len(hosts) // 2
    return list(hosts[:half]), list(hosts[half:])


def can_split(hosts: Sequence[str], ranks_per_node: int) -> bool:
    """Whether both halves would still be a collective: at least two ranks each."""
    return (len(hosts) // 2) * ranks_per_node >= 2


def host_names(hostnames: list[str], ranks_per_node: int) -> list[str]:
    """The host of every rank: its hostname; when every rank of a world of several nodes has
    the same one, the nodes are simulated on one machine (--ranks-per-node on loopback) and are
    named node0, node1, ... by rank // ranks_per_node."""
    if len(set(hostnames)) == 1 and len(hostnames) > ranks_per_node:
        return [f"node{rank // ranks_per_node}" for rank in range(len(hostnames))]
    return list(hostnames)


def host_ranks(names: list[str]) -> dict[str, list[int]]:
    """host -> its global ranks in local-rank order, hosts in the order of their first rank."""
    found: dict[str, list[int]] = {}
    for rank, host in enumerate(names):
        found.setdefault(host, []).append(rank)
    return found


def layout_problem(ranks_of: dict[str, list[int]], ranks_per_node: int) -> str | None:
    """Why these hosts cannot be checked, or None: every host must hold ranks_per_node ranks;
    more means two nodes report one hostname (a cloned image), and they cannot be told apart."""
    odd = {h: len(r) for h, r in ranks_of.items() if len(r) != ranks_per_node}
    if not odd:
        return None
    shown = ", ".join(f"{h} has {n}" for h, n in list(odd.items())[:4])
    return (f"every host must hold {ranks_per_node} rank(s), but {shown}: duplicate hostnames? "
            "Two nodes with one hostname cannot be told apart; give each node its own hostname")


def launched_host_names(hostnames: Sequence[str | None], ranks_per_node: int,
                        nodelist: Sequence[str] = (), local: bool = False) -> list[str]:
    """The host of every launched rank, also of the ranks that never came (None: no rank has
    heard its name). A rank that never came takes its node's name from a rank of the same node
    that came, else from the launcher's nodelist (Slurm's, or ALLREDUCE_BENCH_NODELIST) by node
    rank, else from the names of the others when they count up with the node rank (node0,
    node1, .. node3: node2), else `host-of-rank<R>`. Simulated hosts of one machine (a
    local run, or ranks of two nodes or more with one hostname) are node<k>, as host_names."""
    L = max(1, ranks_per_node)
    known = [h for h in hostnames if h]
    nodes_known = {r // L for r, h in enumerate(hostnames) if h}
    if len(set(known)) == 1 and len(hostnames) > L and (local or len(nodes_known) > 1):
        return host_names([known[0]] * len(hostnames), L)
    node_names: dict[int, str] = {}
    for rank, host in enumerate(hostnames):
        if host:
            node_names.setdefault(rank // L, host)
    counted = _counting(node_names)
    names = []
    for rank, host in enumerate(hostnames):
        node = rank // L
        names.append(host or node_names.get(node)
                     or (nodelist[node] if len(nodelist) * L >= len(hostnames) else None)
                     or (counted(node) if counted else None) or f"host-of-rank{rank}")
    return names


def _counting(node_names: dict[int, str]):
    """name(node) when every known name is one prefix and a number that is the node rank plus
    one offset (node0..node3, gpu01..gpu04), else None."""
    import re

    matched = [(node, re.fullmatch(r"(.*?)(\d+)", name)) for node, name in node_names.items()]
    found = [(node, m) for node, m in matched if m is not None]
    if len(found) < 2 or len(found) < len(matched):
        return None
    prefixes = {m.group(1) for _, m in found}
    offsets = {int(m.group(2)) - node for node, m in found}
    widths = {len(m.group(2)) for _, m in found}
    if len(prefixes) != 1 or len(offsets) != 1:
        return None
    prefix, offset = prefixes.pop(), offsets.pop()
    width = widths.pop() if len(widths) == 1 else 1
    return lambda node: f"{prefix}{node + offset:0{width}d}"
