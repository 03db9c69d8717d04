"""The training steps timed: the bare model, the model in DDP with a hook recording what DDP sends and
when, and the naive wait-then-AllReduce step DDP improves on."""
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
    """A model, its SGD optimizer and this rank's batch: one training step on demand; a hook on every
    parameter tells the timeline when backward computed the last gradient, DDP's AllReduces aside."""

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
        """Between backward and the optimizer step: nothing (DDP reduced inside backward)."""


class NoOverlapTrainer(Trainer):
    """The naive step DDP improves on: backward to the end, then ONE AllReduce of all gradients copied into
    one buffer and back, as DDP copies them into its buckets, so the two differ in overlap alone."""

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


@dataclass
class HookState:
    """The recording hook's state: the bytes of each AllReduce DDP launched, in order, and its timeline."""

    process_group: dist.ProcessGroup | None
    bucket_bytes: list[int] = field(default_factory=list)
    timeline: Timeline = NO_TIMELINE

    def reset(self) -> None:
        self.bucket_bytes = []


def recording_allreduce_hook(state, bucket):
    """DDP's own allreduce hook, noting the bucket's size and stamping launch and completion. No
    annotations: DDP checks them, and `from __future__ import annotations` makes them strings."""
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
    """A hook that does not communicate: DDP with it does all but the AllReduce, so it times DDP's own cost."""
    buffer = bucket.buffer()
    future = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
    future.set_result(buffer)
    return future


def wrap_ddp(model: nn.Module, world: World, bucket_mb: float | None,
             hook=recording_allreduce_hook) -> tuple[DistributedDataParallel, HookState]:
    """DDP over the world's group with the recording hook (or `hook`); bucket_mb None: DDP's default."""
    device = world.device.torch_device
    kwargs: dict[str, Any] = {} if bucket_mb is None else {"bucket_cap_mb": bucket_mb}
    ddp = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                  process_group=world.group.pg, **kwargs)
    state = HookState(world.group.pg)
    ddp.register_comm_hook(state, hook)
    return ddp, state


def ddp_trainer(settings: DdpSettings, world: World, bucket_mb: float | None,
                hook=recording_allreduce_hook) -> tuple[Trainer, HookState]:
    """A Trainer whose model is wrapped in DDP with the recording hook (or `hook`), and the hook's state."""
    states = []

    def wrap(module):
        ddp, state = wrap_ddp(module, world, bucket_mb, hook)
        states.append(state)
        return ddp

    return Trainer.make(settings, world, wrap), states[0]
