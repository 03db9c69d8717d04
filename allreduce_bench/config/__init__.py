"""The validated configuration of a run: parsed once from the CLI, then passed to every rank."""
from __future__ import annotations

import datetime as _dt
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

from allreduce_bench.errors import UsageError
from allreduce_bench.units import parse_size, parse_size_list, size_sweep

# name -> bytes per element; the torch dtype of the same name is looked up only on the ranks,
# so parsing options (and every analysis command) needs no torch.
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int32": 4}

# Defaults of the main job: a CPU laptop sweep, and the GPU sweep nccl-tests users expect.
# CPU: fewer iterations, so the default job stays under a minute on a 2-core laptop.
CPU_DEFAULTS = dict(world_sizes=(2, 4), ranks_per_node=2, min_bytes="4K", max_bytes="64M", factor=4,
                    iters=10, warmup=2)
GPU_DEFAULTS = dict(min_bytes="1K", max_bytes="1G", factor=2, iters=20, warmup=5)
QUICK = dict(sizes=(4 << 10, 256 << 10), iters=5, warmup=1)


@dataclass(frozen=True)
class RunConfig:
    algorithms: tuple[str, ...]
    world_sizes: tuple[int, ...]
    sizes: tuple[int, ...]
    dtype: str
    iters: int
    warmup: int
    backend: str  # gloo | nccl, resolved
    device: str  # cpu | cuda, resolved
    ranks_per_node: int | None  # None: from the launcher
    tag: str
    out_dir: Path
    timeout_s: float
    plot: bool = True
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    command: str = ""

    @property
    def torch_dtype(self):
        import torch
        return getattr(torch, self.dtype)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    def with_world_sizes(self, sizes: tuple[int, ...]) -> RunConfig:
        return replace(self, world_sizes=sizes)


def parse_algorithms(text: str, backend: str = "gloo") -> tuple[str, ...]:
    from allreduce_bench import algorithms  # the registry: names, `all`, unknown names

    return algorithms.parse(text, backend)


def parse_world_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--world-sizes {text!r} must be a comma-separated list of integers, "
                         "e.g. 2,4,8") from None
    if not sizes or sizes[0] < 1:
        raise UsageError(f"--world-sizes {text!r} must list world sizes of at least 1")
    return tuple(sizes)


def parse_dtype(name: str) -> str:
    if name not in DTYPES:
        raise UsageError(f"unknown --dtype {name!r}; choose from {', '.join(DTYPES)}")
    return name


def default_out_dir(tag: str, now: _dt.datetime | None = None) -> Path:
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", tag).strip("-")
    return Path("results") / (f"{stamp}-{safe}" if safe else stamp)


def resolve_sizes(sizes: str | None, min_bytes: str | None, max_bytes: str | None,
                  factor: float | None, defaults: dict) -> tuple[int, ...]:
    if sizes:
        if min_bytes or max_bytes or factor:
            raise UsageError("give either --sizes or --min-bytes/--max-bytes/--factor, not both")
        return tuple(parse_size_list(sizes))
    lo = parse_size(min_bytes or defaults["min_bytes"], "--min-bytes")
    hi = parse_size(max_bytes or defaults["max_bytes"], "--max-bytes")
    return tuple(size_sweep(lo, hi, factor if factor is not None else defaults["factor"]))


def check_sizes_fit_dtype(sizes: tuple[int, ...], dtype: str) -> None:
    itemsize = DTYPES[dtype]
    if sizes[0] < itemsize:
        raise UsageError(f"size {sizes[0]} B is smaller than one {dtype} element ({itemsize} B); "
                         f"raise --min-bytes to at least {itemsize}")


def check_counts(iters: int, warmup: int, timeout_s: float) -> None:
    if iters < 1:
        raise UsageError(f"--iters must be at least 1, got {iters}")
    if warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {warmup}")
    if timeout_s <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout_s:g}")
