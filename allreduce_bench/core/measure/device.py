"""Device and timer, chosen once per rank: the only place that knows CPU from CUDA."""
from __future__ import annotations

import datetime as _dt
import inspect
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.environment import visible_gpus
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.measure.binding import physical_gpu
from allreduce_bench.core.measure.machine import cpus_allowed

T = TypeVar("T")


class Timer:
    """Start and stop stamps of each iteration on the device's clock, read once all are taken."""

    def __init__(self, device: Device, iters: int):
        self.now, self.device = device.stamp, device  # the clock itself: no call in between
        self.starts: list = [None] * iters
        self.stops: list = [None] * iters

    def start(self, i: int) -> None:
        self.starts[i] = self.now()

    def stop(self, i: int) -> None:
        self.stops[i] = self.now()

    def times_us(self) -> list[float]:
        return [self.device.elapsed_us(a, b) for a, b in zip(self.starts, self.stops)]


class Device:
    """CPU device for gloo: the host's monotonic clock; gloo calls return when the work is done."""

    kind = "cpu"
    stamp = staticmethod(time.perf_counter_ns)  # the one clock: timing loop, DDP timeline, link probe
    # the hooks' `before_sample`: run after each sample's alignment, before its clock starts
    before_sample: Callable[[], None] | None = None
    launch_s_per_call = 20e-6  # the host's time to queue one call, until measured (a c10d launch)

    def __init__(self) -> None:
        self.torch_device = torch.device("cpu")

    @property
    def name(self) -> str:
        return cpu_model()

    @property
    def physical_id(self) -> str | None:
        return None

    def synchronize(self) -> None:
        pass

    def barrier(self, group: dist.ProcessGroup | None) -> None:
        dist.barrier(group=group)

    def elapsed_us(self, start, stop) -> float:
        return (stop - start) / 1e3

    def read(self, tensor: torch.Tensor) -> list:
        return tensor.tolist()

    def align(self, group: dist.ProcessGroup | None, spin_s: float = 0.0) -> None:
        self.barrier(group)

    def launch_spin_s(self, loops: int, group: dist.ProcessGroup | None) -> float:
        """Device-side spin before a sample's start event: none on CPU, where the host clock is the only clock."""
        return 0.0

    def note_launch(self, host_s: float, loops: int) -> None:
        """How long the host took to queue `loops` calls (sizes the next spin on GPU)."""
        self.launch_s_per_call = host_s / max(loops, 1)

    def timer(self, iters: int) -> Timer:
        return Timer(self, iters)

    def guarded(self, call: Callable[[], T], what: str) -> T:
        """`call()`, an object collective: gloo ends it at --timeout."""
        return call()


class PeerTimeout(RuntimeError):
    """A GPU collective did not complete within --timeout (a peer stopped answering)."""


def wait_for(event: torch.cuda.Event, timeout_s: float, what: str) -> None:
    """Wait for `event`, giving up after `timeout_s` (synchronize() would block forever on a lost peer)."""
    deadline = time.monotonic() + timeout_s
    while not event.query():
        if time.monotonic() > deadline:
            raise PeerTimeout(f"{what} did not complete within --timeout {timeout_s:g} s")
        time.sleep(0)


def gpu_index(local_rank: int, local_world_size: int, visible: int) -> int:
    """This rank's GPU: its local rank, or the only one it sees (srun --gpus-per-task=1)."""
    if visible >= local_world_size and local_rank < visible:
        return local_rank
    if visible == 1:
        return 0
    raise UsageError(f"local rank {local_rank} of {local_world_size} has no GPU of its own (only "
                     f"{visible} visible); launch at most one rank per GPU")


class CudaDevice(Device):
    """One GPU per rank, chosen by local rank; its clock is CUDA events on the current stream."""

    kind = "cuda"

    def __init__(self, local_rank: int, local_world_size: int | None = None,
                 timeout_s: float = 300.0) -> None:
        if not torch.cuda.is_available():
            raise UsageError("CUDA was asked for but no CUDA device is visible; use --backend gloo "
                             "or run on a GPU node")
        index = gpu_index(local_rank, local_world_size or local_rank + 1, torch.cuda.device_count())
        torch.cuda.set_device(index)
        self.torch_device = torch.device("cuda", index)
        self.timeout_s = timeout_s
        self._flag: torch.Tensor | None = None  # allocated on first use, after the process group exists
        self._cycles_per_ms: float | None = None

    @property
    def name(self) -> str:
        return torch.cuda.get_device_name(self.torch_device)

    @property
    def physical_id(self) -> str | None:
        """This GPU as NVML and nvidia-smi name it: its UUID, else nvidia-smi's index, else None."""
        uuid = getattr(torch.cuda.get_device_properties(self.torch_device), "uuid", None)
        if uuid is not None:
            return f"GPU-{uuid}"
        index = physical_gpu(self.torch_device.index, visible_gpus())
        return None if index is None else str(index)

    def stamp(self) -> torch.cuda.Event:  # type: ignore[override]  # an event, not a host time
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def elapsed_us(self, start, stop) -> float:
        wait_for(stop, self.timeout_s, "the timed work")
        return start.elapsed_time(stop) * 1e3  # elapsed_time is in ms

    def synchronize(self) -> None:
        event = torch.cuda.Event()
        event.record()
        wait_for(event, self.timeout_s, "the GPU work")

    def read(self, tensor: torch.Tensor) -> list:
        """`tensor`'s values once the GPU work before it is done, within --timeout (not NCCL's watchdog)."""
        self.synchronize()
        return tensor.cpu().tolist()

    def guarded(self, call: Callable[[], T], what: str) -> T:
        """`call()` on its own thread, given up after --timeout: object collectives wait with no timeout."""
        outcome: list = []

        def run() -> None:
            torch.cuda.set_device(self.torch_device)  # a new thread starts on GPU 0
            try:
                outcome.append((call(), None))
            except BaseException as error:  # noqa: BLE001  (raised again by the caller's thread)
                outcome.append((None, error))

        thread = threading.Thread(target=run, name=what, daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if not outcome:
            raise PeerTimeout(f"{what} did not complete within --timeout {self.timeout_s:g} s")
        if outcome[0][1] is not None:
            raise outcome[0][1]
        return outcome[0][0]

    def barrier(self, group: dist.ProcessGroup | None) -> None:
        # on this rank's own device: NCCL's dist.barrier() guesses it wrong for sub-groups
        if self._flag is None:
            self._flag = torch.zeros(1, device=self.torch_device)
        dist.all_reduce(self._flag, group=group)
        self.synchronize()

    def align(self, group: dist.ProcessGroup | None, spin_s: float = 0.0) -> None:
        """Barrier, then a device-side spin while the host queues the sample: no launch overhead timed."""
        self.barrier(group)
        if spin_s > 0:
            torch.cuda._sleep(int(spin_s * 1e3 * self.cycles_per_ms()))

    def launch_spin_s(self, loops: int, group: dist.ProcessGroup | None) -> float:
        """Twice the host's queueing time plus a margin, MAX over the group; none under gloo."""
        if dist.get_backend(group) != "nccl":
            return 0.0
        own = torch.tensor([min(0.05, 2.0 * self.launch_s_per_call * loops + 50e-6)],
                           dtype=torch.float64, device=self.torch_device)
        dist.all_reduce(own, op=dist.ReduceOp.MAX, group=group)
        return self.read(own)[0]

    def cycles_per_ms(self) -> float:
        """GPU clock cycles per millisecond of `torch.cuda._sleep`, measured once."""
        if self._cycles_per_ms is None:
            start = self.stamp()
            torch.cuda._sleep(1_000_000)
            self._cycles_per_ms = 1_000_000 / max(self.elapsed_us(start, self.stamp()) / 1e3, 1e-6)
        return self._cycles_per_ms


NCCL_GRACE_S = 5.0  # NCCL watchdog timeout = --timeout + this


def process_group_options(backend: str, device: Device, timeout_s: float) -> dict:
    """init_process_group's keywords: NCCL bound to this GPU, its watchdog a little past --timeout."""
    options: dict[str, object] = {"timeout": _dt.timedelta(seconds=timeout_s)}
    if backend == "nccl":
        options["timeout"] = _dt.timedelta(seconds=timeout_s + NCCL_GRACE_S)
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            options["device_id"] = device.torch_device
    return options


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def this_host() -> Host:
    """This host's CPUs and GPUs, for the config builders (core/config needs no torch)."""
    return Host(cpus_allowed(), torch.cuda.device_count() if torch.cuda.is_available() else 0)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def make_device(kind: str, local_rank: int, local_world_size: int | None = None,
                timeout_s: float = 300.0) -> Device:
    if kind == "cuda":
        return CudaDevice(local_rank, local_world_size, timeout_s)
    return Device()
