"""How and where a measuring command runs: its shared options as given and as resolved. No torch."""
from __future__ import annotations

import typing
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

POLICIES = ("auto", "fifo", "other")  # --sched (measure/scheduling.py sets it on each rank)
T = TypeVar("T")


@dataclass(frozen=True)
class LaunchOptions:
    """The shared options of core/cli/options.py, as click parsed them."""

    world_sizes: str | None = None
    backend: str = "auto"
    device: str | None = None
    ranks_per_node: int | None = None
    tag: str = ""
    out_dir: Path | None = None
    timeout_s: float = 300.0
    no_plot: bool = False
    bind: str = "auto"
    nccl_debug: bool = False
    flight_recorder: bool = False
    sched: str = "other"  # `run` and `links` have --sched (default auto)


@dataclass(frozen=True)
class LaunchConfig:
    world_sizes: tuple[int, ...]
    backend: str  # gloo | nccl, resolved
    device: str  # cpu | cuda, resolved
    ranks_per_node: int | None  # None: from the launcher
    tag: str
    out_dir: Path
    timeout_s: float
    plot: bool = True
    bind: str = "auto"  # --bind: where each rank runs (measure/binding.py)
    sched: str = "other"  # --sched resolved: fifo | other
    nccl_debug: bool = False  # NCCL's log per rank into OUT/nccl-debug and meta.json
    flight_recorder: bool = False  # every rank dumps torch's Flight Recorder to OUT/flight-recorder
    # default world sizes left out because this process may use fewer CPUs than they have ranks
    world_sizes_left_out: tuple[int, ...] = ()
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    command: str = ""
    emulation: str = ""  # the emulated cluster's label in every row ("" on real hardware)
    # link class -> GB/s the launcher knows (an emulated cluster's shaped link), before measured peaks
    link_peaks: tuple[tuple[str, float], ...] = ()


def from_params(cls: type[T], params: Mapping[str, Any]) -> T:
    """`cls`, an options dataclass, from a click command's flat params (nested dataclasses from the same)."""
    hints = typing.get_type_hints(cls)
    values = {f.name: from_params(hints[f.name], params) if is_dataclass(hints[f.name])
              else params[f.name] for f in fields(cls)  # type: ignore[arg-type]
              if is_dataclass(hints[f.name]) or f.name in params}
    return cls(**values)


def wanted(option: str, device: str, times_collectives: bool = True, emulated: bool = False) -> str:
    """fifo or other from --sched: auto is fifo on a CPU run that times collectives, not where its
    threads would escape what is measured (GPU, ddp, an emulated cluster)."""
    if option not in POLICIES:
        raise ValueError(f"unknown scheduling policy {option!r}")
    if option == "auto":
        return "fifo" if device == "cpu" and times_collectives and not emulated else "other"
    return option
