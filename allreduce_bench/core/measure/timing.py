"""The one timing loop of every benchmark: calibrated samples of back-to-back calls, every count decided over
the ranks so all make the same calls (doc/methodology.md, "The sample loop")."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from allreduce_bench.core.measure.device import Device

if TYPE_CHECKING:
    from allreduce_bench.core.config import Sampling  # the settings this loop reads

# --- pure arithmetic (tested on a fake clock) ----------------------------------------------------

def calibrate_loops(sample: Callable[[int], tuple[float, float]], min_sample_s: float,
                    max_loops: int, max_skew_share: float | None = None,
                    max_sample_s: float = math.inf) -> tuple[int, float]:
    """(loops, seconds): the fewest loops whose sample lasts min_sample_s and skew / max_skew_share; one call
    that reaches it alone is confirmed by a second (doc/methodology.md, "Calls with two states")."""
    loops, pace = 1, math.inf
    for attempt in range(8):
        took, skew = sample(loops)
        pace = min(pace, max(took - skew, 1e-9) / loops)
        wanted = min_sample_s
        if max_skew_share:
            wanted = max(wanted, min(max_sample_s, skew / max_skew_share))
        if loops >= max_loops:
            return loops, took
        if took >= wanted:  # loops is 1 only in the first two attempts (every jump is to 2+)
            if loops > 1 or (attempt and pace + skew >= wanted):
                return loops, took
            if not attempt:
                continue  # one call reached it: confirm with a second
        estimate = math.ceil(1.2 * (wanted - skew) / pace)
        loops = min(max_loops, max(loops * 2, estimate))
    return loops, took


def longest_sample_s(sampling: Sampling) -> float:
    """How long the skew may make a sample: within max_sample_s and the budget's min_samples."""
    return min(sampling.max_sample_s, sampling.budget_s / max(sampling.min_samples, 1))


def plan_samples(sample_s: float, budget_s: float, min_samples: int, max_samples: int) -> int:
    fit = int(budget_s / sample_s) if sample_s > 0 else max_samples
    return max(min_samples, min(max_samples, fit))


# --- the loop ---------------------------------------------------------------------------------

def slowest(values: list[float], group, device: Device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device.torch_device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return device.read(t)


def gather(values: list[float], group, device: Device) -> list[list[float]]:
    """Every rank's list (same length), in group-rank order, on every rank."""
    t = torch.tensor(values, dtype=torch.float64, device=device.torch_device)
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t, group=group)
    return device.read(torch.stack(parts))


def total(count: int | torch.Tensor, group, device: Device) -> int:
    """A count (an int, or a device tensor not read yet) summed over the group, read within the device's timeout."""
    t = torch.as_tensor(count, dtype=torch.int64, device=device.torch_device).reshape(1)
    dist.all_reduce(t, group=group)
    return int(device.read(t)[0])


def take_samples(call: Callable[[], None], device: Device, group, loops: int, count: int,
                 host_launch: bool = False, before_sample: Callable[[], None] | None = None) -> list[float]:
    """This rank's time per call (us) in `count` samples of `loops` calls, each after `align` and `before_sample`."""
    timer = device.timer(count)
    spin = 0.0 if host_launch else device.launch_spin_s(loops, group)

    def align() -> None:
        device.align(group, spin)
        if before_sample is not None:
            before_sample()

    for i in range(count):
        take_sample(call, device, timer, i, loops, align)
    return [t / loops for t in timer.times_us()]


def take_sample(call: Callable[[], None], device: Device, timer, i: int, loops: int,
                align: Callable[[], None]) -> None:
    align()
    queued = time.perf_counter()  # outside the interval: only the calls are timed
    timer.start(i)
    for _ in range(loops):
        call()
    timer.stop(i)
    device.note_launch(time.perf_counter() - queued, loops)  # sizes the next GPU spin


@dataclass(frozen=True)
class Together:
    """How a group sampling beside others coordinates: `agree_over` decides counts and gathers times over a larger
    group; `lockstep` also aligns every sample over it (rails sharing a link), times the group's own."""

    agree_over: Any = None
    lockstep: Any = None


ALONE = Together()


@dataclass(frozen=True)
class Measured:

    per_rank_us: list[list[float]]  # [rank][sample], group-rank order
    loops: int
    samples: int


def sample(call: Callable[[], None], device: Device, group, sampling: Sampling,
           together: Together = ALONE) -> Measured:
    """Warm up, calibrate, take the samples, gather every rank's times. Collective on `group`."""
    # counts are decided over `agree`, samples aligned over `aligned`, times gathered over `kept`
    lockstep = together.lockstep
    agree = lockstep if lockstep is not None else group if together.agree_over is None else together.agree_over
    aligned, kept = (group, agree) if lockstep is None else (lockstep, group)
    for _ in range(sampling.warmup):
        call()
    device.synchronize()

    wall = [0.0]  # the last calibration sample's wall time, the longest rank's

    def one_sample(loops: int) -> tuple[float, float]:
        """(slowest rank's seconds, its skew) of one sample: its interval or the host's queueing."""
        started = time.perf_counter()
        mine = take_samples(call, device, aligned, loops, 1, sampling.host_launch)[0] * loops / 1e6
        wall_s = time.perf_counter() - started
        longest = slowest([mine], aligned, device)[0]
        took, skew, queued, wall[0] = slowest([mine, longest - mine, device.launch_s_per_call * loops,
                                               wall_s], agree, device)
        return max(took, queued), skew

    if sampling.loops is None:
        loops, took = calibrate_loops(one_sample, sampling.min_sample_s, sampling.max_loops,
                                      sampling.max_skew_share, longest_sample_s(sampling))
    elif sampling.samples is None:  # the plan needs one sample's length (it warms up too)
        loops, took = sampling.loops, one_sample(sampling.loops)[0]
    else:  # nothing to plan (a later round, or both given): the warm-up calls warmed up
        loops, took = sampling.loops, 0.0
    def take(loops: int, took: float) -> tuple[list[float], int]:
        count = sampling.samples or plan_samples(max(took, wall[0]), sampling.budget_s,
                                                 sampling.min_samples, sampling.max_samples)
        return take_samples(call, device, aligned, loops, count, sampling.host_launch,
                            device.before_sample), count

    mine, count = take(loops, took)
    again = None
    if sampling.loops is None:  # each call lasts its interval or the host's queueing, the longer
        *slow, queued = slowest(mine + [device.launch_s_per_call * 1e6], agree, device)
        again = recalibrated([max(t, queued) for t in slow], loops, sampling)
    if again:  # the calibration saw slow calls: retake the samples with the loops they ask
        loops = again[0]
        mine, count = take(*again)
    return Measured(gather(mine, kept, device), loops, count)


def recalibrated(per_call_us: list[float], loops: int, sampling: Sampling) -> tuple[int, float] | None:
    """(loops, seconds) where the median sample fell short of min_sample_s; None otherwise."""
    median_s = sorted(per_call_us)[len(per_call_us) // 2] / 1e6
    if median_s * loops >= sampling.min_sample_s or loops >= sampling.max_loops:
        return None
    again = min(sampling.max_loops, max(loops + 1, math.ceil(1.2 * sampling.min_sample_s / max(median_s, 1e-9))))
    return again, again * median_s


def busy_wait_call(seconds: float) -> Callable[[], None]:
    """A call that spins for exactly `seconds`: what is reported beyond it is the harness's bias."""
    def call() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return call
