"""The training steps timed: the bare model, the model inside DDP with a communication hook
that records what DDP sends and when, and the naive wait-then-AllReduce step DDP improves on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from allreduce_bench.core.measure.world import World
from allreduce_bench.ddp.config import DdpSettings
from allreduce_bench.ddp.net import build_model, synthetic_batch
from allreduce_bench.ddp.timeline import NO_TIMELINE, Timeline


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
        assert self.world is not None  # made with the world it reduces over
        # zero_grad(set_to_none=False) leaves every trainable parameter a gradient
        grads: list[torch.Tensor] = [p.grad for p in self._params]  # type: ignore[misc]
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
    kwargs: dict[str, Any] = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                  process_group=world.group.pg, **kwargs)
    state = HookState(world.group.pg)
    ddp.register_comm_hook(state, hook)
    return ddp, state


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
