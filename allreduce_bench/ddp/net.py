"""The synthetic model DDP trains: square Linear layers with ReLU between them, and its batches."""
from __future__ import annotations

from typing import cast

import torch
from torch import nn

from allreduce_bench.ddp.config import layer_width

DTYPE = torch.float32  # gradients DDP reduces: the model's own dtype


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
    width = cast(nn.Linear, model[0]).in_features
    generator = torch.Generator().manual_seed(1000 + 97 * rank + micro)
    x = torch.randn(batch_size, width, generator=generator)
    y = torch.randn(batch_size, width, generator=generator)
    return x.to(device), y.to(device)
