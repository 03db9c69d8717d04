"""Element sizes and busbw factors of the nccl-tests family, and the collective and world size
of a table nothing names: the `count` column (whole tensor, or one rank's share) and busbw /
algbw tell a gen1 reduce_scatter_perf table from an all_reduce_perf one."""
from __future__ import annotations

from collections.abc import Sequence

from allreduce_bench.core.metrics import BUSBW_FACTORS

# nccl-tests' (and torch's) type names -> (dtype, bytes per element)
TYPES = {
    "int8": ("int8", 1), "char": ("int8", 1), "uint8": ("uint8", 1),
    "int32": ("int32", 4), "int": ("int32", 4), "uint32": ("uint32", 4),
    "int64": ("int64", 8), "uint64": ("uint64", 8),
    "half": ("float16", 2), "float16": ("float16", 2), "fp16": ("float16", 2),
    "float": ("float32", 4), "float32": ("float32", 4), "fp32": ("float32", 4),
    "double": ("float64", 8), "float64": ("float64", 8),
    "bfloat16": ("bfloat16", 2), "bf16": ("bfloat16", 2),
    "f8e4m3": ("float8_e4m3", 1), "fp8_e4m3": ("float8_e4m3", 1),
    "f8e5m2": ("float8_e5m2", 1), "fp8_e5m2": ("float8_e5m2", 1),
}

# collective -> busbw factor of the world size, with nccl-tests programs not measured here
FACTORS = {
    **BUSBW_FACTORS,
    "hypercube": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}
# collectives whose count column is one rank's share of the size
PER_RANK_COUNT = {"reduce_scatter", "all_gather", "alltoall", "gather", "scatter", "hypercube"}


def collective_of_program(name: str) -> str | None:
    """'all_reduce_perf' / 'all_reduce_perf_mpi' / 'reduce_scatter' -> 'all_reduce', ..."""
    name = name.strip().rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        name = name.split(suffix)[0]
    name = name.replace("allreduce", "all_reduce").replace("allgather", "all_gather")
    name = name.replace("reducescatter", "reduce_scatter").replace("all_to_all", "alltoall")
    return name if name in FACTORS else None


def _largest(rows: Sequence[dict]) -> dict | None:
    """The row whose printed bandwidths carry the most significant digits."""
    rows = [r for r in rows if r.get("algbw_GBps", 0) > 0 and r.get("busbw_GBps") is not None]
    return max(rows, key=lambda r: r["algbw_GBps"], default=None)


def factor_of(rows: Sequence[dict]) -> float | None:
    """busbw / algbw as printed, from the row where rounding matters least."""
    row = _largest(rows)
    return row["busbw_GBps"] / row["algbw_GBps"] if row else None


def _half_unit(printed) -> float:
    """Half the last printed digit: '0.07' -> 0.005."""
    text = str(printed or "")
    return 0.5 * 10.0 ** -len(text.split(".")[1]) if "." in text else 0.0


def factor_bounds(row: dict) -> tuple[float, float]:
    """The busbw/algbw ratios the printed (rounded) cells of `row` allow."""
    algbw, busbw = row["algbw_GBps"], row["busbw_GBps"]
    da, db = _half_unit(row.get("algbw_printed")), _half_unit(row.get("busbw_printed"))
    return (busbw - db) / (algbw + da), (busbw + db) / max(algbw - da, 1e-12)


def world_size_from_factor(collective: str, factor: float | None) -> int | None:
    """Invert the busbw factor: 2(N-1)/N = f -> N = 2/(2-f); (N-1)/N = f -> N = 1/(1-f)."""
    if factor is None:
        return None
    top = 2.0 if collective == "all_reduce" else 1.0 if collective in PER_RANK_COUNT else None
    if top is None or factor >= top - 1e-3:
        return None
    size = round(top / (top - factor))
    return size if size >= 2 else None


def count_ratio(rows: Sequence[dict], element_bytes: int) -> int | None:
    """size / (count x element size): 1 for a whole-tensor count, N for a per-rank one, or None."""
    ratios = {round(r["size_bytes"] / (r["count"] * element_bytes))
              for r in rows if r.get("count") and r.get("size_bytes")}
    return ratios.pop() if len(ratios) == 1 else None


def guess_collective(rows: Sequence[dict], element_bytes: int, world_size: int | None,
                     has_redop: bool, rooted: bool) -> tuple[str | None, str]:
    """The collective of a table no line names, and why (module doc)."""
    ratio = count_ratio(rows, element_bytes)
    factor, largest = factor_of(rows), _largest(rows)
    n: int | None
    if ratio is not None and ratio > 1:
        name = "reduce_scatter" if has_redop else "all_gather"
        n = world_size or ratio
        why = f"count is size / {ratio} / element size (one rank's share)"
    elif ratio == 1:
        if rooted:
            return ("reduce" if has_redop else "broadcast"), "a root column and a whole-tensor count"
        name = "all_reduce" if has_redop else "broadcast"
        n = world_size or world_size_from_factor(name, factor)
        why = "count is the whole tensor"
    else:
        return None, "no row has a count to tell whole-tensor from per-rank"
    if factor is not None and largest is not None and n:
        expected = FACTORS[name](n)
        low, high = factor_bounds(largest)
        if not low - 0.01 <= expected <= high + 0.01:
            return None, (f"{why}, but busbw/algbw = {factor:.3f} is not {name}'s "
                          f"{expected:.3f} at {n} ranks")
        why += f" and busbw/algbw = {factor:.3f} = {name}'s factor at {n} ranks"
    return name, why
