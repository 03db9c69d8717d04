"""How and where a measuring command runs: one LaunchConfig that run, links, ddp (and every
measuring command added later) carry as their `launch` field. No torch."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

POLICIES = ("auto", "fifo", "other")  # --sched (measure/scheduling.py sets it on each rank)


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
    # --sched resolved: fifo | other, the policy each rank's threads ask for (measure/scheduling.py)
    sched: str = "other"
    nccl_debug: bool = False  # NCCL's log per rank into OUT/nccl-debug and meta.json (measure/nccl_debug.py)
    # every rank dumps torch's Flight Recorder to OUT/flight-recorder (measure/flight_recorder.py)
    flight_recorder: bool = False
    # default world sizes left out because this process may use fewer CPUs than they have ranks
    # (config.cpu_world_sizes); the summary names them and how to ask for them
    world_sizes_left_out: tuple[int, ...] = ()
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    command: str = ""
    # the emulated cluster's label (environment.Started): every row's `emulation`, "" on real
    # hardware; meta.json's own `emulation` block describes the cluster
    emulation: str = ""


class Launched:
    """A command's config composed of a `launch: LaunchConfig` and its own fields; the launch's
    fields read as the config's own (config.out_dir), so the driver and ranks take any command's
    config alike. Composition rather than inheritance: a dataclass inheriting LaunchConfig's
    defaulted fields could not add required ones before Python 3.10's kw_only."""

    def __getattr__(self, name: str):
        # Only reached for names the config itself lacks. Dunder lookups (pickle's
        # __setstate__, copy's __deepcopy__) must not recurse into a `launch` not yet set.
        if name.startswith("__") or name == "launch":
            raise AttributeError(name)
        return getattr(self.launch, name)

    # A Launched is always a dataclass (RunConfig, DdpConfig, ...), which the class cannot say.
    def with_world_sizes(self, sizes: tuple[int, ...]):
        return replace(self, launch=replace(self.launch, world_sizes=tuple(sizes)))  # type: ignore[type-var]

    def flat(self) -> dict:
        """Every field, the launch's included, in one mapping (meta.json's `config`)."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "launch"}  # type: ignore[arg-type]
        return {**{f.name: getattr(self.launch, f.name) for f in fields(self.launch)
                   if f.name != "emulation"}, **own}


def wanted(option: str, device: str, times_collectives: bool = True, emulated: bool = False) -> str:
    """fifo or other from --sched: auto means fifo on a CPU run that times collectives (run,
    links), as started elsewhere (GPU: NCCL's own threads; ddp: training compute would hold the
    CPUs; an emulated cluster: its hosts' CPU shares are CFS quotas, which real-time threads
    escape)."""
    if option not in POLICIES:
        raise ValueError(f"unknown scheduling policy {option!r}")
    if option == "auto":
        return "fifo" if device == "cpu" and times_collectives and not emulated else "other"
    return option
