"""When a step's computation ran and each bucket's AllReduce was launched and completed, on the device's
own clock (a CUDA event in a future's callback marks when the GPU finished the collective), and the
slowest rank's timeline (doc/ddp.md)."""
from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from allreduce_bench.core.measure import timing
from allreduce_bench.core.measure.device import Device
from allreduce_bench.core.measure.world import World


@dataclass
class AllReduceSpan:
    """One AllReduce inside a step: launched when DDP handed its bucket to the hook."""

    bucket: int
    nbytes: int
    launched: object
    completed: object = None


class Timeline:
    """Named instants (start, backward_start, backward_end, optimizer_start, end) and AllReduce spans of one
    step body's timed iterations on this rank; nothing outside them (`begin(None)`)."""

    def __init__(self, device: Device, iters: int):
        self.now, self.us = device.stamp, device.elapsed_us
        self.iteration: int | None = None
        self.instants: list[dict] = [{} for _ in range(iters)]
        self.allreduces: list[list[AllReduceSpan]] = [[] for _ in range(iters)]

    def begin(self, iteration: int | None) -> None:
        self.iteration = iteration
        self.at("start")

    def at(self, name: str) -> None:
        if self.iteration is not None:
            self.instants[self.iteration][name] = self.now()

    def launched(self, bucket: int, nbytes: int) -> AllReduceSpan | None:
        if self.iteration is None:
            return None
        span = AllReduceSpan(bucket, nbytes, self.now())
        self.allreduces[self.iteration].append(span)
        return span

    def completed(self, span: AllReduceSpan | None) -> None:
        if span is not None:
            span.completed = self.now()

    def between(self, i: int, first: str, last: str) -> float:
        at = self.instants[i]
        return self.us(at[first], at[last])

    def spans(self, i: int) -> list[dict]:
        """Iteration i as spans relative to its start (call after the device synchronized)."""
        at, us = self.instants[i], self.us
        rows = [dict(span=name, bucket=-1, bytes=0, start_us=us(at["start"], at[a]),
                     end_us=us(at["start"], at[b]))
                for name, a, b in (("forward", "start", "backward_start"),
                                   ("backward", "backward_start", "backward_end"),
                                   ("optimizer", "optimizer_start", "end"))]
        for ar in self.allreduces[i]:
            rows.append(dict(span="allreduce", bucket=ar.bucket, bytes=ar.nbytes,
                             start_us=us(at["start"], ar.launched),
                             end_us=us(at["start"], ar.completed)))
        step = us(at["start"], at["end"])
        return [dict(row, iteration=i, step_us=step) for row in rows]


class _NoTimeline(Timeline):
    """Records nothing, whatever the iteration: for steps that are not being timed."""

    def __init__(self):
        super().__init__(Device(), 0)

    def begin(self, iteration: int | None) -> None:
        self.iteration = None


NO_TIMELINE = _NoTimeline()


def slowest_rank(own_times_us: list[float], world: World) -> int:
    """The rank (in the world's group) whose median step time is the largest (the first such)."""
    median = sorted(own_times_us)[len(own_times_us) // 2]
    medians = [m for m, in timing.gather([median], world.group.pg, world.device)]
    return medians.index(max(medians))


def slowest_timeline(timeline: Timeline, own_times_us: list[float], world: World) -> tuple[int, list[dict]]:
    """(slowest rank, its timeline's spans for every timed iteration), on every rank."""
    rank = slowest_rank(own_times_us, world)
    mine = [row for i in range(len(timeline.instants)) for row in timeline.spans(i)]
    gathered: list = [None] * world.size
    dist.all_gather_object(gathered, mine, group=world.group.pg)
    return rank, gathered[rank]
