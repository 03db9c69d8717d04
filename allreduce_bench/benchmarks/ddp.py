"""DDP in practice, measured on one rank: bucketed overlap, no_sync accumulation, set_epoch.

Per world size the same synthetic model (a stack of linear layers) is timed three ways:

* compute: the bare module, forward + backward + SGD step, no communication at all;
* step: the module inside `DistributedDataParallel(bucket_cap_mb=b)`, the same work, so DDP
  AllReduces gradient buckets during `loss.backward()`;
* comm: AllReduce alone of buffers shaped exactly like the buckets DDP sent in that step
  (sizes read by the communication hook, launched asynchronously in the same order, as the
  reducer does), so nothing is assumed about DDP's bucketing.

The three are timed interleaved (each iteration runs each once, in turn), as are the two
accumulation modes, so drifting background load hits them alike.
Every DDP instance carries a communication hook that wraps DDP's own allreduce hook and counts
the calls and bytes it is handed: calls and bytes per (optimizer) step are counted, not assumed.
Per iteration the slowest rank's time is kept, as in `bench.measure`.
"""
from __future__ import annotations

import datetime as _dt
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from allreduce_bench import metrics
from allreduce_bench.benchmarks.allreduce import slowest_per_iteration
from allreduce_bench.config.ddp import DdpSettings
from allreduce_bench.measure import meta as run_meta
from allreduce_bench.measure.rank import Benchmark, Session, rank_main
from allreduce_bench.measure.world import World, end_phase, make_world

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


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch, on_backward=None) -> None:
    """zero_grad, forward, MSE loss, backward (timed by `on_backward` if given), SGD step."""
    optimizer.zero_grad(set_to_none=False)
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    if on_backward:
        on_backward(0)
    loss.backward()
    if on_backward:
        on_backward(1)
    optimizer.step()


# --- counting what DDP sends ---------------------------------------------------------------

@dataclass
class HookCounter:
    """State of the counting hook: one entry per AllReduce DDP launched, in launch order."""

    process_group: dist.ProcessGroup | None
    bucket_bytes: list[int] = field(default_factory=list)

    def reset(self) -> None:
        self.bucket_bytes = []


def counting_allreduce_hook(state, bucket):
    """DDP's own allreduce hook, after noting the size of the bucket (a dist.GradBucket) it is
    given. No annotations: DDP checks them, and `from __future__ import annotations` would
    turn them into strings."""
    buffer = bucket.buffer()
    state.bucket_bytes.append(buffer.numel() * buffer.element_size())
    return allreduce_hook(state.process_group, bucket)


def wrap_ddp(model: nn.Module, world: World, bucket_mb: float | None) -> tuple[DistributedDataParallel, HookCounter]:
    """DDP over the world's group with the counting hook; bucket_mb None is DDP's default (25)."""
    device = world.device.torch_device
    kwargs = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                  process_group=world.group.pg, **kwargs)
    counter = HookCounter(world.group.pg)
    ddp.register_comm_hook(counter, counting_allreduce_hook)
    return ddp, counter


# --- timing ----------------------------------------------------------------------------------

def slowest(times_us: list[float], world: World) -> list[float]:
    """Per iteration, the slowest rank's time: the step is done when every rank is."""
    return slowest_per_iteration(times_us, world.group.pg, world.device)


def timed(world: World, iters: int, warmup: int, bodies: dict[str, Callable],
          backward_of: str | None = None) -> dict[str, list[float]]:
    """Time several step bodies interleaved: each iteration runs every body once, in turn.

    Interleaving means a change in background load (a shared machine) hits every measurement
    alike, so differences between them (step - compute) stay meaningful. Each body is called
    with `mark`: the body named `backward_of` brackets its backward pass with mark(0), mark(1)
    (reported as 'backward'); the others get None. `warmup` untimed rounds come first.
    Returns per-iteration times in us, the slowest rank's each.
    """
    device = world.device
    for _ in range(warmup):
        for body in bodies.values():
            body(None)
    timers = {name: device.timer(iters) for name in bodies}
    inner = device.timer(iters) if backward_of else None
    for i in range(iters):
        for name, body in bodies.items():
            mark = None
            if name == backward_of:
                mark = lambda edge, i=i: inner.start(i) if edge == 0 else inner.stop(i)  # noqa: E731
            device.barrier(world.group.pg)
            timers[name].start(i)
            body(mark)
            timers[name].stop(i)
    device.synchronize()
    times = {name: slowest(timer.times_us(), world) for name, timer in timers.items()}
    if inner:
        times["backward"] = slowest(inner.times_us(), world)
    return times


@dataclass
class Trainer:
    """A model, its SGD optimizer and this rank's batch: one training step on demand."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    batch: tuple[torch.Tensor, torch.Tensor]

    @classmethod
    def make(cls, settings: DdpSettings, world: World, wrap=None) -> Trainer:
        device = world.device.torch_device
        module = build_model(settings.params, settings.layers, device)
        batch = synthetic_batch(module, settings.batch_size, world.rank, device)
        model = wrap(module) if wrap else module
        return cls(model, torch.optim.SGD(model.parameters(), lr=1e-3), batch)

    def step(self, mark=None) -> None:
        train_step(self.model, self.optimizer, self.batch, mark)


def comm_alone(world: World, bucket_bytes: list[int]) -> Callable:
    """AllReduce of buffers the size of DDP's buckets, launched asynchronously in DDP's order
    (as its reducer does when buckets become ready), then waited for."""
    device = world.device.torch_device
    itemsize = torch.empty(0, dtype=DTYPE).element_size()
    buffers = [torch.randn(n // itemsize).to(device) for n in bucket_bytes]

    def body(mark=None):
        works = []
        for buffer in buffers:
            buffer.div_(world.size)  # DDP's hook divides before reducing; keeps values bounded
            works.append(dist.all_reduce(buffer, group=world.group.pg, async_op=True))
        for work in works:
            work.wait()
    return body


def measure_bucket_cap(settings: DdpSettings, world: World, bare: Trainer, bucket_mb: float) -> dict:
    """Compute alone, comm alone and the DDP step at one bucket cap, interleaved.

    Two untimed DDP steps first: DDP rebuilds its buckets in gradient-ready order after the
    first, so from the second on the hook sees the layout every later step uses.
    Returns the times per measure, the bucket sizes of the last DDP step and #wrong gradients.
    """
    trainer, counter = ddp_trainer(settings, world, bucket_mb)
    for _ in range(2):
        counter.reset()
        trainer.step()
    comm = comm_alone(world, list(counter.bucket_bytes))

    def ddp_step(mark=None):
        counter.reset()  # so what is left after the loop is one step's worth
        trainer.step(mark)

    times = timed(world, settings.iters, settings.warmup,
                  {"compute": bare.step, "comm": comm, "step": ddp_step}, backward_of="compute")
    layout = list(counter.bucket_bytes)
    return dict(times=times, layout=layout,
                wrong=check_ddp_gradients(trainer.model, trainer.batch, world))


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
    times = timed(world, settings.iters, settings.warmup, bodies)
    # each body resets its counter first, so what is left is the last optimizer step's
    return {mode: (times[mode], list(counter.bucket_bytes)) for mode, counter in counters.items()}


def ddp_trainer(settings: DdpSettings, world: World, bucket_mb: float | None) -> tuple[Trainer, HookCounter]:
    """A Trainer whose model is wrapped in DDP with the counting hook, and that hook's counter."""
    counters = []

    def wrap(module):
        ddp, counter = wrap_ddp(module, world, bucket_mb)
        counters.append(counter)
        return ddp

    return Trainer.make(settings, world, wrap), counters[0]


def _accumulation_step(trainer: Trainer, counter: HookCounter, batches, no_sync: bool) -> Callable:
    ddp = trainer.model

    def body(mark=None):
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
    """One results row with benchmark = ddp; `measure` says which time it holds."""
    stats = metrics.time_stats(times_us)
    comm = measure == "comm"
    return {
        **base,
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "benchmark": "ddp", "algorithm": "ddp", "device": world.device.kind, "dtype": "float32",
        "world_size": world.size, "nodes": world.nodes, "ranks_per_node": world.ranks_per_node,
        "size_bytes": size_bytes, "count": size_bytes // 4, **stats,
        "algbw_GBps": metrics.algbw_GBps(size_bytes, stats["time_us_median"]) if comm else math.nan,
        "busbw_GBps": (metrics.busbw_GBps(size_bytes, stats["time_us_median"], world.size)
                       if comm else math.nan),
        "wrong": wrong, "measure": measure,
        "bucket_mb": math.nan if bucket_mb is None else bucket_mb, "accum": accum,
        "bucket_sizes": ";".join(map(str, bucket_bytes)) if bucket_bytes else "",
        "allreduce_calls": math.nan if calls is None else calls,
        "allreduce_bytes": math.nan if sent is None else sent,
    }


def measure_world(settings: DdpSettings, world: World, base: dict,
                  on_row: Callable[[dict], None]) -> int:
    """Every DDP measurement on one (sub-)world; rows go to `on_row`. Returns #wrong."""
    bare = Trainer.make(settings, world)
    grad_bytes = param_count(bare.model) * DTYPE.itemsize
    wrong_total = 0
    for bucket_mb in settings.bucket_mbs:
        found = measure_bucket_cap(settings, world, bare, bucket_mb)
        times, layout = found["times"], found["layout"]
        wrong_total += found["wrong"]
        common = dict(size_bytes=grad_bytes, bucket_mb=bucket_mb)
        on_row(ddp_row(base, world, "compute", times["compute"], calls=0, sent=0, **common))
        on_row(ddp_row(base, world, "backward", times["backward"], **common))
        for measure in ("comm", "step"):
            on_row(ddp_row(base, world, measure, times[measure], bucket_bytes=layout,
                           calls=len(layout), sent=sum(layout),
                           wrong=found["wrong"] if measure == "step" else 0, **common))
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
            "iters": config.settings.iters, "warmup": config.settings.warmup}

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
        world = make_world(world_size, rpn, device)
        if world is not None:
            wrong += measure_world(config.settings, world, base, session.record)
        end_phase(world, f"ddp-{world_size}", device)
    return wrong


SET_EPOCH_SAMPLES = 16


def ddp_meta(config) -> dict:
    """host_meta plus the model's settings and the set_epoch check for every world size."""


    width = layer_width(config.settings.params, config.settings.layers)
    meta = run_meta.host_meta(config)
    meta["ddp"] = {**asdict(config.settings), "width": width,
                   "params_actual": config.settings.layers * (width * width + width)}
    meta["set_epoch_check"] = [set_epoch_check(SET_EPOCH_SAMPLES, k) for k in config.world_sizes]
    return meta



BENCHMARK = Benchmark("ddp", ddp_meta, measure_ddp)


def ddp_rank_main(config, env=None) -> int:
    """The per-rank entry point of `ddp` (any launcher); returns #wrong gradients (rank 0)."""
    return rank_main(config, BENCHMARK, env)
