"""A small run directory made from chosen samples (no processes): results.csv rows computed by
metrics.sample_stats as a real run's are, and a meta.json with the machine's facts."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.core import metrics
from allreduce_bench.core.results.schema import COLUMNS

K = 1 << 10
RUN_ID = "synthetic01"


def samples_for(state: str, base_us: float, n: int, rng) -> list[float]:
    """`n` sample times: one state (`steady`), a fast and a slow state (`two`, 60/40), or a
    spread that leaves the median uncertain (`wide`)."""
    if state == "two":
        fast = base_us * (1 + rng.uniform(0, 0.05, int(0.6 * n)))
        return list(fast) + list(10 * base_us * (1 + rng.uniform(0, 0.3, n - len(fast))))
    if state == "wide":
        return list(base_us * rng.uniform(0.5, 2.0, n))
    return list(base_us * (1 + rng.uniform(0, 0.04, n)))


def rows(states: dict[tuple[str, int, int], str], n: int = 30, seed: int = 0) -> pd.DataFrame:
    """One row per (algorithm, world size, size) with the samples `states` names."""
    rng = np.random.default_rng(seed)
    made = []
    for (algorithm, world_size, size), state in states.items():
        base = 100 + size / 1e3
        stats = metrics.sample_stats([samples_for(state, base, n, rng)])
        made.append({"run_id": RUN_ID, "timestamp": "2026-12-04T10:00:00+00:00", "tag": "",
                     "benchmark": "allreduce", "collective": "all_reduce", "algorithm": algorithm,
                     "backend": "gloo", "device": "cpu", "dtype": "float32",
                     "world_size": world_size, "nodes": 1, "ranks_per_node": world_size,
                     "size_bytes": size, "count": size // 4, "timing": "samples", "samples": n,
                     "loops": 1, "warmup": 1, **stats, "rounds": 1, "round_spread": 0.0,
                     "algbw_GBps": metrics.algbw_GBps(size, stats["time_us_median"]),
                     "busbw_GBps": metrics.busbw_GBps(size, stats["time_us_median"], world_size),
                     "wrong": 0})
    return pd.DataFrame(made)


MACHINE = {"cpus_allowed": 2, "cpu_count": 2, "cpuidle": {"driver": "haltpoll", "governor": "haltpoll"},
           "load_average_start": 0.1, "steal_share": 0.001, "busy_share": 0.6}


def write_run(out: Path, frame: pd.DataFrame, machine: dict | None = None, **config) -> Path:
    """results.csv and meta.json of one run in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    frame.reindex(columns=COLUMNS).to_csv(out / "results.csv", index=False)
    meta = {"schema_version": 5, "run_id": RUN_ID, "tag": "", "backend": "gloo", "device": "cpu",
            "started": "2026-12-04T10:00:00+00:00", "hostnames": ["vm", "vm"],
            "config": {"world_sizes": sorted(set(frame["world_size"])), **config},
            "machine": MACHINE if machine is None else machine}
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def default_states() -> dict:
    """Two algorithms at N=2, three sizes: steady rows, a two-state row and a wide one."""
    return {("native", 2, 4 * K): "steady", ("native", 2, 64 * K): "two",
            ("native", 2, 1024 * K): "steady", ("ring", 2, 4 * K): "steady",
            ("ring", 2, 64 * K): "wide", ("ring", 2, 1024 * K): "steady"}
