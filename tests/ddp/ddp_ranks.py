"""Rank functions for test_ddp.py (importable by the spawned ranks)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from distributed import RANK_TIMEOUT_S
from torch import nn

from allreduce_bench.core.measure.device import Device
from allreduce_bench.core.measure.world import make_world
from allreduce_bench.ddp.config import DdpSettings
from allreduce_bench.ddp.measurements import check_ddp_gradients, measure_accumulation, measure_bucket_cap
from allreduce_bench.ddp.net import build_model, param_count, synthetic_batch
from allreduce_bench.ddp.trainer import NoOverlapTrainer, Trainer, wrap_ddp


def _world():
    return make_world(dist.get_world_size(), dist.get_world_size(), Device(), RANK_TIMEOUT_S)


def hook_counts(params: int, layers: int, accum: int, bucket_mb: float) -> dict:
    """What the counting hook saw: per optimizer step with and without no_sync, and per DDP step."""
    world = _world()
    settings = DdpSettings(params=params, layers=layers, batch_size=4, bucket_mbs=(bucket_mb,),
                           accum=accum, iters=2, warmup=0)
    accumulation = measure_accumulation(settings, world, bucket_mb)
    sync, nosync = accumulation["sync"][1], accumulation["no_sync"][1]
    found = measure_bucket_cap(settings, world, Trainer.make(settings, world), bucket_mb)
    layout, wrong = found["layout"], found["wrong"]
    grad_bytes = 4 * param_count(build_model(params, layers, torch.device("cpu")))
    return dict(sync_calls=len(sync), sync_bytes=sum(sync), nosync_calls=len(nosync),
                nosync_bytes=sum(nosync), layout=layout, wrong=wrong, grad_bytes=grad_bytes)


def gradients_against_hand_average(params: int, layers: int, bucket_mb: float) -> dict:
    """DDP's gradients after one backward vs the mean of every rank's local gradient.

    The local gradients come from a bare copy of the model (no DDP at all) and are gathered
    with all_gather, then averaged here by hand.
    """
    world = _world()
    device = torch.device("cpu")
    bare = build_model(params, layers, device)
    batch = synthetic_batch(bare, 4, world.rank, device)
    nn.functional.mse_loss(bare(batch[0]), batch[1]).backward()
    local = torch.cat([p.grad.reshape(-1) for p in bare.parameters()])
    gathered = [torch.empty_like(local) for _ in range(world.size)]
    dist.all_gather(gathered, local)
    by_hand = torch.stack(gathered).mean(dim=0)

    ddp, _ = wrap_ddp(build_model(params, layers, device), world, bucket_mb)
    nn.functional.mse_loss(ddp(batch[0]), batch[1]).backward()
    got = torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])
    return dict(max_diff=float((got - by_hand).abs().max()),
                scale=float(by_hand.abs().max()),
                local_differs=bool(not torch.allclose(local, by_hand)),
                check_wrong=check_ddp_gradients(ddp, batch, world))


def timeline_of_a_tiny_model(params: int, layers: int, bucket_mb: float, iters: int) -> dict:
    """measure_bucket_cap's timeline rows (DDP step and no-overlap step, slowest rank) and the
    bucket layout the hook saw, with the gradient size to check them against."""
    world = _world()
    settings = DdpSettings(params=params, layers=layers, batch_size=4, bucket_mbs=(bucket_mb,),
                           accum=1, iters=iters, warmup=0)
    found = measure_bucket_cap(settings, world, Trainer.make(settings, world), bucket_mb)
    grad_bytes = 4 * param_count(build_model(params, layers, torch.device("cpu")))
    return dict(timeline=found["timeline"], layout=found["layout"], grad_bytes=grad_bytes,
                times=found["times"])


def baseline_against_ddp(params: int, layers: int, bucket_mb: float) -> dict:
    """Gradients after the wait-then-AllReduce step's reduction vs DDP's, same data, same
    weights; and that one optimizer step leaves the two models with the same weights."""
    world = _world()
    device = torch.device("cpu")
    ddp, _ = wrap_ddp(build_model(params, layers, device), world, bucket_mb)
    batch = synthetic_batch(ddp.module, 4, world.rank, device)
    ddp_trainer = Trainer(ddp, batch, world)
    baseline = NoOverlapTrainer(build_model(params, layers, device), batch, world)
    ddp_trainer.step()
    baseline.step()
    grads = [(a.grad, b.grad) for a, b in zip(ddp.parameters(), baseline.model.parameters())]
    weights = [(a, b) for a, b in zip(ddp.parameters(), baseline.model.parameters())]
    return dict(grad_max_diff=max(float((a - b).abs().max()) for a, b in grads),
                grad_scale=max(float(a.abs().max()) for a, _ in grads),
                weight_max_diff=max(float((a - b).abs().max()) for a, b in weights))


def all_checks(accum: int) -> dict:
    """Every distributed check of test_ddp.py in one world, to keep process launches few.

    one_bucket: a model whose gradients fit one bucket, so calls per optimizer step are exactly
    K (sync every micro-batch) and 1 (no_sync). many_buckets: 64 KiB caps over ~160 KB of
    gradients, so DDP sends several buckets whose sizes must add up to the gradient size.
    """
    return dict(one_bucket=hook_counts(2_000, 2, accum, 25.0),
                many_buckets=hook_counts(40_000, 4, accum, 1 / 16),
                gradients=gradients_against_hand_average(40_000, 4, 1 / 16),
                timeline=timeline_of_a_tiny_model(40_000, 4, 1 / 16, 3),
                baseline=baseline_against_ddp(40_000, 4, 1 / 16))
