"""Input patterns whose exact sum over ranks is known, for any dtype and world size.

Rank r holds (i % P) * w(r) at element i: the position part varies along the tensor, so a chunk
reduced into the wrong place or skipped shows up, and the rank weight w(r) = 1 + r % 3 makes a
missing or doubled contribution show up. The sum is (i % P) * sum_r w(r). P is chosen so that
the total (and so every partial sum an algorithm forms on the way, all values being
non-negative) is an integer exactly representable in the dtype: bfloat16 holds integers exactly
up to 256, float16 up to 2048. Sums are then independent of the order of additions, and a
result either matches bit for bit or is wrong.
"""
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
    table = torch.arange(p, dtype=torch.int64, device=device).mul_(weight).to(dtype)
    return table[torch.arange(numel, dtype=torch.int64, device=device).remainder_(p)]


def fill(tensor: torch.Tensor, rank: int, world_size: int) -> None:
    """Write rank `rank`'s pattern into `tensor` (any device, any shape) in place."""
    weight = rank_weights(tensor.dtype, world_size)[rank]
    p = period(tensor.dtype, world_size)
    tensor.copy_(_values(tensor.numel(), weight, p, tensor.dtype, tensor.device).view_as(tensor))


def expected_sum(numel: int, world_size: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """The exact elementwise sum of every rank's pattern."""
    total = sum(rank_weights(dtype, world_size))
    return _values(numel, total, period(dtype, world_size), dtype, device)


def count_wrong(result: torch.Tensor, expected: torch.Tensor) -> int:
    """Number of elements that differ from the expectation (nccl-tests' #wrong, per rank)."""
    return int((result.reshape(-1) != expected.reshape(-1)).sum().item())
