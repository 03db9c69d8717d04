"""The validated configuration of a run: parsed once from the CLI, then passed to every rank."""
from __future__ import annotations

import datetime as _dt
import re
import shutil
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from allreduce_bench.core.config.checks import check_positive_int, check_writable_dir
from allreduce_bench.core.config.launch import LaunchConfig, LaunchOptions
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import IN_PLACE_HALVES
from allreduce_bench.core.units import parse_size, parse_size_list, size_sweep

# name -> bytes per element; the torch dtype of the same name is looked up only on the ranks,
# so parsing options (and every analysis command) needs no torch.
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int32": 4}


@dataclass(frozen=True)
class Sampling:
    """How each measurement is sampled (measure/timing.py): `samples` samples of `loops`
    back-to-back calls each, None meaning calibrated to the bounds below."""

    loops: int | None = None
    samples: int | None = None
    budget_s: float = 0.1
    min_sample_s: float = 0.002
    max_skew_share: float | None = 0.01  # None: loops ignore the skew (min_sample_s only)
    max_sample_s: float = 0.02  # the skew never stretches a sample beyond this
    min_samples: int = 5
    max_samples: int = 50
    max_loops: int = 10_000
    warmup: int = 1  # untimed calls first (calibration samples warm up too)
    host_launch: bool = False  # GPU: keep host launch time inside the interval (no spin)


# --rounds by default: interleaved passes (measure/rounds.py), so `compare` sees how much a run
# disagrees with itself (doc/methodology.md, "Runs that agree")
ROUNDS = 4
# --extra-budget by default: the whole run's seconds of extra rounds for rows still `unstable`
# (sweep/passes.py), keeping the default CPU run under 20 s on 2 cores; 0 with --quick
EXTRA_BUDGET_S = 4.0
# A CPU laptop sweep (gloo on loopback plateaus by 4M-16M), and the GPU sweep nccl-tests users expect
CPU_DEFAULTS: dict[str, Any] = dict(world_sizes=(2, 4), ranks_per_node=2, min_bytes="4K", max_bytes="16M", factor=4,
                    sampling=Sampling(budget_s=0.1, min_sample_s=0.002, min_samples=5,
                                      max_samples=50, warmup=1), rounds=ROUNDS)
GPU_DEFAULTS: dict[str, Any] = dict(min_bytes="1K", max_bytes="1G", factor=2,
                    sampling=Sampling(budget_s=0.5, min_sample_s=0.001, max_sample_s=0.05, min_samples=10,
                                      max_samples=200, warmup=5), rounds=ROUNDS)
QUICK: dict[str, Any] = dict(sizes=(4 << 10, 256 << 10),
             sampling=Sampling(budget_s=0.05, min_sample_s=0.001, min_samples=3, max_samples=20,
                               warmup=1), rounds=1)


def cpu_world_sizes(cpus: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the default CPU world sizes that fit `cpus`, those left out): more ranks than CPUs measure
    the scheduler; N=2 stays even on one CPU."""
    fits = tuple(k for k in CPU_DEFAULTS["world_sizes"] if k <= max(cpus, 2))
    return fits, tuple(k for k in CPU_DEFAULTS["world_sizes"] if k not in fits)


@dataclass(frozen=True)
class SweepOptions:
    """What `run` and `links` sweep and how each size is sampled, as click parsed them."""

    sizes: str | None = None
    min_bytes: str | None = None
    max_bytes: str | None = None
    factor: float | None = None
    dtype: str = "float32"
    loops: int | None = None
    samples: int | None = None
    budget: float | None = None
    warmup: int | None = None
    iters: int | None = None
    host_launch: bool = False
    quick: bool = False


@dataclass(frozen=True)
class RunOptions:
    """`run`'s options as given (`links` builds them from its own: links/config.py)."""

    launch: LaunchOptions
    sweep: SweepOptions
    algos: str | None = None
    collectives: str = "all_reduce"
    in_place: bool = False
    rounds: int | None = None  # None: the device's default
    extra_budget: float | None = None  # None: EXTRA_BUDGET_S, 0 with --quick
    resume_dir: Path | None = None
    min_busbw: str | None = None  # checked here, judged after the run (core/cli/floor.py)


@dataclass(frozen=True)
class RunConfig:
    """`run` and `links`: where and how they launch, and what each rank sweeps."""

    launch: LaunchConfig
    algorithms: tuple[str, ...]  # the AllReduce's; empty when --collectives leaves it out
    sizes: tuple[int, ...]
    dtype: str
    sampling: Sampling
    rounds: int = 1  # --rounds: interleaved passes over (algorithm, size) (measure/rounds.py)
    extra_budget_s: float = 0.0  # --extra-budget: more rounds for unstable rows (sweep/passes.py)
    # every other collective of --collectives, with its algorithms, in the order measured
    collectives: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # --in-place: AllGather's and ReduceScatter's in-place half too (metrics.IN_PLACE_HALVES)
    in_place: bool = False

    def halves(self, collective: str) -> tuple[bool, ...]:
        """The in-place flags `collective` is measured with (AllReduce's rows are in place already)."""
        return (False, True) if self.in_place and collective in IN_PLACE_HALVES else (False,)

    @property
    def measurements_per_size(self) -> int:
        return len(self.algorithms) + sum(len(names) * len(self.halves(c))
                                          for c, names in self.collectives)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]


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


_created: list[Path] = []  # the output directories this process's command created


def created_here(path: Path) -> Path:
    _created.append(Path(path).absolute())
    return path


def remove_unused_created() -> None:
    """Remove each directory the command created that holds no more than meta.json, so a refused
    run leaves no folder for the next command to trip on."""
    while _created:
        path = _created.pop()  # a run's folder before results/ above it
        with suppress(OSError):  # gone already, or not readable
            if {p.name for p in path.iterdir()} <= {"meta.json", ".lock"}:
                shutil.rmtree(path)


def default_out_dir(tag: str, now: _dt.datetime | None = None, claim: bool = False) -> Path:
    """results/<UTC timestamp>[-<tag>]; with `claim`, created here atomically (-2, -3, ... if taken)."""
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", tag).strip("-.")[:64]  # a file name, never too long
    base = Path("results") / (f"{stamp}-{safe}" if safe else stamp)
    if not claim:
        return base
    if not base.parent.exists():
        created_here(base.parent)  # results/ itself, made just below
    check_writable_dir(base.parent, "the default output directory")
    for n in range(1, 10_000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir()
            return created_here(path)
        except FileExistsError:
            continue
        except OSError as error:
            raise UsageError(f"cannot create {path} ({error.strerror}); give --out") from None
    raise UsageError(f"too many runs named {base}*; give --out")


def resolve_sizes(sizes: str | None, min_bytes: str | None, max_bytes: str | None,
                  factor: float | None, defaults: dict, dtype: str | None = None) -> tuple[int, ...]:
    """The sizes of --sizes, or of --min-bytes..--max-bytes by --factor (`defaults` where not given);
    with `dtype`, a size given must be whole elements (6 B of float32 is refused, not measured as 4)."""
    if sizes is not None:  # --sizes '' is an error, never the default sweep
        if min_bytes is not None or max_bytes is not None or factor is not None:
            raise UsageError("give either --sizes or --min-bytes/--max-bytes/--factor, not both")
        listed = tuple(parse_size_list(sizes))
        for size in listed:
            check_whole_elements(size, dtype, "--sizes entry")
        return listed
    lo = parse_size(defaults["min_bytes"] if min_bytes is None else min_bytes, "--min-bytes")
    hi = parse_size(defaults["max_bytes"] if max_bytes is None else max_bytes, "--max-bytes")
    check_whole_elements(lo, dtype, "--min-bytes")
    check_whole_elements(hi, dtype, "--max-bytes")
    return tuple(size_sweep(lo, hi, factor if factor is not None else defaults["factor"]))


def check_whole_elements(size: int, dtype: str | None, what: str) -> None:
    itemsize = DTYPES[dtype] if dtype else 1
    if size % itemsize:
        below = size // itemsize * itemsize
        raise UsageError(f"{what} {size} B is not a whole number of {dtype} elements ({itemsize} B "
                         f"each); give a multiple of {itemsize} B, e.g. "
                         f"{' or '.join(str(s) for s in (below, below + itemsize) if s)}")


def check_sizes_fit_dtype(sizes: tuple[int, ...], dtype: str) -> None:
    itemsize = DTYPES[dtype]
    if sizes[0] < itemsize:
        raise UsageError(f"size {sizes[0]} B is smaller than one {dtype} element ({itemsize} B); "
                         f"raise --min-bytes to at least {itemsize}")


def resolve_sampling(default: Sampling, loops: int | None, samples: int | None,
                     budget_s: float | None, warmup: int | None, host_launch: bool) -> Sampling:
    """`default` with what was given by hand."""
    check_positive_int(loops, "--loops")
    check_positive_int(samples, "--samples")
    if warmup is not None and warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {warmup}")
    if budget_s is not None and not (0 < budget_s < 3600):  # also refuses nan and inf
        raise UsageError(f"--budget must be a number of seconds above 0 (and below an hour), got "
                         f"{budget_s}")
    given: dict[str, Any] = {"loops": loops, "samples": samples, "budget_s": budget_s, "warmup": warmup}
    return replace(default, host_launch=host_launch,
                   **{k: v for k, v in given.items() if v is not None})

