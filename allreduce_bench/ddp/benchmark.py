"""DDP in practice, measured on one rank: bucketed overlap, no_sync accumulation, set_epoch.

Per world size and bucket cap the same synthetic model (a stack of linear layers) is timed
five ways:

* compute: the bare module, forward + backward + SGD step, no communication at all;
* ddp_no_comm: the module inside DDP with a hook that does not communicate: what DDP itself
  costs (filling its buckets and copying them back), for the model;
* step: the module inside `DistributedDataParallel(bucket_cap_mb=b)`, the same work, so DDP
  AllReduces gradient buckets during `loss.backward()`;
* comm: AllReduce alone of buffers shaped exactly like the buckets DDP sent in that step
  (sizes read by the communication hook, launched asynchronously in the same order, as the
  reducer does), so nothing is assumed about DDP's bucketing;
* no_overlap: the naive step DDP improves on: backward to the end, then one AllReduce of all
  gradients (flattened), then the SGD step.

The five are timed interleaved (each iteration runs each once, in turn), as are the two
accumulation modes, so drifting background load hits them alike.
Every DDP instance carries a communication hook that wraps DDP's own allreduce hook and records
the bytes it is handed and, while timing, when each bucket's AllReduce was launched and when it
completed (its future's callback): calls and bytes per (optimizer) step are counted, not
assumed, and the DDP and no-overlap steps leave a measured timeline (results/timeline.py).
Per iteration the slowest rank's time is kept, as in the allreduce benchmark's `measure`; the timeline is the
slowest rank's (largest median step).
"""
from __future__ import annotations

import datetime as _dt
import gc
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from allreduce_bench.core import metrics
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure import timing
from allreduce_bench.core.measure.rank import Benchmark, Session
from allreduce_bench.core.measure.world import World, end_phase, make_world
from allreduce_bench.core.results.store import start_meta_unless_launched
from allreduce_bench.ddp.config import DdpSettings
from allreduce_bench.ddp.stamps import stamps_for
from allreduce_bench.ddp.timeline_store import append_timeline

DTYPE = torch.float32  # gradients DDP reduces: the model's own dtype


# --- the synthetic model -------------------------------------------------------------------

def layer_width(params: int, layers: int) -> int:
    """Width w of `layers` square Linear layers (w*w weights + w biases each) closest to `params`."""
    per_layer = params / layers
    return max(1, round((math.sqrt(1 + 4 * per_layer) - 1) / 2))


def build_model(params: int, layers: int, device: torch.device, seed: int = 0) -> nn.Sequential:
    """Linear layers with ReLU between them; the same weights on every rank (same seed)."""
    width = layer_width(params, layers)
    torch.manual_seed(seed)
    blocks: list[nn.Module] = []
    for i in range(layers):
        blocks.append(nn.Linear(width, width))
        if i < layers - 1:
            blocks.append(nn.ReLU())
    return nn.Sequential(*blocks).to(device)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def synthetic_batch(model: nn.Sequential, batch_size: int, rank: int, device: torch.device,
                    micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, target) that differ per rank and micro-batch, so averaging gradients matters."""
    width = model[0].in_features
    generator = torch.Generator().manual_seed(1000 + 97 * rank + micro)
    x = torch.randn(batch_size, width, generator=generator)
    y = torch.randn(batch_size, width, generator=generator)
    return x.to(device), y.to(device)


# --- the timeline of one step ----------------------------------------------------------------

@dataclass
class AllReduceSpan:
    """One AllReduce inside a step: launched when DDP handed its bucket to the hook."""

    bucket: int
    nbytes: int
    launched: object
    completed: object = None


class Timeline:
    """Instants of the timed steps of one step body on this rank.

    Named instants per iteration: start, backward_start, backward_end (the last parameter's
    gradient accumulated: the backward computation is done), optimizer_start, end; and every
    AllReduce launched in the step with its completion. Nothing is kept outside timed
    iterations (`begin(None)`: warm-up and checks).
    """

    def __init__(self, stamps, iters: int):
        self.stamps = stamps
        self.iteration: int | None = None
        self.instants: list[dict] = [{} for _ in range(iters)]
        self.allreduces: list[list[AllReduceSpan]] = [[] for _ in range(iters)]

    def begin(self, iteration: int | None) -> None:
        self.iteration = iteration
        self.at("start")

    def at(self, name: str) -> None:
        if self.iteration is not None:
            self.instants[self.iteration][name] = self.stamps.now()

    def launched(self, bucket: int, nbytes: int) -> AllReduceSpan | None:
        if self.iteration is None:
            return None
        span = AllReduceSpan(bucket, nbytes, self.stamps.now())
        self.allreduces[self.iteration].append(span)
        return span

    def completed(self, span: AllReduceSpan | None) -> None:
        if span is not None:
            span.completed = self.stamps.now()

    def between(self, i: int, first: str, last: str) -> float:
        at = self.instants[i]
        return self.stamps.us(at[first], at[last])

    def spans(self, i: int) -> list[dict]:
        """Iteration i as spans relative to its start (call after the device synchronized)."""
        at, us = self.instants[i], self.stamps.us
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
        super().__init__(None, 0)

    def begin(self, iteration: int | None) -> None:
        self.iteration = None


NO_TIMELINE = _NoTimeline()


# --- the steps -------------------------------------------------------------------------------

class Trainer:
    """A model, its SGD optimizer and this rank's batch: one training step on demand.

    Every parameter carries a post-accumulate-grad hook, so the timeline knows when backward
    has computed the last gradient, whether or not DDP then still waits for its AllReduces.
    """

    def __init__(self, model: nn.Module, batch, world: World | None = None):
        self.model, self.batch, self.world = model, batch, world
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        self.timeline: Timeline = NO_TIMELINE
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._ready = 0
        for p in self._params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    @classmethod
    def make(cls, settings: DdpSettings, world: World, wrap=None) -> Trainer:
        device = world.device.torch_device
        module = build_model(settings.params, settings.layers, device)
        batch = synthetic_batch(module, settings.batch_size, world.rank, device)
        return cls(wrap(module) if wrap else module, batch, world)

    def _grad_ready(self, param) -> None:
        self._ready += 1
        if self._ready == len(self._params):
            self.timeline.at("backward_end")

    def step(self, iteration: int | None = None) -> None:
        """zero_grad, forward, MSE loss, backward, `reduce` (nothing here), SGD step."""
        timeline = self.timeline
        timeline.begin(iteration)
        self.optimizer.zero_grad(set_to_none=False)
        x, y = self.batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self._ready = 0
        timeline.at("backward_start")
        loss.backward()
        self.reduce(timeline)
        timeline.at("optimizer_start")
        self.optimizer.step()
        timeline.at("end")
        timeline.iteration = None

    def reduce(self, timeline: Timeline) -> None:
        """What happens between backward and the optimizer step: nothing (DDP reduced inside
        backward; the bare model has no peers)."""


class NoOverlapTrainer(Trainer):
    """The naive data-parallel step DDP improves on: backward to the end, then ONE AllReduce of
    all gradients (flattened), then the optimizer step; the network idles during backward and
    the computation during the AllReduce.

    The gradients are flattened into one buffer and copied back after the AllReduce, as DDP
    (by default, gradient_as_bucket_view=False) copies them into its buckets and back, so the
    two steps do the same work and differ in overlap alone. Values: the average over ranks,
    as DDP's (divide, then sum).
    """

    def reduce(self, timeline: Timeline) -> None:
        grads = [p.grad for p in self._params]
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        span = timeline.launched(0, flat.numel() * flat.element_size())
        flat.div_(self.world.size)
        dist.all_reduce(flat, group=self.world.group.pg)
        timeline.completed(span)  # on CUDA: an event behind the AllReduce on the current stream
        for grad, reduced in zip(grads, flat.split([grad.numel() for grad in grads])):
            grad.copy_(reduced.view_as(grad))


# --- what DDP sends, and when ----------------------------------------------------------------

@dataclass
class HookState:
    """State of the recording hook: the bytes of each AllReduce DDP launched, in launch order,
    and (while a timeline records) when each was launched and completed."""

    process_group: dist.ProcessGroup | None
    bucket_bytes: list[int] = field(default_factory=list)
    timeline: Timeline = NO_TIMELINE

    def reset(self) -> None:
        self.bucket_bytes = []


def recording_allreduce_hook(state, bucket):
    """DDP's own allreduce hook, after noting the size of the bucket (a dist.GradBucket) it is
    given and stamping the launch; its future's callback stamps the completion. No
    annotations: DDP checks them, and `from __future__ import annotations` would turn them
    into strings."""
    buffer = bucket.buffer()
    nbytes = buffer.numel() * buffer.element_size()
    state.bucket_bytes.append(nbytes)
    timeline = state.timeline
    span = timeline.launched(bucket.index(), nbytes)
    future = allreduce_hook(state.process_group, bucket)
    if span is None:
        return future

    def completed(fut):
        timeline.completed(span)
        return fut.value()

    return future.then(completed)



def local_hook(state, bucket):
    """A communication hook that does not communicate: the bucket as it is, at once. DDP
    with it does everything but the AllReduce (buckets filled and copied back), so its step
    against the bare model's is what DDP itself costs. Gradients stay local: timing only."""
    buffer = bucket.buffer()
    future = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
    future.set_result(buffer)
    return future


def wrap_ddp(model: nn.Module, world: World, bucket_mb: float | None,
             hook=recording_allreduce_hook) -> tuple[DistributedDataParallel, HookState]:
    """DDP over the world's group with the recording hook (or `hook`); bucket_mb None is DDP's
    default (25)."""
    device = world.device.torch_device
    kwargs = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                  process_group=world.group.pg, **kwargs)
    state = HookState(world.group.pg)
    ddp.register_comm_hook(state, hook)
    return ddp, state


# --- timing ----------------------------------------------------------------------------------

def slowest(times_us: list[float], world: World) -> list[float]:
    """Per iteration, the slowest rank's time: the step is done when every rank is."""
    return timing.slowest(times_us, world.group.pg, world.device)


def timed(world: World, iters: int, warmup: int,
          bodies: dict[str, Callable[[int | None], None]]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time several step bodies interleaved: each iteration runs every body once, in turn.

    Interleaving means a change in background load (a shared machine) hits every measurement
    alike, so differences between them (step - compute) stay meaningful. Each body is called
    with the timed iteration's index (None in the `warmup` untimed rounds first), so a body
    with a timeline records that iteration. The CPU time this process spends in each body (all
    its threads, gloo's included: time.process_time) is kept beside it as '<name>_cpu'.
    Returns (per-iteration times in us, the slowest rank's each; this rank's own times).
    """
    device = world.device
    for _ in range(warmup):
        for body in bodies.values():
            body(None)
    timers = {name: device.timer(iters) for name in bodies}
    cpu_ns = {name: [0] * iters for name in bodies}
    for i in range(iters):
        for name, body in bodies.items():
            device.align(world.group.pg)  # as every sample of measure/timing.py starts
            cpu_start = time.process_time_ns()
            timers[name].start(i)
            body(i)
            timers[name].stop(i)
            cpu_ns[name][i] = time.process_time_ns() - cpu_start
    device.synchronize()
    own = {name: timer.times_us() for name, timer in timers.items()}
    own.update({f"{name}_cpu": [ns / 1e3 for ns in cpu] for name, cpu in cpu_ns.items()})
    return {name: slowest(times, world) for name, times in own.items()}, own


def slowest_rank(own_times_us: list[float], world: World) -> int:
    """The rank (in the world's group) whose median step time is the largest."""
    median = torch.tensor([sorted(own_times_us)[len(own_times_us) // 2]], dtype=torch.float64,
                          device=world.device.torch_device)
    medians = [torch.zeros_like(median) for _ in range(world.size)]
    dist.all_gather(medians, median, group=world.group.pg)
    return int(torch.cat(medians).argmax().item())


def slowest_timeline(timeline: Timeline, own_times_us: list[float], world: World) -> tuple[int, list[dict]]:
    """(slowest rank, its timeline's spans for every timed iteration), on every rank."""
    rank = slowest_rank(own_times_us, world)
    mine = [row for i in range(len(timeline.instants)) for row in timeline.spans(i)]
    gathered: list = [None] * world.size
    dist.all_gather_object(gathered, mine, group=world.group.pg)
    return rank, gathered[rank]


def comm_alone(world: World, bucket_bytes: list[int]) -> Callable:
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
    stamps = stamps_for(world.device)
    for body in (bare, trainer, baseline):
        body.timeline = Timeline(stamps, settings.iters)
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
    scale = expected.abs().max().clamp_min(1e-30)
    bad = ~torch.isclose(got, expected, rtol=1e-4, atol=1e-6 * float(scale))
    wrong = torch.tensor([int(bad.sum())], dtype=torch.int64, device=got.device)
    dist.all_reduce(wrong, group=world.group.pg)
    return int(wrong.item())


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


def ddp_trainer(settings: DdpSettings, world: World, bucket_mb: float | None,
                hook=recording_allreduce_hook) -> tuple[Trainer, HookState]:
    """A Trainer whose model is wrapped in DDP with the recording hook (or `hook`), and that
    hook's state."""
    states = []

    def wrap(module):
        ddp, state = wrap_ddp(module, world, bucket_mb, hook)
        states.append(state)
        return ddp

    return Trainer.make(settings, world, wrap), states[0]


def _accumulation_step(trainer: Trainer, counter: HookState, batches, no_sync: bool) -> Callable:
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

def ddp_row(base: dict, world: World, measure: str, times_us: list[float], *, size_bytes: int,
            bucket_mb: float | None = None, accum: int = 1, bucket_bytes: list[int] | None = None,
            calls: int | None = None, sent: int | None = None, wrong: int = 0) -> dict:
    """One results row with benchmark = ddp; `measure` says which time it holds. A step is
    timed alone (one sample of one call, the slowest rank's), so the row's statistics are over
    steps, with the same spread and unstable flag as `run`'s rows."""
    stats = metrics.sample_stats([times_us])
    for per_rank in ("time_us_rank_mean", "late_rank", "late_rank_share", "late_rank_lag_us",
                     "skew_share"):
        stats.pop(per_rank)  # the times are already the slowest rank's per step
    comm = measure == "comm"
    return {
        **base,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "benchmark": "ddp", "algorithm": "ddp", "device": world.device.kind, "dtype": "float32",
        "world_size": world.size, "nodes": world.nodes, "ranks_per_node": world.ranks_per_node,
        "size_bytes": size_bytes, "count": size_bytes // 4,
        "timing": "per-step", "samples": len(times_us), "loops": 1, **stats,
        "algbw_GBps": metrics.algbw_GBps(size_bytes, stats["time_us_median"]) if comm else math.nan,
        "busbw_GBps": (metrics.busbw_GBps(size_bytes, stats["time_us_median"], world.size)
                       if comm else math.nan),
        "wrong": wrong, "measure": measure,
        # set by `emulate` in every host's environment, as for `run` rows
        "emulation": os.environ.get("ALLREDUCE_BENCH_EMULATION", ""),
        "bucket_mb": math.nan if bucket_mb is None else bucket_mb, "accum": accum,
        "bucket_sizes": ";".join(map(str, bucket_bytes)) if bucket_bytes else "",
        "allreduce_calls": math.nan if calls is None else calls,
        "allreduce_bytes": math.nan if sent is None else sent,
    }


def measure_world(settings: DdpSettings, world: World, base: dict,
                  on_row: Callable[[dict], None],
                  on_timeline: Callable[[list[dict]], None] = lambda rows: None) -> int:
    """Every DDP measurement on one (sub-)world; rows go to `on_row`, the timeline of each
    bucket cap to `on_timeline`. Returns #wrong."""
    bare = Trainer.make(settings, world)
    grad_bytes = param_count(bare.model) * DTYPE.itemsize
    wrong_total = 0
    for bucket_mb in settings.bucket_mbs:
        found = measure_bucket_cap(settings, world, bare, bucket_mb)
        gc.collect()  # free this cap's models (hooks make reference cycles) before the next
        times, layout = found["times"], found["layout"]
        wrong_total += found["wrong"]
        common = dict(size_bytes=grad_bytes, bucket_mb=bucket_mb)
        on_row(ddp_row(base, world, "compute", times["compute"], calls=0, sent=0, **common))
        on_row(ddp_row(base, world, "backward", times["backward"], **common))
        on_row(ddp_row(base, world, "ddp_no_comm", times["ddp_no_comm"], calls=0, sent=0, **common))
        for measure in ("comm", "step"):
            on_row(ddp_row(base, world, measure, times[measure], bucket_bytes=layout,
                           calls=len(layout), sent=sum(layout),
                           wrong=found["wrong"] if measure == "step" else 0, **common))
        # the CPU time AllReduce alone costs a rank: on CPU it competes with backward for cores
        on_row(ddp_row(base, world, "comm_cpu", times["comm_cpu"], bucket_bytes=layout,
                       calls=len(layout), sent=sum(layout), **common))
        on_row(ddp_row(base, world, "no_overlap", times["no_overlap"], bucket_bytes=[grad_bytes],
                       calls=1, sent=grad_bytes, **common))
        on_timeline([dict(row, run_id=base.get("run_id", "")) for row in found["timeline"]])
    for mode, (times, sent) in measure_accumulation(settings, world).items():
        on_row(ddp_row(base, world, f"accum_{mode}", times, size_bytes=grad_bytes,
                       accum=settings.accum, bucket_bytes=sent, calls=len(sent), sent=sum(sent)))
    return wrong_total


# --- set_epoch -------------------------------------------------------------------------------

def set_epoch_check(dataset_len: int, world_size: int, seed: int = 0) -> dict:
    """Index order of epochs 0 and 1 from a shuffling DistributedSampler, per rank, without and
    with `set_epoch`. Without it both epochs repeat the same order; with it they differ.

    Needs no process group: the sampler is given num_replicas and rank explicitly.
    """
    dataset = range(dataset_len)
    orders: dict[str, list[list[list[int]]]] = {"without_set_epoch": [], "with_set_epoch": []}
    for rank in range(world_size):
        for mode, orders_of in orders.items():
            sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                         shuffle=True, seed=seed)
            epochs = []
            for epoch in (0, 1):
                if mode == "with_set_epoch":
                    sampler.set_epoch(epoch)
                epochs.append(list(iter(sampler)))
            orders_of.append(epochs)
    report: dict = {"dataset_len": dataset_len, "world_size": world_size, "seed": seed}
    for mode, per_rank in orders.items():
        report[mode] = {
            "rank0_epoch0": per_rank[0][0], "rank0_epoch1": per_rank[0][1],
            "epochs_identical": all(e0 == e1 for e0, e1 in per_rank),
            "each_epoch_covers_dataset": all(
                set().union(*(per_rank[r][e] for r in range(world_size))) == set(dataset)
                for e in (0, 1)),
        }
    return report


# --- the per-rank entry point ----------------------------------------------------------------

def measure_ddp(session: Session) -> int:
    """Every DDP measurement of the run on this rank, one phase per world size."""
    config, env, device = session.config, session.env, session.device
    base = {"run_id": config.run_id, "tag": config.tag, "backend": config.backend,
            "warmup": config.settings.warmup}

    def show(row: dict) -> None:
        bucket = "" if row["bucket_mb"] != row["bucket_mb"] else f" bucket {row['bucket_mb']:g} MiB"
        accum = f" K={row['accum']}" if row["accum"] > 1 else ""
        print(f"  N={row['world_size']} {row['measure']:<13}{bucket}{accum}: "
              f"{row['time_us_median'] / 1e3:9.1f} ms", file=sys.stderr, flush=True)

    session.show = show
    wrong = 0
    rpn = config.ranks_per_node or env.local_world_size
    for phase, world_size in enumerate(config.world_sizes, start=1):
        session.progress.at(phase, 1, f"ddp, world size {world_size}", tuple(range(env.world_size)))
        session.bind_phase(world_size)
        world = make_world(world_size, rpn, device)
        if world is not None:
            wrong += measure_world(config.settings, world, base, session.record,
                                   lambda rows: append_timeline(config.out_dir, rows)
                                   if session.lead else None)
        end_phase(world, f"ddp-{world_size}", device)
    return wrong


SET_EPOCH_SAMPLES = 16


def ddp_meta(config) -> dict:
    """host_meta plus the model's settings."""
    width = layer_width(config.settings.params, config.settings.layers)
    meta = run_meta.host_meta(config)
    meta["ddp"] = {**asdict(config.settings), "width": width,
                   "params_actual": config.settings.layers * (width * width + width)}
    return meta


def prepare(config) -> None:
    start_meta_unless_launched(config, ddp_meta)


BENCHMARK = Benchmark("ddp", ddp_meta, measure_ddp, prepare=prepare)
