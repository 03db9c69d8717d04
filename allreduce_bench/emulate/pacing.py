"""`emulate --benchmarks ddp`: the link paced to DDP's backward pass, so the overlap shows."""
from __future__ import annotations

# With --inter-bandwidth auto the link is set from a backward pass measured here (of ddp's
# model, its defaults for emulate in ddp/config.py), so that the AllReduce takes
# COMM_PER_BACKWARD x as long. Equal is the middle of the range where the overlap shows: by the
# bucket-pipeline model (ddp/analysis.py), background load that halves or doubles the compute
# between this probe and the run should still leave about half of the AllReduce or more hidden.
COMM_PER_BACKWARD = 1.0
DDP_RANKS_PER_NODE = 1  # one rank per host: the CPU cores compute, the link communicates


def ddp_rate_bps(settings, nodes: int, ranks_per_node: int, backward_s: float) -> float:
    """The uplink rate at which ddp's AllReduce takes COMM_PER_BACKWARD x `backward_s`: a ring
    over N ranks sends 2(N-1)/N of the gradients (ddp's DdpSettings.gradient_bytes) through
    each host's uplink."""
    world = nodes * ranks_per_node
    return 2 * (world - 1) / world * settings.gradient_bytes * 8 / (COMM_PER_BACKWARD * backward_s)
