"""From raw CLI options to a validated RunConfig: defaults depend on what this host has."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from allreduce_bench.core import algorithms
from allreduce_bench.core.config import (
    CPU_DEFAULTS,
    DTYPES,
    EXTRA_BUDGET_S,
    GPU_DEFAULTS,
    QUICK,
    RunConfig,
    RunOptions,
    Sampling,
    SweepOptions,
    check_sizes_fit_dtype,
    cpu_world_sizes,
    created_here,
    default_out_dir,
    parse_dtype,
    parse_world_sizes,
    resolve_sampling,
    resolve_sizes,
)
from allreduce_bench.core.config import resume_checks as resume
from allreduce_bench.core.config.checks import (
    Host,
    allreduce_world_bytes,
    check_finite,
    check_local_world,
    check_memory,
    check_positive_int,
    check_tag,
    check_writable_dir,
    parse_floor,
)
from allreduce_bench.core.config.launch import LaunchConfig, LaunchOptions, from_params, wanted
from allreduce_bench.core.environment import RankEnv, Started, is_writer, visible_gpus
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.hooks import Hooks, RowKind, Runnable
from allreduce_bench.core.layout import node_layout
from allreduce_bench.core.metrics import IN_PLACE_HALVES
from allreduce_bench.core.units import format_size


def gpu_world_sizes(gpus: int) -> tuple[int, ...]:
    """2, 4, 8, ... up to the GPU count, and the count itself."""
    return tuple(sorted({1 << i for i in range(1, gpus.bit_length())} | {gpus}))


def resolve_backend(backend: str, device: str | None, gpus_needed: int, gpus: int) -> tuple[str, str]:
    """(backend, device kind); auto: nccl when every local rank can have a GPU of its own."""
    if device not in (None, "cpu", "cuda"):
        raise UsageError(f"--device {device!r} is not known; use cpu or cuda")
    if backend == "auto":
        backend = "gloo" if device == "cpu" or (device is None and gpus < max(gpus_needed, 1)) else "nccl"
    if backend not in ("gloo", "nccl"):
        raise UsageError(f"--backend {backend!r} is not known; use auto, gloo or nccl")
    kind = device or ("cuda" if backend == "nccl" else "cpu")
    if backend == "nccl" and kind == "cpu":
        raise UsageError("nccl runs on GPUs only; drop --device cpu or use --backend gloo")
    # gloo on CUDA tensors: its own collectives, staged through host memory (no point to point:
    # check_gloo_on_gpu keeps the hand-written algorithms out); its ranks may share one GPU, which
    # NCCL refuses, so a one-GPU machine runs worlds of 2 and 4 ranks on it (gpu_check.sh)
    if kind == "cuda":
        if gpus == 0:
            raise UsageError(f"--backend {backend} needs a CUDA device and none is visible; "
                             "use --backend gloo to run on the CPU")
        if gpus_needed > gpus and backend == "nccl":
            raise UsageError(f"{gpus_needed} GPU ranks per host were asked for but only {gpus} GPUs "
                             "are visible; choose smaller --world-sizes or more nodes")
    return backend, kind


def own_gpu(env) -> bool:
    """Whether the one GPU this rank sees is its own: CUDA_VISIBLE_DEVICES names one, not set by torchrun
    (which hands every local rank one environment)."""
    visible = visible_gpus() or ""
    return env.launcher != "torchrun" and bool(visible) and "," not in visible


def resolve_world(options: LaunchOptions, env: RankEnv | None, host: Host
                  ) -> tuple[tuple[int, ...], str, str, int | None]:
    """(world sizes, backend, device, ranks per node) for every command that starts worlds: the
    launcher's (`env`) or local ones, two ranks per simulated node where every CPU world splits so."""
    backend, device, ranks_per_node = options.backend, options.device, options.ranks_per_node
    check_positive_int(ranks_per_node, "--ranks-per-node")  # 0 is an error, not the default
    gpus = host.gpus
    wants_gpu = device != "cpu" and backend in ("auto", "nccl")
    if options.world_sizes is not None:
        chosen = parse_world_sizes(options.world_sizes)
    elif env is not None:
        chosen = (env.world_size,)
    elif wants_gpu and gpus >= 2:
        chosen = gpu_world_sizes(gpus)
    else:
        chosen = cpu_world_sizes(host.cpus)[0]
    per_host = env.local_world_size if env else max(chosen)
    if env is not None and gpus == 1 and per_host > 1:
        if own_gpu(env):
            per_host = 1
        elif wants_gpu:  # NCCL refuses two ranks on one GPU; measuring the CPU instead would surprise
            raise UsageError(f"local rank {env.local_rank} of {per_host} sees one GPU and nothing shows "
                             "it is its own (NCCL refuses two ranks on one GPU): bind one GPU to each rank "
                             "(srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES per rank under mpirun), "
                             "launch one rank per GPU, or use --backend gloo")
    backend, device = resolve_backend(backend, device, per_host, gpus)

    if env is not None:
        for k in chosen:
            if k > env.world_size:
                raise UsageError(f"world size {k} is larger than the {env.world_size} ranks "
                                 "launched; launch more ranks or choose smaller --world-sizes")
    elif ranks_per_node is None and device == "cpu":
        default = CPU_DEFAULTS["ranks_per_node"]
        # Two ranks per node simulates two levels; a world it cannot split is one node.
        if all(k <= default or k % default == 0 for k in chosen):
            ranks_per_node = default
    if env is None:
        check_local_world(chosen)
    layout = ranks_per_node or (env.local_world_size if env else None)
    for k in chosen:
        node_layout(k, layout or k)
    return chosen, backend, device, ranks_per_node


def left_out_world_sizes(world_sizes: str | None, device: str, env: RankEnv | None, host: Host) -> tuple[int, ...]:
    """The default world sizes `resolve_world` left out for lack of CPUs."""
    if world_sizes is not None or env is not None or device != "cpu":
        return ()
    return cpu_world_sizes(host.cpus)[1]


def _check_out(out_dir: Path, option: str) -> None:
    existed = Path(out_dir).exists()
    check_writable_dir(out_dir, option)
    if not existed:
        created_here(out_dir)


def launch_config(world: tuple, options: LaunchOptions, started: Started, *,
                  label: str = "", run_id: str | None = None, check_out: bool = True) -> LaunchConfig:
    """Every measuring command's LaunchConfig; the writer checks --out (unless `check_out` is False)
    or claims the default results/<stamp>[-<label>-<tag>]."""
    chosen, backend, device, ranks_per_node = world
    check_finite(options.timeout_s, "--timeout")
    tag = check_tag(options.tag)
    writer = is_writer(started.env)
    out_dir = options.out_dir
    if out_dir is not None and writer and check_out:
        _check_out(out_dir, "--out")
    out_dir = out_dir or default_out_dir("-".join(p for p in (label, tag) if p), claim=writer)
    launch = LaunchConfig(world_sizes=chosen, backend=backend, device=device,
                        ranks_per_node=ranks_per_node, tag=tag, out_dir=Path(out_dir),
                        timeout_s=options.timeout_s, plot=not options.no_plot,
                        command=started.command, bind=options.bind,
                        nccl_debug=options.nccl_debug, flight_recorder=options.flight_recorder,
                        sched=wanted(options.sched, device, emulated=bool(started.emulation)),
                        emulation=started.emulation, link_peaks=started.link_peaks)
    return replace(launch, run_id=run_id) if run_id else launch


def run_sizes(sweep: SweepOptions, device: str) -> tuple[int, ...]:
    """The sweep's sizes in whole elements: a point between the sizes given is rounded down to one."""
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    if sweep.quick and not (sweep.sizes or sweep.min_bytes or sweep.max_bytes or sweep.factor):
        swept = QUICK["sizes"]
    else:
        swept = resolve_sizes(sweep.sizes, sweep.min_bytes, sweep.max_bytes, sweep.factor, defaults,
                              sweep.dtype)
    check_sizes_fit_dtype(swept, sweep.dtype)
    itemsize = DTYPES[sweep.dtype]
    return tuple(sorted({size // itemsize * itemsize for size in swept}))


def run_sampling(sweep: SweepOptions, device: str) -> Sampling:
    """The device's or --quick's Sampling with what was given (--iters N: --samples N --loops 1)."""
    loops, samples = sweep.loops, sweep.samples
    if sweep.iters is not None:
        if loops is not None or samples is not None:
            raise UsageError("--iters N is --samples N --loops 1; give either --iters or "
                             "--samples/--loops")
        check_positive_int(sweep.iters, "--iters")
        loops, samples = 1, sweep.iters
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    return resolve_sampling((QUICK if sweep.quick else defaults)["sampling"], loops, samples,
                            sweep.budget, sweep.warmup, sweep.host_launch)


def extra_seconds(extra_budget: float | None, quick: bool) -> float:
    if extra_budget is None:
        return 0.0 if quick else EXTRA_BUDGET_S
    if extra_budget < 0:
        raise UsageError(f"--extra-budget must be 0 or more seconds, got {extra_budget:g}")
    return extra_budget


def run_rounds(rounds: int | None, device: str, quick: bool) -> int:
    if rounds is None:
        return (QUICK if quick else GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS)["rounds"]
    check_positive_int(rounds, "--rounds")
    return rounds


def resumed_run(resume_dir: Path | None, out_dir: Path | None, started: Started,
                kinds: tuple[RowKind, ...]) -> tuple[Path | None, dict]:
    """(--out to write to, the stored meta.json) of `--resume DIR`."""
    if resume_dir is None:
        return out_dir, {}
    if out_dir is not None and Path(out_dir).resolve() != Path(resume_dir).resolve():
        raise UsageError(f"--resume {resume_dir} writes to that directory; drop --out {out_dir}")
    stored = resume.stored_run(resume_dir, bool(started.emulation), kinds) if is_writer(started.env) else {}
    return Path(resume_dir), stored


def collective_plan(algos: str | None, collectives: str, backend: str):
    """(the AllReduce's algorithms, ((collective, names), ...) of the others); every algorithm
    --algos names must implement every collective asked for."""
    chosen = algorithms.parse_collectives(collectives)
    plan = {c: algorithms.parse(algos, backend, c) if algos else algorithms.default_names(c)
            for c in chosen}
    allreduce = plan.pop("all_reduce", ())
    return tuple(allreduce), tuple(plan.items())


def run_config(options: RunOptions, started: Started, host: Host, hooks: Hooks) -> RunConfig:
    """`run`'s (and `links`') config, checked before any process starts."""
    if options.min_busbw is not None:
        parse_floor(options.min_busbw)
    env, sweep = started.env, options.sweep
    world = resolve_world(options.launch, env, host)
    chosen, backend, device, ranks_per_node = world
    dtype = parse_dtype(sweep.dtype)
    swept = run_sizes(sweep, device)
    sampling = run_sampling(sweep, device)
    check_finite(options.launch.timeout_s, "--timeout")
    names, others = collective_plan(options.algos, options.collectives, backend)
    check_gloo_on_gpu(names, others, backend, device)
    if options.in_place and not any(c in IN_PLACE_HALVES for c, _ in others):
        raise UsageError(f"--in-place measures the in-place half of {' and '.join(IN_PLACE_HALVES)}, "
                         f"and --collectives {options.collectives} has neither; add them (e.g. "
                         "--collectives all_reduce,reduce_scatter,all_gather) or drop --in-place")
    if names:
        check_allreduce_memory(names, chosen, swept, device, env)
    out_dir, stored = resumed_run(options.resume_dir, options.launch.out_dir, started, hooks.row_kinds)
    if out_dir is not None and is_writer(env):
        _check_out(out_dir, "--resume" if options.resume_dir is not None else "--out")
        if options.resume_dir is None and not started.emulation:  # emulate says it once for all
            resume.note_earlier_runs(out_dir)
    launch = replace(launch_config(world, replace(options.launch, out_dir=out_dir), started,
                                   run_id=stored.get("run_id"), check_out=False),
                     world_sizes_left_out=left_out_world_sizes(options.launch.world_sizes, device, env, host))
    config = RunConfig(launch=launch, algorithms=names, sizes=swept, dtype=dtype, sampling=sampling,
                       rounds=run_rounds(options.rounds, device, sweep.quick),
                       extra_budget_s=extra_seconds(options.extra_budget, sweep.quick),
                       collectives=others, in_place=bool(options.in_place))
    per_node = ranks_per_node or (env.local_world_size if env else None)
    for collective, listed in (("all_reduce", names), *others):  # before any process starts
        algorithms.check_supported(listed, chosen, per_node, backend, collective)
    if stored and options.resume_dir is not None:
        resume.check_same_measurement(stored, config, options.resume_dir)
    return config


def check_gloo_on_gpu(names, others, backend: str, device: str) -> None:
    """gloo moves CUDA tensors only in its own collectives, never point to point: native AllReduce alone."""
    if backend != "gloo" or device != "cuda":
        return
    odd = [n for n in names if n != "native"] + [c for c, _ in others]
    if odd:
        raise UsageError(f"gloo on GPU tensors runs only its own AllReduce (no point to point with "
                         f"CUDA tensors), not {', '.join(odd)}; give --algos native (and "
                         "--collectives all_reduce), or --backend nccl")


def check_allreduce_memory(algorithms, world_sizes, sizes, device, env) -> None:
    """Refuse a sweep whose largest size cannot fit, before any rank allocates it."""
    largest_world, largest = max(world_sizes), max(sizes)
    ranks_here = env.local_world_size if env is not None else largest_world
    busiest, world = allreduce_world_bytes(algorithms, largest, largest_world)
    here = world if env is None else busiest + (ranks_here - 1) * 5 * largest
    check_memory(here, busiest, ranks_here, f"--max-bytes {format_size(largest)} at world size "
                 f"{largest_world} ({', '.join(algorithms)})", device,
                 "choose a smaller --max-bytes (or --sizes), fewer ranks, or drop naive "
                 "(its root holds (N-1) x size)")


def emulated_run(params: dict, started: Started, host: Host, hooks: Hooks) -> RunConfig:
    """`emulate --benchmarks allreduce`: each host's `run`, from its command's params."""
    return run_config(from_params(RunOptions, params), started, host, hooks)


RUNNABLE = Runnable("allreduce", "run", emulated_run)
