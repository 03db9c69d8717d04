"""Who measures with whom: the circle method (its first round is one perfect matching),
re-pairing with known-good hosts, and the halves of a bisection. Plain functions of names.

Pairs of a round are disjoint, so on a non-blocking fabric (a fat tree, the emulator's switch)
no two groups measured at once share a link they are not testing.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

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
        pairs, out = [], []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is None or b is None:
                out.append(a if b is None else b)
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


def duplicates(hosts: Iterable[str]) -> list[str]:
    """Host names given more than once (two nodes reporting one hostname cannot be told apart)."""
    seen: set[str] = set()
    twice: list[str] = []
    for host in hosts:
        if host in seen and host not in twice:
            twice.append(host)
        seen.add(host)
    return twice
