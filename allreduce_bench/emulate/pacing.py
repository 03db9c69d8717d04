"""`emulate --benchmarks ddp`: the link paced to DDP's backward pass, so the overlap shows."""
from __future__ import annotations

# `emulate --benchmarks ddp` without these options: a model whose 96 MB of gradients DDP's
# default 25 MiB cap cuts into 4 buckets (24 layers of 4 MB), with a batch that makes backward
# take a few hundred ms on a small CPU machine; with --inter-bandwidth auto the link is then set
# from a backward pass measured here, so that the AllReduce takes COMM_PER_BACKWARD x as long.
# Equal is the middle of the range where the overlap shows: by the bucket-pipeline model
# (model/step.py), background load that halves or doubles the compute between this probe and
# the run should still leave about half of the AllReduce or more hidden.
DDP_DEFAULTS = {"--params": "24M", "--layers": "24", "--batch-size": "256"}
COMM_PER_BACKWARD = 1.0
DDP_RANKS_PER_NODE = 1  # one rank per host: the CPU cores compute, the link communicates


def ddp_rate_bps(settings, nodes: int, ranks_per_node: int, backward_s: float) -> float:
    """The uplink rate at which ddp's AllReduce takes COMM_PER_BACKWARD x `backward_s`: a ring
    over N ranks sends 2(N-1)/N of the gradients through each host's uplink."""
    from allreduce_bench.ddp.net import layer_width  # torch: only when emulating ddp
    width = layer_width(settings.params, settings.layers)
    gradient_bytes = 4 * settings.layers * (width * width + width)
    world = nodes * ranks_per_node
    return 2 * (world - 1) / world * gradient_bytes * 8 / (COMM_PER_BACKWARD * backward_s)
