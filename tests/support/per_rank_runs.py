"""A run directory as `run` writes it (rows from raw per-rank samples through the same
statistics, samples.parquet, meta.json), built without starting ranks: for the exporter, the
Inspector view and the floor, whose logic is a function of those files."""
from __future__ import annotations

import numpy as np
import pandas as pd

from allreduce_bench.core import metrics
from allreduce_bench.core.results.schema import COLUMNS, samples_frame
from allreduce_bench.core.results.store import SamplesWriter, write_meta, write_parquet

HOSTS = ["node-a", "node-a", "node-b", "node-b"]


def measurement(collective: str, algorithm: str, world: int, size: int, rng, in_place: bool = False,
                samples: int = 7, loops: int = 3, run_id: str = "synthetic1", slow: float = 1.0):
    """(row, samples frame) of one measurement: per-rank times per call in each sample."""
    count, size_bytes = metrics.collective_counts(collective, size, 4, world)
    base = 1000.0 + size_bytes / 1e3  # µs: whole-µs Inspector times stay within 0.1%
    per_rank = (base * slow * rng.uniform(0.9, 1.3, size=(world, samples))).round(3)
    stats = metrics.sample_stats(per_rank, loops)
    row = {"run_id": run_id, "timestamp": "2026-01-02T03:04:05+00:00", "tag": "", "collective": collective,
           "benchmark": metrics.benchmark_of(collective, in_place), "algorithm": algorithm,
           "backend": "gloo", "device": "cpu", "dtype": "float32", "world_size": world, "nodes": 2,
           "ranks_per_node": world // 2, "size_bytes": size_bytes, "count": count, "timing": "samples",
           "samples": samples, "loops": loops, "warmup": 1, **stats,
           "algbw_GBps": metrics.algbw_GBps(size_bytes, stats["time_us_median"]),
           "busbw_GBps": metrics.busbw_GBps(size_bytes, stats["time_us_median"], world, collective),
           "wrong": 0, "rounds": 1}
    return row, samples_frame(row, per_rank, list(range(world)), HOSTS)


def write_run(path, plan, sizes=(4096, 262144), world_sizes=(2, 4), seed=0, run_id="synthetic1",
              slow: float = 1.0):
    """`plan`: [(collective, algorithm, in_place halves too)]. Returns the directory."""
    rng = np.random.default_rng(seed)
    rows, parts = [], []
    for world in world_sizes:
        for collective, algorithm, both in plan:
            for in_place in ((False, True) if both else (False,)):
                for size in sizes:
                    row, frame = measurement(collective, algorithm, world, size, rng, in_place,
                                             run_id=run_id, slow=slow)
                    rows.append(row)
                    parts.append(frame)
    frame = pd.DataFrame(rows)
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    path.mkdir(parents=True, exist_ok=True)
    frame[COLUMNS].to_csv(path / "results.csv", index=False)
    write_parquet(path, frame[COLUMNS])
    write_meta(path, {"run_id": run_id, "started": "2026-01-02T03:04:05+00:00",
                      "finished": "2026-01-02T03:05:00+00:00", "command": "allreduce-bench run --quick",
                      "backend": "gloo", "device": "cpu", "versions": {"torch": "2.13"},
                      "environment": {"GLOO_SOCKET_IFNAME": "lo"}, "hostnames": HOSTS,
                      "device_names": ["cpu"] * 4, "pids": [101, 102, 103, 104]})
    SamplesWriter(path).append(pd.concat(parts, ignore_index=True))
    return path
