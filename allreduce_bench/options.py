"""From raw CLI options to a validated RunConfig: defaults depend on what this host has."""
from __future__ import annotations

import torch

from .config import (CPU_DEFAULTS, GPU_DEFAULTS, QUICK, RunConfig, check_counts,
                     check_sizes_fit_dtype, default_out_dir, parse_algorithms, parse_dtype,
                     parse_world_sizes, resolve_sizes)
from .device import resolve_backend
from .launch import launcher_env
from .world import node_layout


def gpu_world_sizes(gpus: int) -> tuple[int, ...]:
    """2, 4, 8, ... up to the GPU count, and the count itself."""
    sizes, k = [], 2
    while k <= gpus:
        sizes.append(k)
        k *= 2
    return tuple(sorted(set(sizes + [gpus])))


def run_config(*, algos, world_sizes, sizes, min_bytes, max_bytes, factor, dtype, iters, warmup,
               backend, device, ranks_per_node, tag, out_dir, timeout_s, quick, no_plot,
               command="") -> RunConfig:
    env = launcher_env()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wants_gpu = device != "cpu" and backend in ("auto", "nccl")
    if world_sizes:
        chosen = parse_world_sizes(world_sizes)
    elif env is not None:
        chosen = (env.world_size,)
    elif wants_gpu and gpus >= 2:
        chosen = gpu_world_sizes(gpus)
    else:
        chosen = CPU_DEFAULTS["world_sizes"]
    per_host = env.local_world_size if env else max(chosen)
    backend, device = resolve_backend(backend, device, per_host)

    if env is not None:
        for k in chosen:
            if k > env.world_size:
                from .errors import UsageError
                raise UsageError(f"world size {k} is larger than the {env.world_size} ranks "
                                 "launched; launch more ranks or choose smaller --world-sizes")
    elif ranks_per_node is None and device == "cpu":
        default = CPU_DEFAULTS["ranks_per_node"]
        # Two ranks per node simulates two levels; a world it cannot split is one node.
        if all(k <= default or k % default == 0 for k in chosen):
            ranks_per_node = default
    layout = ranks_per_node or (env.local_world_size if env else None)
    for k in chosen:
        node_layout(k, layout or k)

    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    if quick and not (sizes or min_bytes or max_bytes or factor):
        swept = QUICK["sizes"]
    else:
        swept = resolve_sizes(sizes, min_bytes, max_bytes, factor, defaults)
    dtype = parse_dtype(dtype)
    check_sizes_fit_dtype(swept, dtype)
    iters = iters if iters is not None else (QUICK if quick else defaults)["iters"]
    warmup = warmup if warmup is not None else (QUICK if quick else defaults)["warmup"]
    check_counts(iters, warmup, timeout_s)
    return RunConfig(
        algorithms=parse_algorithms(algos), world_sizes=chosen, sizes=swept, dtype=dtype,
        iters=iters, warmup=warmup, backend=backend, device=device,
        ranks_per_node=ranks_per_node, tag=tag, out_dir=out_dir or default_out_dir(tag),
        timeout_s=timeout_s, plot=not no_plot, command=command)
