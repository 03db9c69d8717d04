"""Option types every command shares, so one option name means one thing everywhere and a bad
value is refused by click before anything runs (one line, exit 2)."""
from __future__ import annotations

import click

from allreduce_bench.core.config import DTYPES

DTYPE = click.Choice(list(DTYPES))
BACKEND = click.Choice(["auto", "gloo", "nccl"])
DEVICE = click.Choice(["cpu", "cuda"])
