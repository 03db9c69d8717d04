"""The probes `emulate` runs to choose the inter-node rate: `probe SIZE_BYTES` prints intra_p2p_GBps=,
`probe backward RANKS PARAMS LAYERS BATCH` prints backward_s=, and `probe ddp OUT PARAMS LAYERS BATCH
GRADIENT_BYTES`, under torchrun on every host as `ddp` will run, writes its findings to OUT as JSON."""
from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from typing import cast

import torch
import torch.distributed as dist
from torch import nn

from allreduce_bench.core import metrics
from allreduce_bench.core.config import Sampling
from allreduce_bench.core.environment import launcher_env
from allreduce_bench.core.measure.device import Device
from allreduce_bench.core.measure.world import make_world
from allreduce_bench.ddp.measurements import comm_alone
from allreduce_bench.ddp.net import build_model, synthetic_batch
from allreduce_bench.links.benchmark import p2p_measure


def _probe_rank(size_bytes: int, iters: int) -> float:
    """Rank 0 sends `size_bytes` to rank 1; the median time in us."""
    dist.init_process_group("gloo", timeout=_dt.timedelta(seconds=120))
    try:
        measured, wrong = p2p_measure(size_bytes // 4, torch.float32, 0, 1, None, Device(),
                                      Sampling(loops=1, samples=iters, warmup=1))
        assert wrong == 0, f"{wrong} element(s) wrong in the probe"
        return metrics.sample_stats(measured.per_rank_us)["time_us_median"]
    finally:
        dist.destroy_process_group()


def _backward_rank(params: int, layers: int, batch_size: int, iters: int) -> float:
    """Median seconds of one backward pass of ddp's synthetic model on this rank."""
    return _backward_times(params, layers, batch_size, iters)[0]


def _backward_times(params: int, layers: int, batch_size: int, iters: int) -> tuple[float, float]:
    """(median seconds of one backward pass of ddp's model on this rank, the CPU seconds per second it got)."""
    env = launcher_env()
    assert env is not None  # a launched rank
    model = build_model(params, layers, torch.device("cpu"))
    x, y = synthetic_batch(model, batch_size, env.rank, torch.device("cpu"))
    times, cpu = [], []
    for _ in range(iters + 2):  # the first two are a warm-up (allocations, the other rank starting)
        loss = nn.functional.mse_loss(model(x), y)
        start, start_cpu = time.perf_counter(), time.process_time()
        loss.backward()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    rates = sorted(c / t for c, t in zip(cpu[2:], times[2:]))  # medians: one pass stalled by load
    return sorted(times[2:])[iters // 2], rates[iters // 2]


def _ddp_rank(out: str, params: int, layers: int, batch_size: int, gradient_bytes: int,
              iters: int = 3) -> None:
    """One rank of `probe ddp`: the slowest rank's backward, AllReduce alone and its CPU time, and the least
    CPU seconds per second a rank's backward got."""
    dist.init_process_group("gloo")
    backward, cpu_rate = _backward_times(params, layers, batch_size, iters)
    env = launcher_env()
    assert env is not None  # under torchrun
    world = make_world(dist.get_world_size(), env.local_world_size, Device(), PROBE_TIMEOUT_S)
    assert world is not None  # the whole world
    total, cap = gradient_bytes, DDP_BUCKET_BYTES
    body, wall, cpu = comm_alone(world, [cap] * (total // cap) + [total % cap] * bool(total % cap)), [], []
    for _ in range(iters + 1):  # the first warms up (gloo's connections, allocations)
        dist.barrier()
        start, start_cpu = time.perf_counter(), time.process_time()
        body(None)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    found = torch.tensor([backward, sorted(wall[1:])[iters // 2], sorted(cpu[1:])[iters // 2]],
                         dtype=torch.float64)
    dist.all_reduce(found, op=dist.ReduceOp.MAX)
    least_cpu = torch.tensor([cpu_rate], dtype=torch.float64)
    dist.all_reduce(least_cpu, op=dist.ReduceOp.MIN)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(dict(zip(("backward_s", "comm_s", "comm_cpu_s", "cpu_rate"),
                               found.tolist() + least_cpu.tolist())), f)
    dist.destroy_process_group()


DDP_BUCKET_BYTES = 25 << 20  # DDP's default bucket_cap_mb
PROBE_TIMEOUT_S = 300.0  # as long as the driver waits for a probe (cluster._probe)


if __name__ == "__main__":
    from allreduce_bench.core.launch.local import launch_local
    if sys.argv[1] == "ddp":  # under torchrun, one launch per emulated host
        _ddp_rank(sys.argv[2], *map(int, sys.argv[3:7]))
    elif sys.argv[1] == "backward":
        from allreduce_bench.emulate.probe import _backward_rank as backward_rank  # spawnable
        ranks, params, layers, batch = map(int, sys.argv[2:6])
        times = cast(dict[int, float], launch_local(ranks, backward_rank, params, layers, batch, 5))
        print(f"backward_s={max(times.values()):.6f}")
    else:
        from allreduce_bench.emulate.probe import _probe_rank as probe_rank  # by name, for spawned ranks
        size = int(sys.argv[1])
        median_us = cast(float, launch_local(2, probe_rank, size, 7)[0])
        print(f"intra_p2p_GBps={size / median_us / 1e3:.6f}")
