"""Input patterns whose exact sum over ranks is known, for any dtype and world size.

Rank r holds base[(i + r) % P] at element i, with small non-negative integers in `base`, chosen
so that the total over all ranks (and so every partial sum any algorithm forms on the way) is
exactly representable in the dtype: bfloat16 holds integers exactly up to 256, float16 up to
2048. Sums are then independent of the order of additions, and a result either matches bit for
bit or is wrong. Neighbouring elements and ranks hold different values, so a chunk added twice,
skipped or put in the wrong place shows up.
"""
from __future__ import annotations

import math

import torch

# Largest integer M such that 0..M are all exact in the dtype.
_EXACT_UP_TO = {torch.bfloat16: 256, torch.float16: 2048, torch.float32: 1 << 24,
                torch.float64: 1 << 53}
_MAX_PERIOD = 13  # a prime, so the pattern does not line up with power-of-two chunk sizes


def base(dtype: torch.dtype, world_size: int) -> list[int]:
    limit = _EXACT_UP_TO.get(dtype, 256) if dtype.is_floating_point else torch.iinfo(dtype).max
    world_size = max(world_size, 1)
    if world_size <= limit:  # values 0..P-1: at most world_size * (P - 1) after summing
        return list(range(max(2, min(_MAX_PERIOD, limit // world_size + 1))))
    # More ranks than exact integers (bfloat16 past 256 ranks): a single 1 every P elements,
    # so at most ceil(world_size / P) <= limit ranks contribute to any element.
    return [1] + [0] * (math.ceil(world_size / limit) - 1)


def _positions(numel: int, shift: int, period: int, device) -> torch.Tensor:
    return (torch.arange(numel, device=device, dtype=torch.int64) + shift).remainder_(period)


def fill(tensor: torch.Tensor, rank: int, world_size: int) -> None:
    """Write rank `rank`'s pattern into `tensor` (any device, any shape) in place."""
    values = torch.tensor(base(tensor.dtype, world_size), dtype=tensor.dtype, device=tensor.device)
    tensor.copy_(values[_positions(tensor.numel(), rank, len(values), tensor.device)].view_as(tensor))


def expected_sum(numel: int, world_size: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """The exact elementwise sum of every rank's pattern: element i's sum depends on i % P only,
    so it is a lookup into a table of P exact integers."""
    values = base(dtype, world_size)
    period = len(values)
    table = torch.tensor([sum(values[(j + r) % period] for r in range(world_size))
                          for j in range(period)], dtype=torch.int64, device=device).to(dtype)
    return table[_positions(numel, 0, period, device)]


def count_wrong(result: torch.Tensor, expected: torch.Tensor) -> int:
    """Number of elements that differ from the expectation (nccl-tests' #wrong, per rank)."""
    return int((result.reshape(-1) != expected.reshape(-1)).sum().item())
