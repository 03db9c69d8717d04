"""Instants on the device's own clock, for timelines inside a timed step (ddp's bucket timeline).

`stamps_for(device).now()` is called at the moments to place (step start, backward end, an
AllReduce launched, an AllReduce completed); `us(a, b)` is the time between two of them, read
after the device has synchronized.

* CPU: time.perf_counter_ns() when called. gloo completes work on its own threads, and a
  future's callback runs there as the work completes, so a stamp taken in it is the completion.
* CUDA: an event recorded on the current stream, so the instant is when the GPU gets there, not
  when the host queued it. A future's callback runs on a stream made to wait for the collective,
  so an event recorded in it marks when the GPU finished the collective.
"""
from __future__ import annotations

import time


class CpuStamps:
    def now(self) -> int:
        return time.perf_counter_ns()

    def us(self, start: int, end: int) -> float:
        return (end - start) / 1e3


class CudaStamps:
    def now(self):
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def us(self, start, end) -> float:
        return start.elapsed_time(end) * 1e3  # elapsed_time is in ms


def stamps_for(device) -> CpuStamps | CudaStamps:
    """The clock of a measure.device Device (its `kind` is 'cpu' or 'cuda')."""
    return CudaStamps() if device.kind == "cuda" else CpuStamps()
