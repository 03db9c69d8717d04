"""The head of an exported nccl-tests JSON document (`args`, `env`, `nccl_version`, `config`)."""
from __future__ import annotations

import datetime as _dt
import shlex

import pandas as pd

from allreduce_bench.interop import nccl_tests_format as fmt

ENV_PREFIX = "ALLREDUCE_BENCH_"  # the env lines naming where the numbers come from


def time_text(text, fallback: str = "") -> str:
    """An ISO time of meta.json as the writer's "%Y-%m-%d %H:%M:%S" (kept in its own zone)."""
    try:
        return _dt.datetime.fromisoformat(str(text)).strftime(fmt.TIME_FORMAT)
    except ValueError:
        return fallback


def _step(sizes: list[int]) -> dict:
    """-f (a constant whole factor) or -i (a constant step): what nccl-tests' config holds."""
    ratios = {b / a for a, b in zip(sizes, sizes[1:])}
    if len(ratios) == 1 and (ratio := ratios.pop()) == int(ratio) and ratio > 1:
        return {"step_factor": int(ratio)}
    steps = {b - a for a, b in zip(sizes, sizes[1:])}
    if len(steps) == 1:
        return {"step_bytes": steps.pop()}
    geometric = (sizes[-1] / sizes[0]) ** (1 / (len(sizes) - 1)) if len(sizes) > 1 else 1
    return {"step_factor": max(2, round(geometric))} if len(sizes) > 1 else {"step_bytes": 1 << 20}


def _loops(rows: pd.DataFrame) -> int:
    """-m: calls per sample (one value per file: the median over sizes)."""
    loops = pd.to_numeric(rows["loops"], errors="coerce").dropna()
    return int(round(loops.median())) if len(loops) else 1


def config(rows: pd.DataFrame, meta: dict, devices: list[dict], timed: bool) -> dict:
    sizes = sorted(int(s) for s in rows["size_bytes"].unique())
    samples = pd.to_numeric(rows["samples"], errors="coerce").dropna()
    warmup = pd.to_numeric(rows["warmup"], errors="coerce").dropna()
    return {"nthreads": 1, "ngpus": 1, "minimum_bytes": sizes[0], "maximum_bytes": sizes[-1],
            **_step(sizes), "warmup_iters": int(warmup.max()) if len(warmup) else 0,
            "iterations": int(samples.max()) if len(samples) else 0,
            "aggregated_iterations": _loops(rows), "validation": 1, "graph": 0,
            # gloo's calls return when done (-z 1); NCCL's are queued back to back (-z 0)
            "blocking_collectives": meta.get("device") == "cpu",
            "per_iter_timing": timed, "per_iter_skip": 0, "parallel_init": False,
            "devices": devices}


def devices(ranks: list[int], hosts: list[str], meta: dict) -> list[dict]:
    """One entry per rank (a process and a device each), from meta.json."""
    known = meta.get("hostnames") or []
    names = meta.get("device_names") or []
    pids = meta.get("pids") or []
    gpus = meta.get("gpu_per_rank") or []
    found = []
    for rank, host in zip(ranks, hosts):
        at = rank if 0 <= rank else -1
        found.append({"rank": rank, "group": 0,
                      "pid": int(pids[at]) if at < len(pids) and pids[at] else 0,
                      "hostname": (host or (known[at] if at < len(known) else "")).split(".")[0],
                      "device": int((gpus[at] if at < len(gpus) else {}).get("gpu_index") or 0),
                      "device_hex": "0000:00:00",
                      "device_info": names[at] if at < len(names) else str(meta.get("device_name") or "")})
    return found


def nccl_code(version) -> int:
    """'2.21.5' -> 22105 (NCCL_VERSION_CODE); 0 when the run had no NCCL."""
    try:
        major, minor, patch = (int(p) for p in str(version).split(".")[:3])
    except ValueError:
        return 0
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch


def args(collective: str, rows: pd.DataFrame, conf: dict, file_name: str) -> list[str]:
    step = ["-f", str(conf["step_factor"])] if "step_factor" in conf else ["-i", str(conf["step_bytes"])]
    line = [fmt.program(collective), "-b", str(conf["minimum_bytes"]), "-e", str(conf["maximum_bytes"]),
            *step, "-d", fmt.TYPE_NAMES.get(str(rows["dtype"].iloc[0]), "float")]
    if collective in fmt.REDOPS:
        line += ["-o", fmt.REDOPS[collective]]
    if collective in fmt.ROOTED:
        line += ["-r", "0"]
    return line + ["-n", str(conf["iterations"]), "-w", str(conf["warmup_iters"]), "-m",
                   str(conf["aggregated_iterations"]), "-c", "1", "-I", "1" if conf["per_iter_timing"] else "0",
                   "-J", file_name]


def environment(meta: dict, first) -> list[str]:
    """The run's recorded variables, then where the numbers come from (read back by import)."""
    recorded = meta.get("environment")
    lines = [f"{k}={v}" for k, v in recorded.items()] if isinstance(recorded, dict) else \
        [str(v) for v in recorded or [] if not str(v).startswith(ENV_PREFIX)]
    command = meta.get("command") or ""
    return lines + [f"{ENV_PREFIX}ALGORITHM={first['algorithm']}", f"{ENV_PREFIX}BACKEND={first.get('backend') or ''}",
                    f"{ENV_PREFIX}RUN_ID={first['run_id']}",
                    f"{ENV_PREFIX}COMMAND={command if isinstance(command, str) else shlex.join(command)}"]
