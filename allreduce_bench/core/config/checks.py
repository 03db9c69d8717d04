"""Checks made once before any process starts, each a UsageError (one line, exit 2). No torch."""
from __future__ import annotations

import math
import resource
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import psutil

from allreduce_bench.core.environment import visible_gpus
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host import gpus
from allreduce_bench.core.units import format_bytes, parse_bandwidth


@dataclass(frozen=True)
class Host:
    """The CPUs this process may use and the GPUs it sees, probed by the command so a config needs no torch."""

    cpus: int
    gpus: int = 0


# A tag goes into every row, the default directory name and plot legends.
MAX_TAG_CHARS = 100


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


def check_writable_dir(path: Path, option: str) -> Path:
    """Create `path` (and its parents) if needed and prove a file can be written in it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; give a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as error:
        raise UsageError(f"{option} {path} cannot be written ({_why(error)}); choose a directory "
                         "you can write to") from None
    return path


def check_writable_file(path: Path, option: str) -> Path:
    """The directory of `path` can take a file, and `path` is not a directory."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory; give a file name")
    check_writable_dir(path.parent, option)
    return path


class OutputPath(click.ParamType):
    """A path option that must not be empty (click's Path turns '' into '.')."""

    name = "path"

    def convert(self, value, param, ctx):
        if isinstance(value, Path):
            return value
        if str(value).strip() == "":
            self.fail("it is empty; give a directory (use . for this one)", param, ctx)
        if "\0" in str(value):
            self.fail("it contains a NUL byte; give a plain path", param, ctx)
        return Path(value)


OUTPUT_PATH = OutputPath()


def parse_floor(text) -> float:
    """--min-busbw in GB/s: '1.2GB/s', '200Gb/s', or a bare number as NCCL_TESTS_MIN_BW is written."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return parse_bandwidth(text, "--min-busbw") / 1e9
    if not value > 0 or math.isinf(value):
        raise UsageError(f"--min-busbw must be greater than zero, got {text!r}; write e.g. 1.2GB/s")
    return value


def check_finite(value: float, option: str, low: float | None = 0.0) -> float:
    """A real number (not nan or inf) above `low` (exclusive)."""
    if value is None:
        return value
    if not math.isfinite(value):
        raise UsageError(f"{option} must be a finite number, got {value!r}")
    if low is not None and not value > low:
        raise UsageError(f"{option} must be greater than {low:g}, got {value:g}")
    return value


def check_positive_int(value: int | None, option: str, low: int = 1) -> int | None:
    """None (use the default) or an integer >= low: 0 is never silently the default."""
    if value is not None and value < low:
        raise UsageError(f"{option} must be at least {low}, got {value}")
    return value


def check_tag(tag: str) -> str:
    """A tag is stored in CSV, JSON, directory names and legends: printable UTF-8 text."""
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"--tag {tag.encode('utf-8', 'surrogateescape')!r} is not UTF-8 text; "
                         "use plain characters") from None
    if any(not ch.isprintable() for ch in tag):
        raise UsageError(f"--tag {tag!r} contains control characters (newline, tab, ...); "
                         "use printable characters")
    if len(tag) > MAX_TAG_CHARS:
        raise UsageError(f"--tag is {len(tag)} characters long; use at most {MAX_TAG_CHARS}")
    return tag


# ---- does it fit this host? ---------------------------------------------------------------

# File descriptors the driver holds per local rank (pipes, the rank's queue, the store's
# socket) and each rank holds per peer (gloo's pair of sockets) on top of its own ~100.
DRIVER_FDS_PER_RANK, RANK_FDS_BASE, RANK_FDS_PER_PEER = 8, 100, 4


def open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def max_local_world() -> int:
    """The largest world this host can start with its open-files limit (driver and ranks)."""
    limit = open_files_limit()
    return max(1, min((limit - 64) // DRIVER_FDS_PER_RANK,
                      (limit - RANK_FDS_BASE) // RANK_FDS_PER_PEER))


def check_local_world(world_sizes, option: str = "--world-sizes") -> None:
    largest = max(world_sizes)
    most = max_local_world()
    if largest > most:
        raise UsageError(f"{option}: a local world of {largest} ranks needs more open files than "
                         f"this host allows (ulimit -n {open_files_limit()}: at most {most} ranks); "
                         "choose smaller world sizes or raise ulimit -n")


def process_memory() -> int:
    """This process's resident memory: what each rank costs before its first tensor."""
    return int(psutil.Process().memory_info().rss)


def allreduce_bytes_per_rank(algorithm: str, size: int, world_size: int) -> int:
    """Peak tensor bytes one rank holds for one AllReduce: 4 S of its own, plus the algorithm's
    buffers ((N-1) S at the naive root, S / N for the ring, about S for others)."""
    extra = {"naive": (world_size - 1) * size, "ring": -(-size // world_size)}.get(algorithm, size)
    return 4 * size + extra


def allreduce_world_bytes(algorithms, size: int, world_size: int) -> tuple[int, int]:
    """(bytes on the busiest rank, of all ranks) of the hungriest algorithm (they run one at a time)."""
    busiest = max(allreduce_bytes_per_rank(a, size, world_size) for a in algorithms)
    others = 5 * size  # a non-root rank of any algorithm: 4 S and at most one more S
    return busiest, busiest + (world_size - 1) * others


def check_memory(need_host: int, need_rank: int, ranks_here: int, what: str, device: str,
                 fix: str) -> None:
    """Refuse work that cannot fit: `need_host` bytes on this host (CPU), or `need_rank` on each GPU."""
    if device == "cuda":
        free = gpu_free_memory(ranks_here)
        if free is not None and need_rank > free:
            raise UsageError(f"{what} needs {format_bytes(need_rank)} on one GPU but it has "
                             f"{format_bytes(free)} free; {fix}")
        return
    available = psutil.virtual_memory().available  # MemAvailable
    need = need_host + ranks_here * process_memory()
    if need > available:
        raise UsageError(f"{what} needs about {format_bytes(need)} of memory on this host "
                         f"({ranks_here} rank(s)) but {format_bytes(available)} is available; {fix}")


def gpu_free_memory(ranks_here: int) -> int | None:
    """The least free memory of the GPUs this host's ranks use, from NVML or nvidia-smi, None where
    neither tells; no CUDA call, which would open a context on GPU 0 in every rank."""
    found = [gpu for gpu in gpus.inventory() if gpu.free_bytes is not None]
    visible = visible_gpus()
    used = ([n.strip() for n in visible.split(",")] if visible is not None else
            [gpu.index for gpu in found])[:max(ranks_here, 1)]
    # CUDA names a GPU by its index or by its UUID (or the UUID's first characters)
    free = [gpu.free_bytes or 0 for name in used for gpu in found
            if name and (name == gpu.index or (name.startswith("GPU-") and gpu.uuid.startswith(name)))]
    return min(free) if free and len(free) == len(used) else None
