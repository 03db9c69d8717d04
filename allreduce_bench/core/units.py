"""Quantities as people write them (7B, 14GB, 25GB/s, 0.5s): the one module turning text into quantities, each parser
raising a `UsageError` with an example. Decimal, but tensor sizes' bare K/M/G are binary (nccl-tests)."""
from __future__ import annotations

import math
import re

from allreduce_bench.core.errors import UsageError

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-zµ/]*)\s*$")

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
_COUNT = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
# unit -> how many of it make a second (dividing keeps 10us exactly 1e-05)
_PER_SECOND = {"s": 1.0, "sec": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}


def _split(text, what: str, example: str) -> tuple[float, str]:
    match = _QUANTITY.match(str(text))
    if not match:
        raise UsageError(f"{what} {text!r} is not a number with a unit; write it like {example}")
    mantissa, exponent, unit = match.groups()
    value = float(f"{mantissa}e{exponent or 0}")  # 1e400 is inf here (then refused), not an OverflowError
    if not math.isfinite(value):
        raise UsageError(f"{what} {text!r} is too large to be a number; write it like {example}")
    return value, unit


def _byte_scale(unit: str) -> float | None:
    """'GB' -> 1e9, 'GiB' -> 2**30, 'Gb' -> 1e9 / 8; None if `unit` is not a byte unit."""
    if unit.endswith("B"):
        prefix, per = unit[:-1], 1.0
    elif unit.endswith("b"):
        prefix, per = unit[:-1], 1 / 8
    elif unit == "":
        prefix, per = "", 1.0
    else:
        return None
    scale = _DECIMAL.get(prefix, _BINARY.get(prefix))
    return None if scale is None else scale * per


def parse_count(text, what: str = "count") -> float:
    """'7B' -> 7e9 parameters (K, M, B or G, T: thousand, million, billion, trillion)."""
    value, unit = _split(text, what, "7B, 350M or 1.5T")
    if unit not in _COUNT:
        raise UsageError(f"{what} {text!r} has an unknown suffix {unit!r}; use K, M, B or T, "
                         "e.g. 7B or 350M")
    return _positive(value * _COUNT[unit], text, what)


def parse_whole_count(text, what: str = "count") -> int:
    """'50M' -> 50_000_000: a count that must be whole ('1.5' parameters is an error)."""
    value = parse_count(text, what)
    if value % 1:
        raise UsageError(f"{what} {text!r} is not a whole number; e.g. 10M")
    return int(value)


def _scaled(text, what: str, example: str, scale_of, refusal: str) -> float:
    value, unit = _split(text, what, example)
    scale = scale_of(unit)
    if scale is None:
        raise UsageError(f"{what} {text!r} {refusal}")
    return _positive(value * scale, text, what)


def parse_bytes(text, what: str = "size") -> float:
    """'14GB' -> 14e9, '25MiB' -> 26214400, '4096' -> 4096 bytes."""
    return _scaled(text, what, "14GB or 25MiB", _byte_scale,
                   "is not a size in bytes; write e.g. 14GB (decimal) or 25MiB (binary)")


def _per_second_scale(unit: str) -> float | None:
    per_second = unit[:-2] if unit.endswith(("/s", "ps")) else None
    return _byte_scale(per_second) if per_second else None


def parse_bandwidth(text, what: str = "bandwidth") -> float:
    """'25GB/s' -> 25e9 bytes/s; also '25GBps', '200Gb/s' (bits) and '10GiB/s'."""
    return _scaled(text, what, "25GB/s", _per_second_scale,
                   "is not a bandwidth; write bytes per second such as 900GB/s or 200Gb/s (bits)")


def parse_seconds(text, what: str = "time") -> float:
    """'0.5s' -> 0.5, '10us' -> 1e-05; a bare 0 is allowed, other numbers need a unit."""
    value, unit = _split(text, what, "0.5s, 20ms or 10us")
    if unit == "" and value == 0:
        return 0.0
    if unit not in _PER_SECOND:
        raise UsageError(f"{what} {text!r} needs a time unit: s, ms, us or ns, e.g. 0.5s or 10us")
    return value / _PER_SECOND[unit]


def parse_positive_seconds(text, what: str = "time") -> float:
    """As parse_seconds, but zero is refused: a time that is divided by (compute per step)."""
    return _positive(parse_seconds(text, what), text, what)


def _positive(value: float, text, what: str) -> float:
    if not value > 0 or math.isinf(value):
        raise UsageError(f"{what} must be greater than zero, got {text!r}")
    return value


def _three_digits(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def format_bytes(size_bytes: float) -> str:
    """28e9 -> '28 GB' (decimal, 3 significant digits); whole MiB stay binary: '25 MiB'."""
    if size_bytes >= 2 ** 20 and size_bytes % 2 ** 20 == 0 and size_bytes % 1e6:
        return f"{_three_digits(size_bytes / 2 ** 20)} MiB"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{_three_digits(size_bytes / scale)} {unit}"
    return f"{_three_digits(size_bytes)} B"


def format_bandwidth(bytes_per_s: float) -> str:
    """25e9 -> '25 GB/s'."""
    if math.isinf(bytes_per_s):
        return "unlimited"
    return f"{format_bytes(bytes_per_s)}/s"


def format_seconds(seconds: float, unit: str | None = None) -> str:
    """0.0311 -> '31.1 ms'; unit='s' -> '0.0311 s', though under a millisecond keeps its own unit."""
    scales = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    if unit is None or abs(seconds) < 1e-3 * scales[unit]:
        unit = next((u for u, s in scales.items() if abs(seconds) >= s), "ns") if seconds else "s"
    return f"{_three_digits(seconds / scales[unit])} {unit}"


def format_count(count: float) -> str:
    """7e9 -> '7B' (parameters)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return f"{count:.3g}"


# --- tensor sizes: K/M/G binary as nccl-tests' -b/-e/-f, KB/MB/GB decimal as every GB/s -------
SIZE_UNITS = {"": 1, "B": 1,
              "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
              "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
              "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12}
SIZE_SPELLING = ("K/M/G/T and KiB/MiB/GiB/TiB are binary (16M = 16777216 B), KB/MB/GB/TB decimal "
                 "(16MB = 16000000 B)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, what: str = "size") -> int:
    """'64M' -> 67108864, '64MB' -> 64000000; a fraction must come out whole bytes, never rounded."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).upper() if match else None
        if not match or unit not in SIZE_UNITS:
            raise UsageError(f"{what} {text!r} is not a size; write bytes with an optional suffix, "
                             f"e.g. 4K, 64M, 1G; {SIZE_SPELLING}")
        whole, _, fraction = match.group(1).partition(".")
        scale = SIZE_UNITS[unit]
        # exact: 1.5M is 3 x 2**19 B, 0.1K is 102.4 B (refused), 1e400 never a float
        numerator, denominator = int(whole + fraction) * scale, 10 ** len(fraction)
        if numerator >= (1 << 62) * denominator:
            raise UsageError(f"{what} {text!r} is too large; give at most a few T(iB)")
        if numerator % denominator:
            raise UsageError(f"{what} {text!r} is {numerator / denominator:,.1f} B, not a whole "
                             f"number of bytes; give whole bytes, e.g. {numerator // denominator}")
        value = numerator // denominator
    if value <= 0:
        raise UsageError(f"{what} must be at least 1 byte, got {text!r}")
    return value


def format_size(size_bytes: float) -> str:
    """67108864 -> '64M'; 1536 -> '1.5K'. The inverse of parse_size for labels."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g}{unit}"
    return f"{size_bytes:g}"


def byte_list(sizes, most: int = 8) -> str:
    """[4096, 16384] -> '4096, 16384 B'; more than `most`: the first three, '...', the last two."""
    shown = [str(s) for s in sizes]
    if len(shown) > most:
        shown = [*shown[:3], "...", *shown[-2:]]
        return f"{', '.join(shown)} B ({len(sizes)} sizes)"
    return f"{', '.join(shown)} B"


# More sizes than this is a typo (--factor 1.00001), not a sweep anyone waits for.
MAX_SWEEP_SIZES = 200


def size_sweep(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """Geometric sweep from min to max inclusive, like nccl-tests' -b/-e/-f."""
    if min_bytes > max_bytes:
        raise UsageError(f"--min-bytes {format_size(min_bytes)} is larger than --max-bytes "
                         f"{format_size(max_bytes)}; swap them")
    if not math.isfinite(factor) or factor <= 1:
        raise UsageError(f"--factor must be a number greater than 1, got {factor:g}")
    steps = math.log(max_bytes / min_bytes) / math.log(factor) + 1 if max_bytes > min_bytes else 1
    if steps > MAX_SWEEP_SIZES:
        raise UsageError(f"--factor {factor:g} from {format_size(min_bytes)} to "
                         f"{format_size(max_bytes)} makes {int(steps):,} sizes, more than "
                         f"{MAX_SWEEP_SIZES}; raise --factor (2 doubles the size each step)")
    sizes: list[int] = []
    size = float(min_bytes)
    while size <= max_bytes * (1 + 1e-9):
        if not sizes or int(size) != sizes[-1]:
            sizes.append(int(size))
        size *= factor
    return sizes


def parse_size_list(text: str, option: str = "--sizes") -> list[int]:
    """'1M,8M' -> [1048576, 8388608], sorted and without repeats."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"{option} is empty; give a comma-separated list such as 1M,8M")
    sizes = sorted({parse_size(p, f"{option} entry") for p in parts})
    if len(sizes) > MAX_SWEEP_SIZES:
        raise UsageError(f"{option} lists {len(sizes)} sizes; give at most {MAX_SWEEP_SIZES}")
    return sizes
