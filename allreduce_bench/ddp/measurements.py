"""DDP in practice, measured on one rank as rows: per world size and bucket cap the same model timed as
compute, ddp_no_comm, step, comm and no_overlap, interleaved, and the two accumulation modes (doc/ddp.md)."""
from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from allreduce_bench.core import metrics
from allreduce_bench.core.measure import timing
from allreduce_bench.core.measure.world import World
from allreduce_bench.core.sweep.rows import result_row
from allreduce_bench.ddp.config import DdpConfig, DdpSettings
from allreduce_bench.ddp.net import DTYPE, param_count, synthetic_batch
from allreduce_bench.ddp.timeline import NO_TIMELINE, Timeline, slowest_timeline
from allreduce_bench.ddp.trainer import HookState, NoOverlapTrainer, Trainer, ddp_trainer, local_hook

StepBody = Callable[[int | None], None]  # one step; its argument: the timed iteration, or None


def slowest(times_us: list[float], world: World) -> list[float]:
    """Per iteration, the slowest rank's time: the step is done when every rank is."""
    return timing.slowest(times_us, world.group.pg, world.device)


def timed(world: World, iters: int, warmup: int,
          bodies: dict[str, StepBody]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """(the slowest rank's times per iteration, this rank's own) of step bodies run in turn every iteration, so
    drifting load hits them alike; each body's process CPU time is kept beside it as '<name>_cpu'."""
    device = world.device
    for _ in range(warmup):
        for body in bodies.values():
            body(None)
    timers = {name: device.timer(iters) for name in bodies}
    cpu_ns = {name: [0] * iters for name in bodies}
    for i in range(iters):
        for name, body in bodies.items():
            timing.take_sample(_counting_cpu(body, i, cpu_ns[name]), device, timers[name], i, 1,
                               lambda: device.align(world.group.pg))
    device.synchronize()
    own = {name: timer.times_us() for name, timer in timers.items()}
    own.update({f"{name}_cpu": [ns / 1e3 for ns in cpu] for name, cpu in cpu_ns.items()})
    return {name: slowest(times, world) for name, times in own.items()}, own


def _counting_cpu(body: StepBody, iteration: int, cpu_ns: list[int]) -> Callable[[], None]:
    """body(iteration), its process CPU time stored at cpu_ns[iteration]."""
    def call() -> None:
        start = time.process_time_ns()
        body(iteration)
        cpu_ns[iteration] = time.process_time_ns() - start
    return call


def comm_alone(world: World, bucket_bytes: list[int]) -> StepBody:
    """AllReduce of buffers the size of DDP's buckets, launched asynchronously in DDP's order, then waited for."""
    device = world.device.torch_device
    itemsize = torch.empty(0, dtype=DTYPE).element_size()
    buffers = [torch.randn(n // itemsize).to(device) for n in bucket_bytes]

    def body(iteration=None):
        works = []
        for buffer in buffers:
            buffer.div_(world.size)  # DDP's hook divides before reducing; keeps values bounded
            works.append(dist.all_reduce(buffer, group=world.group.pg, async_op=True))
        for work in works:
            work.wait()
    return body


def measure_bucket_cap(settings: DdpSettings, world: World, bare: Trainer, bucket_mb: float) -> dict:
    """Every measure at one bucket cap, interleaved: its times, the last DDP step's bucket sizes (`layout`),
    #wrong gradients and the slowest rank's timeline rows."""
    trainer, state = ddp_trainer(settings, world, bucket_mb)
    for _ in range(2):  # DDP rebuilds its buckets in gradient-ready order after the first step
        state.reset()
        trainer.step()
    comm = comm_alone(world, list(state.bucket_bytes))
    baseline = NoOverlapTrainer.make(settings, world)
    local, _ = ddp_trainer(settings, world, bucket_mb, local_hook)
    local.step()  # DDP rebuilds its buckets after the first step
    for body in (bare, trainer, baseline):
        body.timeline = Timeline(world.device, settings.iters)
    state.timeline = trainer.timeline

    def ddp_step(iteration=None):
        state.reset()  # so what is left after the loop is one step's worth
        trainer.step(iteration)

    times, own = timed(world, settings.iters, settings.warmup,
                       {"compute": bare.step, "ddp_no_comm": local.step, "comm": comm,
                        "step": ddp_step, "no_overlap": baseline.step})
    times["backward"] = slowest([bare.timeline.between(i, "backward_start", "backward_end")
                                 for i in range(settings.iters)], world)
    timeline = []
    for measure, body in (("step", trainer), ("no_overlap", baseline)):
        rank, spans = slowest_timeline(body.timeline, own[measure], world)
        timeline += [dict(span, measure=measure, rank=rank, world_size=world.size,
                          bucket_mb=bucket_mb) for span in spans]
    bare.timeline = NO_TIMELINE
    layout = list(state.bucket_bytes)
    assert isinstance(trainer.model, DistributedDataParallel)
    wrong = check_ddp_gradients(trainer.model, trainer.batch, world)
    return dict(times=times, layout=layout, timeline=timeline, wrong=wrong)


def check_ddp_gradients(ddp: DistributedDataParallel, batch, world: World) -> int:
    """#gradient elements (summed over ranks) where DDP's result differs from the local ones' plain average."""
    x, y = batch
    params = [p for p in ddp.parameters()]

    def gradients() -> torch.Tensor:
        ddp.zero_grad(set_to_none=False)
        nn.functional.mse_loss(ddp(x), y).backward()
        return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])

    with ddp.no_sync():
        expected = gradients()
    dist.all_reduce(expected, group=world.group.pg)
    expected /= world.size
    got = gradients()
    world.device.synchronize()  # both AllReduces within --timeout: float(scale) reads them
    scale = expected.abs().max().clamp_min(1e-30)
    bad = ~torch.isclose(got, expected, rtol=1e-4, atol=1e-6 * float(scale))
    return timing.total(bad.sum(), world.group.pg, world.device)  # read within --timeout


def measure_accumulation(settings: DdpSettings, world: World, bucket_mb: float | None = None) -> dict:
    """{sync, no_sync: (times of `accum` micro-batches per optimizer step, bytes of each AllReduce of the last
    one)}, syncing on every micro-batch or no_sync() on all but the last; bucket_mb None: DDP's default."""
    device = world.device.torch_device
    counters, bodies = {}, {}
    for mode in ("sync", "no_sync"):
        trainer, counters[mode] = ddp_trainer(settings, world, bucket_mb)
        module = cast(nn.Sequential, trainer.model.module)
        batches = [synthetic_batch(module, settings.batch_size, world.rank, device, m) for m in range(settings.accum)]
        bodies[mode] = _accumulation_step(trainer, counters[mode], batches, mode == "no_sync")
    for body in bodies.values():  # as in measure_bucket_cap: let DDP rebuild its buckets
        body(None)
    times, _ = timed(world, settings.iters, settings.warmup, bodies)
    # each body resets its counter first, so what is left is the last optimizer step's
    return {mode: (times[mode], list(counter.bucket_bytes)) for mode, counter in counters.items()}


def _accumulation_step(trainer: Trainer, counter: HookState, batches, no_sync: bool) -> StepBody:
    ddp = trainer.model
    assert isinstance(ddp, DistributedDataParallel)

    def body(iteration=None):
        counter.reset()
        trainer.optimizer.zero_grad(set_to_none=False)
        for m, (x, y) in enumerate(batches):
            with ddp.no_sync() if no_sync and m < len(batches) - 1 else contextlib.nullcontext():
                nn.functional.mse_loss(ddp(x), y).backward()
        trainer.optimizer.step()
    return body


@dataclass(frozen=True)
class Traffic:
    """What a measured step sent: its buckets (bytes each), AllReduce calls and bytes (None: not counted)."""

    buckets: tuple[int, ...] = ()
    calls: int | None = None
    sent: int | None = None

    @classmethod
    def of(cls, buckets) -> Traffic:
        return cls(tuple(buckets), len(buckets), sum(buckets))


NOTHING_SENT = Traffic((), 0, 0)


@dataclass(frozen=True)
class DdpRows:
    """The rows with benchmark = ddp of one (sub-)world and bucket cap (None: no cap)."""

    config: DdpConfig
    world: World
    size_bytes: int
    bucket_mb: float | None = None
    accum: int = 1

    def row(self, measure: str, times_us: list[float], traffic: Traffic = Traffic(),
            wrong: int = 0) -> dict:
        """One row of `measure`'s times, one sample per step (the slowest rank's): statistics over steps."""
        stats = metrics.sample_stats([times_us])
        for per_rank in ("time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us",
                         "skew_share"):
            stats.pop(per_rank)  # the times are already the slowest rank's per step
        return result_row(self.config.launch, self.world, stats, {
            "benchmark": "ddp", "collective": "", "algorithm": "ddp", "dtype": "float32",
            "size_bytes": self.size_bytes, "count": self.size_bytes // 4, "timing": "per-step",
            "samples": len(times_us), "loops": 1, "warmup": self.config.settings.warmup,
            "wrong": wrong, "measure": measure,
            "bucket_mb": math.nan if self.bucket_mb is None else self.bucket_mb, "accum": self.accum,
            "bucket_sizes": ";".join(map(str, traffic.buckets)),
            "allreduce_calls": math.nan if traffic.calls is None else traffic.calls,
            "allreduce_bytes": math.nan if traffic.sent is None else traffic.sent},
            "all_reduce" if measure == "comm" else None)


def measure_world(config: DdpConfig, world: World, on_row: Callable[[dict], None],
                  on_timeline: Callable[[list[dict]], object] = lambda rows: None) -> int:
    """Every DDP measurement on one (sub-)world; rows go to `on_row`, the timeline of each bucket
    cap to `on_timeline`. Returns #wrong."""
    settings = config.settings
    bare = Trainer.make(settings, world)
    grad_bytes = param_count(bare.model) * DTYPE.itemsize
    wrong_total = 0
    for bucket_mb in settings.bucket_mbs:
        found = measure_bucket_cap(settings, world, bare, bucket_mb)
        gc.collect()  # free this cap's models (hooks make reference cycles) before the next
        times, layout = found["times"], Traffic.of(found["layout"])
        wrong_total += found["wrong"]
        rows = DdpRows(config, world, grad_bytes, bucket_mb)
        on_row(rows.row("compute", times["compute"], NOTHING_SENT))
        on_row(rows.row("backward", times["backward"]))
        on_row(rows.row("ddp_no_comm", times["ddp_no_comm"], NOTHING_SENT))
        on_row(rows.row("comm", times["comm"], layout))
        on_row(rows.row("step", times["step"], layout, wrong=found["wrong"]))
        # what AllReduce's CPU time costs a rank sharing cores with backward, and the CPU the rank gets
        on_row(rows.row("comm_cpu", times["comm_cpu"], layout))
        on_row(rows.row("compute_cpu", times["compute_cpu"], NOTHING_SENT))
        on_row(rows.row("no_overlap", times["no_overlap"], Traffic.of([grad_bytes])))
        on_timeline([dict(row, run_id=config.launch.run_id) for row in found["timeline"]])
    accumulating = DdpRows(config, world, grad_bytes, accum=settings.accum)
    for mode, (times, sent) in measure_accumulation(settings, world).items():
        on_row(accumulating.row(f"accum_{mode}", times, Traffic.of(sent)))
    return wrong_total
