"""Byte sizes as people write them (4K, 64M, 1G; binary multiples, as nccl-tests) and sweeps."""
from __future__ import annotations

import re

from .errors import UsageError

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
          "TIB": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, what: str = "size") -> int:
    """'64M' -> 67108864. Raises UsageError naming `what` on anything else."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).upper() if match else None
        if not match or unit not in _UNITS:
            raise UsageError(f"{what} {text!r} is not a size; write bytes with an optional K, M or G "
                             "suffix, e.g. 4K, 64M, 1G")
        value = float(match.group(1)) * _UNITS[unit]
        if value != int(value):
            raise UsageError(f"{what} {text!r} is not a whole number of bytes")
        value = int(value)
    if value <= 0:
        raise UsageError(f"{what} must be at least 1 byte, got {text!r}")
    return value


def format_size(size_bytes: float) -> str:
    """67108864 -> '64M'; 1536 -> '1.5K'. The inverse of parse_size for labels."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g}{unit}"
    return f"{size_bytes:g}"


def size_sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """Geometric sweep from min to max inclusive, like nccl-tests' -b/-e/-f."""
    if min_bytes > max_bytes:
        raise UsageError(f"--min-bytes {format_size(min_bytes)} is larger than --max-bytes "
                         f"{format_size(max_bytes)}; swap them")
    if factor <= 1:
        raise UsageError(f"--factor must be greater than 1, got {factor:g}")
    sizes, size = [], float(min_bytes)
    while size <= max_bytes * (1 + 1e-9):
        if not sizes or int(size) != sizes[-1]:
            sizes.append(int(size))
        size *= factor
    return sizes


def parse_size_list(text: str) -> list[int]:
    """'1M,8M' -> [1048576, 8388608], sorted and without repeats."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError("--sizes is empty; give a comma-separated list such as 1M,8M")
    return sorted({parse_size(p, "--sizes entry") for p in parts})
