"""Option types every command shares: a bad value is refused by click before anything runs."""
from __future__ import annotations

import click

from allreduce_bench.core.config import DTYPES

DTYPE = click.Choice(list(DTYPES))
BACKEND = click.Choice(["auto", "gloo", "nccl"])
DEVICE = click.Choice(["cpu", "cuda"])
