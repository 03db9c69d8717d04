"""DDP in practice, measured on one rank: bucketed overlap and no_sync accumulation, as rows.

Per world size and bucket cap the same synthetic model (ddp/net.py) is timed as compute,
ddp_no_comm, step, comm (AllReduce alone of buffers shaped like the buckets DDP sent) and
no_overlap (doc/ddp.md, "What is measured"), interleaved so drifting load hits them alike, as
are the two accumulation modes. Every DDP instance's communication hook (ddp/trainer.py) counts
calls and bytes and records when each bucket's AllReduce started and ended: nothing about DDP's
bucketing is assumed, and the steps leave a measured timeline. Per iteration the slowest rank's
time is kept; the timeline is the slowest rank's (largest median step).
"""
from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from allreduce_bench.core import metrics
from allreduce_bench.core.measure import timing
from allreduce_bench.core.measure.world import World
from allreduce_bench.core.sweep.rows import result_row
from allreduce_bench.ddp.config import DdpSettings
from allreduce_bench.ddp.net import DTYPE, param_count, synthetic_batch
from allreduce_bench.ddp.timeline import NO_TIMELINE, Timeline, slowest_timeline
from allreduce_bench.ddp.trainer import HookState, NoOverlapTrainer, Trainer, ddp_trainer, local_hook

StepBody = Callable[[int | None], None]  # one step; its argument: the timed iteration, or None


def slowest(times_us: list[float], world: World) -> list[float]:
    """Per iteration, the slowest rank's time: the step is done when every rank is."""
    return timing.slowest(times_us, world.group.pg, world.device)


def timed(world: World, iters: int, warmup: int,
          bodies: dict[str, StepBody]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time several step bodies interleaved: each iteration runs every body once, in turn.

    Interleaving means a change in background load (a shared machine) hits every measurement
    alike, so differences between them (step - compute) stay meaningful. Each body is called
    with the timed iteration's index (None in the `warmup` untimed rounds first), so a body
    with a timeline records that iteration. The CPU time this process spends in each body (all
    its threads, gloo's included: time.process_time) is kept beside it as '<name>_cpu'.
    Returns (per-iteration times in us, the slowest rank's each; this rank's own times).

    Each step is one sample of the core's loop (timing.take_sample: align, clock, the call,
    clock), but not timing.sample's calibrated series: a step is timed alone (one call per
    sample, since each timed step leaves its own timeline and the rows' statistics are over
    steps), --iters of them rather than a planned count, and the bodies take turns within
    every iteration instead of one body's samples running back to back.
    """
    device = world.device
    for _ in range(warmup):
        for body in bodies.values():
            body(None)
    timers = {name: device.timer(iters) for name in bodies}
    cpu_ns = {name: [0] * iters for name in bodies}
    for i in range(iters):
        for name, body in bodies.items():
            timing.take_sample(_counting_cpu(body, i, cpu_ns[name]), device, world.group.pg,
                               timers[name], i)
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
    """AllReduce of buffers the size of DDP's buckets, launched asynchronously in DDP's order
    (as its reducer does when buckets become ready), then waited for."""
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
    """Compute alone, DDP without communication, comm alone, the DDP step and the no-overlap
    step at one bucket cap, interleaved; the timelines of the DDP and no-overlap steps on the
    slowest rank.

    Two untimed DDP steps first: DDP rebuilds its buckets in gradient-ready order after the
    first, so from the second on the hook sees the layout every later step uses.
    Returns the times per measure (and 'backward': the bare model's backward pass), the bucket
    sizes of the last DDP step, #wrong gradients and the timeline rows.
    """
    trainer, state = ddp_trainer(settings, world, bucket_mb)
    for _ in range(2):
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
    wrong = check_ddp_gradients(trainer.model, trainer.batch, world)
    return dict(times=times, layout=layout, timeline=timeline, wrong=wrong)


def check_ddp_gradients(ddp: DistributedDataParallel, batch, world: World) -> int:
    """#gradient elements (summed over ranks) where DDP's result differs from the hand average.

    The hand average: this rank's local gradient (backward under no_sync), summed over ranks
    with a plain all_reduce and divided by the world size.
    """
    x, y = batch
    params = [p for p in ddp.parameters()]
    ddp.zero_grad(set_to_none=False)
    with ddp.no_sync():
        nn.functional.mse_loss(ddp(x), y).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(expected, group=world.group.pg)
    expected /= world.size
    ddp.zero_grad(set_to_none=False)
    nn.functional.mse_loss(ddp(x), y).backward()
    got = torch.cat([p.grad.reshape(-1) for p in params])
    world.device.synchronize()  # both AllReduces within --timeout: float(scale) reads them
    scale = expected.abs().max().clamp_min(1e-30)
    bad = ~torch.isclose(got, expected, rtol=1e-4, atol=1e-6 * float(scale))
    return timing.total(bad.sum(), world.group.pg, world.device)  # read within --timeout


def measure_accumulation(settings: DdpSettings, world: World, bucket_mb: float | None = None) -> dict:
    """One optimizer step = `accum` micro-batches, syncing on every one vs no_sync() on all
    but the last, interleaved. bucket_mb None: DDP's defaults (25 MiB buckets, the first one
    1 MiB), as most training scripts run it.

    Returns {mode: (time per optimizer step, bytes of each AllReduce the hook saw in the last
    timed optimizer step)} for mode sync and no_sync.
    """
    device = world.device.torch_device
    counters, bodies = {}, {}
    for mode in ("sync", "no_sync"):
        trainer, counters[mode] = ddp_trainer(settings, world, bucket_mb)
        batches = [synthetic_batch(trainer.model.module, settings.batch_size, world.rank, device, m)
                   for m in range(settings.accum)]
        bodies[mode] = _accumulation_step(trainer, counters[mode], batches, mode == "no_sync")
    for body in bodies.values():  # as in measure_bucket_cap: let DDP rebuild its buckets
        body()
    times, _ = timed(world, settings.iters, settings.warmup, bodies)
    # each body resets its counter first, so what is left is the last optimizer step's
    return {mode: (times[mode], list(counter.bucket_bytes)) for mode, counter in counters.items()}


def _accumulation_step(trainer: Trainer, counter: HookState, batches, no_sync: bool) -> StepBody:
    ddp = trainer.model

    def body(iteration=None):
        counter.reset()
        trainer.optimizer.zero_grad(set_to_none=False)
        for m, (x, y) in enumerate(batches):
            if no_sync and m < len(batches) - 1:
                with ddp.no_sync():
                    nn.functional.mse_loss(ddp(x), y).backward()
            else:
                nn.functional.mse_loss(ddp(x), y).backward()
        trainer.optimizer.step()
    return body


# --- rows ------------------------------------------------------------------------------------

def ddp_row(config, world: World, measure: str, times_us: list[float], *, size_bytes: int,
            bucket_mb: float | None = None, accum: int = 1, bucket_bytes: list[int] | None = None,
            calls: int | None = None, sent: int | None = None, wrong: int = 0) -> dict:
    """One results row with benchmark = ddp; `measure` says which time it holds. A step is
    timed alone (one sample of one call, the slowest rank's), so the row's statistics are over
    steps, with the same spread and unstable flag as `run`'s rows."""
    stats = metrics.sample_stats([times_us])
    for per_rank in ("time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us",
                     "skew_share"):
        stats.pop(per_rank)  # the times are already the slowest rank's per step
    return result_row(
        config, world, stats, benchmark="ddp", collective="", algorithm="ddp", dtype="float32",
        size_bytes=size_bytes, count=size_bytes // 4, timing="per-step", samples=len(times_us),
        loops=1, warmup=config.settings.warmup, wrong=wrong,
        bandwidth_of="all_reduce" if measure == "comm" else None, measure=measure,
        bucket_mb=math.nan if bucket_mb is None else bucket_mb, accum=accum,
        bucket_sizes=";".join(map(str, bucket_bytes)) if bucket_bytes else "",
        allreduce_calls=math.nan if calls is None else calls,
        allreduce_bytes=math.nan if sent is None else sent)


def measure_world(config, world: World, on_row: Callable[[dict], None],
                  on_timeline: Callable[[list[dict]], None] = lambda rows: None) -> int:
    """Every DDP measurement on one (sub-)world (`config`: ddp's); rows go to `on_row`, the
    timeline of each bucket cap to `on_timeline`. Returns #wrong."""
    settings = config.settings
    bare = Trainer.make(settings, world)
    grad_bytes = param_count(bare.model) * DTYPE.itemsize
    wrong_total = 0
    for bucket_mb in settings.bucket_mbs:
        found = measure_bucket_cap(settings, world, bare, bucket_mb)
        gc.collect()  # free this cap's models (hooks make reference cycles) before the next
        times, layout = found["times"], found["layout"]
        wrong_total += found["wrong"]
        common = dict(size_bytes=grad_bytes, bucket_mb=bucket_mb)
        on_row(ddp_row(config, world, "compute", times["compute"], calls=0, sent=0, **common))
        on_row(ddp_row(config, world, "backward", times["backward"], **common))
        on_row(ddp_row(config, world, "ddp_no_comm", times["ddp_no_comm"], calls=0, sent=0, **common))
        for measure in ("comm", "step"):
            on_row(ddp_row(config, world, measure, times[measure], bucket_bytes=layout,
                           calls=len(layout), sent=sum(layout),
                           wrong=found["wrong"] if measure == "step" else 0, **common))
        # the CPU time AllReduce alone costs a rank: on CPU it competes with backward for cores;
        # compute's CPU time says how much CPU the rank gets (less than its wall time under a quota)
        on_row(ddp_row(config, world, "comm_cpu", times["comm_cpu"], bucket_bytes=layout,
                       calls=len(layout), sent=sum(layout), **common))
        on_row(ddp_row(config, world, "compute_cpu", times["compute_cpu"], calls=0, sent=0, **common))
        on_row(ddp_row(config, world, "no_overlap", times["no_overlap"], bucket_bytes=[grad_bytes],
                       calls=1, sent=grad_bytes, **common))
        on_timeline([dict(row, run_id=config.run_id) for row in found["timeline"]])
    for mode, (times, sent) in measure_accumulation(settings, world).items():
        on_row(ddp_row(config, world, f"accum_{mode}", times, size_bytes=grad_bytes,
                       accum=settings.accum, bucket_bytes=sent, calls=len(sent), sent=sum(sent)))
    return wrong_total
