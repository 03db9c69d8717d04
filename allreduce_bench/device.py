"""Device and timer, chosen once per rank: the only place that knows CPU from CUDA.

Everything else (algorithms, sweep, checks) calls these methods, so the CPU tests exercise all
of it but the CUDA calls themselves.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .errors import UsageError


class CpuTimer:
    """Monotonic clock around each iteration; gloo calls return when the work is done."""

    def __init__(self, iters: int):
        self.starts = [0] * iters
        self.stops = [0] * iters

    def start(self, i: int) -> None:
        self.starts[i] = time.perf_counter_ns()

    def stop(self, i: int) -> None:
        self.stops[i] = time.perf_counter_ns()

    def times_us(self) -> list[float]:
        return [(b - a) / 1e3 for a, b in zip(self.starts, self.stops)]


class CudaTimer:
    """CUDA events on the current stream: the GPU's own clock, no host sync per iteration."""

    def __init__(self, iters: int):
        self.starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        self.stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]

    def start(self, i: int) -> None:
        self.starts[i].record()

    def stop(self, i: int) -> None:
        self.stops[i].record()

    def times_us(self) -> list[float]:
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1e3 for a, b in zip(self.starts, self.stops)]


class Device:
    """CPU device for gloo."""

    kind = "cpu"
    timer_class = CpuTimer

    def __init__(self) -> None:
        self.torch_device = torch.device("cpu")

    @property
    def name(self) -> str:
        return cpu_model()

    def synchronize(self) -> None:
        pass

    def barrier(self, group: dist.ProcessGroup | None) -> None:
        dist.barrier(group=group)

    def timer(self, iters: int):
        return self.timer_class(iters)


class CudaDevice(Device):
    """One GPU per rank, chosen by local rank before the process group exists."""

    kind = "cuda"
    timer_class = CudaTimer

    def __init__(self, local_rank: int) -> None:
        if not torch.cuda.is_available():
            raise UsageError("CUDA was asked for but no CUDA device is visible; use --backend gloo "
                             "or run on a GPU node")
        if local_rank >= torch.cuda.device_count():
            raise UsageError(f"local rank {local_rank} has no GPU of its own (only "
                             f"{torch.cuda.device_count()} visible); launch at most one rank per GPU")
        torch.cuda.set_device(local_rank)
        self.torch_device = torch.device("cuda", local_rank)
        self._flag = torch.zeros(1, device=self.torch_device)

    @property
    def name(self) -> str:
        return torch.cuda.get_device_name(self.torch_device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def barrier(self, group: dist.ProcessGroup | None) -> None:
        # A one-element all_reduce on this rank's own device: dist.barrier() with NCCL guesses
        # the device from the rank, which is wrong for sub-groups.
        dist.all_reduce(self._flag, group=group)
        torch.cuda.synchronize(self.torch_device)


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


def resolve_backend(backend: str, device: str | None, gpus_needed: int) -> tuple[str, str]:
    """(backend, device kind) from the user's choice and what this host has.

    auto: nccl on cuda when every local rank can have a GPU of its own, gloo on cpu otherwise.
    """
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"--device {device!r} is not known; use cpu or cuda")
    if backend == "auto":
        if device == "cpu" or (device is None and gpus < max(gpus_needed, 1)):
            backend = "gloo"
        else:
            backend = "nccl"
    if backend not in ("gloo", "nccl"):
        raise UsageError(f"--backend {backend!r} is not known; use auto, gloo or nccl")
    kind = device or ("cuda" if backend == "nccl" else "cpu")
    if backend == "nccl" and kind == "cpu":
        raise UsageError("nccl runs on GPUs only; drop --device cpu or use --backend gloo")
    if kind == "cuda":
        if gpus == 0:
            raise UsageError(f"--backend {backend} needs a CUDA device and none is visible; "
                             "use --backend gloo to run on the CPU")
        if gpus_needed > gpus:
            raise UsageError(f"{gpus_needed} GPU ranks per host were asked for but only {gpus} GPUs "
                             "are visible; choose smaller --world-sizes or more nodes")
    return backend, kind


def make_device(kind: str, local_rank: int) -> Device:
    return CudaDevice(local_rank) if kind == "cuda" else Device()
