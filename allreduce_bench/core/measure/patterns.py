"""Input patterns whose exact result is known whatever the order of additions (doc/collectives.md)."""
from __future__ import annotations

import math

import torch

# Largest integer M such that 0..M are all exact in the dtype.
_EXACT_UP_TO = {torch.bfloat16: 256, torch.float16: 2048, torch.float32: 1 << 24,
                torch.float64: 1 << 53}
_MAX_PERIOD = 13  # a prime, so the pattern does not line up with power-of-two chunk sizes


def _limit(dtype: torch.dtype) -> int:
    return _EXACT_UP_TO.get(dtype, 256) if dtype.is_floating_point else torch.iinfo(dtype).max


def rank_weights(dtype: torch.dtype, world_size: int) -> list[int]:
    limit, world_size = _limit(dtype), max(world_size, 1)
    weights = [1 + r % 3 for r in range(world_size)]
    if sum(weights) > limit:  # very many ranks in a narrow dtype: every m-th rank counts once
        every = math.ceil(world_size / limit)
        weights = [1 if r % every == 0 else 0 for r in range(world_size)]
    return weights


def period(dtype: torch.dtype, world_size: int) -> int:
    return max(2, min(_MAX_PERIOD, _limit(dtype) // sum(rank_weights(dtype, world_size)) + 1))


def _values(numel: int, weight: int, p: int, dtype: torch.dtype, device) -> torch.Tensor:
    # one period, tiled: 13x faster than indexing by an int64 arange
    table = torch.arange(p, dtype=torch.int64, device=device).mul_(weight).to(dtype)
    return table.repeat(-(-numel // p))[:numel]


def fill(tensor: torch.Tensor, rank: int, world_size: int) -> None:
    weight = rank_weights(tensor.dtype, world_size)[rank]
    p = period(tensor.dtype, world_size)
    tensor.copy_(_values(tensor.numel(), weight, p, tensor.dtype, tensor.device).view_as(tensor))


def expected_sum(numel: int, world_size: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    total = sum(rank_weights(dtype, world_size))
    return _values(numel, total, period(dtype, world_size), dtype, device)


def count_wrong(result: torch.Tensor, expected: torch.Tensor) -> int:
    """Elements that differ from the expectation (nccl-tests' #wrong, per rank)."""
    return int((result.reshape(-1) != expected.reshape(-1)).sum().item())


# --- every other collective -------------------------------------------------------------------

STRIDE = 37  # below every modulus, which are primes: distinct keys never share a tag
_MOVED_MAX = 65521  # the largest prime below 2^16: tags stay small integers in every dtype


def _largest_prime(up_to: int) -> int:
    return next(m for m in range(up_to, 1, -1) if all(m % d for d in range(2, math.isqrt(m) + 1)))


def modulus(dtype: torch.dtype) -> int:
    return _largest_prime(min(_limit(dtype), _MOVED_MAX))


def tagged(numel: int, key: int, dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """A part with key `key`: element i is (key * STRIDE + i) mod M."""
    m = modulus(dtype)
    positions = torch.arange(numel, dtype=torch.int64, device=device)
    return positions.add_(key * STRIDE).remainder_(m).to(dtype)


def junk(tensor: torch.Tensor) -> None:
    """Fill an output buffer with the value no part holds, so a part never written shows up."""
    tensor.fill_(modulus(tensor.dtype))


def _summed(numel: int, rank: int, world_size: int, dtype: torch.dtype, device) -> torch.Tensor:
    weight = rank_weights(dtype, world_size)[rank]
    return _values(numel, weight, period(dtype, world_size), dtype, device)


def collective_input(collective: str, count: int, rank: int, world_size: int, dtype: torch.dtype,
                     device="cpu") -> torch.Tensor:
    """What rank `rank` sends in one collective (`count`: one rank's part for the per-rank ones)."""
    n = world_size
    if collective in ("reduce_scatter", "reduce", "all_reduce"):
        return _summed(count * (n if collective == "reduce_scatter" else 1), rank, n, dtype, device)
    if collective == "alltoall":
        return torch.cat([tagged(count, rank * n + q, dtype, device) for q in range(n)])
    return tagged(count, rank, dtype, device)  # all_gather, broadcast (the root's is key 0), sendrecv


def collective_expected(collective: str, count: int, rank: int, world_size: int,
                        dtype: torch.dtype, device="cpu") -> torch.Tensor | None:
    """What rank `rank`'s output must hold, exactly; None where undefined (Reduce off the root)."""
    n = world_size
    if collective == "all_reduce" or (collective == "reduce" and rank == 0):
        return expected_sum(count, n, dtype, device)
    if collective == "reduce":
        return None
    if collective == "reduce_scatter":
        return expected_sum(count * n, n, dtype, device)[rank * count:(rank + 1) * count]
    if collective == "all_gather":
        return torch.cat([tagged(count, q, dtype, device) for q in range(n)])
    if collective == "alltoall":
        return torch.cat([tagged(count, q * n + rank, dtype, device) for q in range(n)])
    if collective == "broadcast":
        return tagged(count, 0, dtype, device)
    return tagged(count, (rank - 1) % n, dtype, device)  # sendrecv: from rank r-1
