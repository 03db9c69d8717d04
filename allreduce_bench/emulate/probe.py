"""The intra-node point-to-point probe `emulate` runs first to choose the inter-node rate:
`python -m allreduce_bench.emulate.probe SIZE_BYTES` prints intra_p2p_GBps=...."""
from __future__ import annotations

import sys


def _probe_rank(size_bytes: int, iters: int) -> float:
    """Rank 0 sends `size_bytes` to rank 1; the median time in us."""
    import datetime as _dt

    import torch
    import torch.distributed as dist

    from allreduce_bench import metrics
    from allreduce_bench.benchmarks.links import p2p_measure
    from allreduce_bench.config import Sampling
    from allreduce_bench.measure.device import Device
    dist.init_process_group("gloo", timeout=_dt.timedelta(seconds=120))
    try:
        measured, wrong = p2p_measure(size_bytes // 4, torch.float32, 0, 1, None, Device(),
                                      Sampling(loops=1, samples=iters, warmup=1))
        assert wrong == 0, f"{wrong} element(s) wrong in the probe"
        return metrics.sample_stats(measured.per_rank_us)["time_us_median"]
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    from allreduce_bench.emulate.probe import _probe_rank as probe_rank  # by name, for spawned ranks
    from allreduce_bench.launch.environments import launch_local
    size = int(sys.argv[1])
    median_us = launch_local(2, probe_rank, size, 7)[0]
    print(f"intra_p2p_GBps={size / median_us / 1e3:.6f}")
