"""A GPU that CPU tensors stand in for: torch.cuda's events and spin on a fake GPU clock, a
CudaDevice built on them, and dist's collectives between threads (one per rank). For the GPU
path's tests, which CI runs without a GPU (tests/core/test_gpu_device.py)."""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from allreduce_bench.core.measure import device as device_module

CYCLES_PER_MS = 1e6


class FakeGpu(threading.local):
    """Each thread's (rank's) GPU: its clock in ms, and whether its queued work completes (a
    lost peer: it never does)."""

    clock_ms = 0.0
    stuck = False


GPU = FakeGpu()


class Event:
    """torch.cuda.Event on the fake clock: recorded at the GPU's time now."""

    def __init__(self, enable_timing: bool = False):
        self.at = None

    def record(self) -> None:
        self.at = GPU.clock_ms

    def query(self) -> bool:
        return not GPU.stuck

    def elapsed_time(self, other: Event) -> float:
        return other.at - self.at


def sleep(cycles: int) -> None:
    """torch.cuda._sleep: the GPU spins `cycles`."""
    GPU.clock_ms += cycles / CYCLES_PER_MS


def install(monkeypatch) -> None:
    """Events and the spin on the fake GPU; each thread's clock starts at 0."""
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", sleep, raising=False)
    GPU.clock_ms, GPU.stuck = 0.0, False


def cuda_device(launch_s_per_call: float = 20e-6, timeout_s: float = 5.0) -> device_module.CudaDevice:
    """A CudaDevice whose tensors are CPU tensors (no GPU: __init__'s checks skipped)."""
    device = object.__new__(device_module.CudaDevice)
    device.torch_device, device.timeout_s, device._flag = torch.device("cpu"), timeout_s, None
    device.launch_s_per_call, device._cycles_per_ms = launch_s_per_call, CYCLES_PER_MS
    return device


class Ranks:
    """dist's collectives between `size` threads, one per rank: all_reduce (SUM, MAX),
    all_gather, the backend's name and the group's size. Install with `patch(monkeypatch)`."""

    def __init__(self, size: int, backend: str = "nccl"):
        self.size, self.backend = size, backend
        self.barrier = threading.Barrier(size)
        self.slots: dict[int, tuple[torch.Tensor, float]] = {}
        self.rank = threading.local()

    def _exchange(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `t`; a collective ends on every GPU when the last rank's GPU reaches it."""
        self.slots[self.rank.value] = (t.clone(), GPU.clock_ms)
        self.barrier.wait()
        every = [self.slots[r] for r in range(self.size)]
        self.barrier.wait()
        GPU.clock_ms = max(clock for _, clock in every)
        return [theirs for theirs, _ in every]

    def all_reduce(self, t, op=dist.ReduceOp.SUM, group=None, async_op=False):
        every = torch.stack(self._exchange(t))
        t.copy_(every.amax(0) if op == dist.ReduceOp.MAX else every.sum(0))

    def all_gather(self, parts, t, group=None, async_op=False):
        for part, theirs in zip(parts, self._exchange(t)):
            part.copy_(theirs)

    def patch(self, monkeypatch) -> None:
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)
        monkeypatch.setattr(dist, "all_gather", self.all_gather)
        monkeypatch.setattr(dist, "get_backend", lambda group=None: self.backend)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: self.size)

    def run(self, fn, *args) -> list:
        """fn(rank, *args) on every rank's thread; their results in rank order."""
        results, errors = [None] * self.size, []

        def one(rank: int) -> None:
            self.rank.value = rank
            GPU.clock_ms, GPU.stuck = 0.0, False
            try:
                results[rank] = fn(rank, *args)
            except BaseException as error:  # noqa: BLE001  (raised again in the caller)
                errors.append(error)
                self.barrier.abort()

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        if errors:
            raise errors[0]
        return results
