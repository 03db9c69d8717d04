"""The per-rank entry point every launcher runs, and the driver of a whole `run`."""
from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import traceback
from pathlib import Path

import torch.distributed as dist

from . import meta as run_meta
from . import resume
from .bench import sweep
from .config import RunConfig
from .console import Console
from .device import PeerTimeout, make_device, process_group_options
from .faults import DONE, Fault, Progress, exit_now, failure_line, peer_died, peer_silent
from .launch import RankEnv, describe_failure, export_for_env_init, launch_local, launcher_env
from .results import ResultsWriter, load_results, read_meta, start_meta, update_meta, write_meta
from .world import end_phase, make_world

LINGER_S = 3.0  # see faults.exit_now


def _quiet_interrupt(signum, frame) -> None:
    # Ctrl-C reaches every rank of a local run at once; the launcher reports it in one line.
    os._exit(130)


def join_world(config, env: RankEnv | None):
    """This rank's device and its place in the default process group, the same way for every
    per-rank entry point (run, links, ddp) and every launcher. `config` needs backend, device and
    timeout_s. A rank that cannot join exits with one line."""
    if env is None:
        raise RuntimeError("a per-rank entry point needs a launcher's environment (RANK, WORLD_SIZE, ...)")
    export_for_env_init(env)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # under torchrun or a local run: the agent handles ^C
        signal.signal(signal.SIGINT, _quiet_interrupt)
    device = make_device(config.device, env.local_rank, env.local_world_size, config.timeout_s)
    try:
        dist.init_process_group(config.backend, **process_group_options(config.backend, device,
                                                                         config.timeout_s))
    except (RuntimeError, ValueError) as error:  # unreachable master, rendezvous timeout, ...
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        exit_now(f"allreduce-bench: rank {env.rank}: could not join the world of {env.world_size} "
                 f"({env.launcher}, master {where}): {first}")
    return device


def rank_main(config: RunConfig, env: RankEnv | None = None) -> int:
    """Run the sweep on this rank for every world size of `config`; returns #wrong (rank 0).

    A collective that fails or times out ends this process at once with exit code 3 and one
    line naming the step and the missing rank (see faults.py); rows already written stay.
    """
    env = env or launcher_env()
    device = join_world(config, env)
    ranks_per_node = config.ranks_per_node or env.local_world_size
    progress = Progress(env.rank, env.world_size)
    try:
        wrong = _measure(config, env, device, ranks_per_node, progress)
    except (RuntimeError, PeerTimeout) as error:  # torch's DistBackendError is a RuntimeError
        if not (peer_died(error) or peer_silent(error)):
            traceback.print_exc()  # not a lost peer: maybe a bug, keep the evidence
        exit_now(failure_line(env.rank, progress, error, config.timeout_s),
                 linger_s=LINGER_S if peer_died(error) else 0.0)
    except KeyboardInterrupt:  # srun/mpirun pass Ctrl-C to every rank
        exit_now(f"allreduce-bench: rank {env.rank}: interrupted at {progress.where}", 130)
    dist.destroy_process_group()
    return wrong


def _measure(config: RunConfig, env: RankEnv, device, ranks_per_node: int,
             progress: Progress) -> int:
    lead = env.rank == 0
    infos = [None] * env.world_size
    dist.all_gather_object(infos, run_meta.rank_info(device, env))
    done = [None]
    if lead:
        meta = read_meta(config.out_dir) or run_meta.host_meta(config)
        if len(infos) >= len(meta.get("hostnames", [])):
            meta.update(run_meta.world_meta(infos))
        write_meta(config.out_dir, meta)
        if resume.repair_tail(config.out_dir):
            print("allreduce-bench: dropped a half-written last row of results.csv", file=sys.stderr)
        done = [resume.done_keys(config.out_dir, config.run_id)]
    dist.broadcast_object_list(done, src=0)  # every rank must skip the same rows
    done = done[0]

    fault = Fault.from_env()
    writer = ResultsWriter(config.out_dir) if lead else None
    total = len(config.algorithms) * len(config.sizes) * len(config.world_sizes)
    console = Console(total, enabled=lead)
    rows_done, wrong = 0, 0
    try:
        for phase, world_size in enumerate(config.world_sizes, start=1):
            members = tuple(range(world_size))
            progress.at(phase, 0, f"building the groups of world size {world_size}",
                        tuple(range(env.world_size)))
            world = make_world(world_size, ranks_per_node, device)
            steps = iter(range(1, DONE))

            def before(algorithm: str, size_bytes: int) -> bool:
                if (algorithm, world_size, size_bytes) in done:
                    console.bar.update(1)
                    return False
                progress.at(phase, next(steps), f"{algorithm}, world size {world_size}, "
                            f"{size_bytes} B", members)
                return True

            def on_row(row: dict) -> None:
                nonlocal rows_done
                if writer:
                    writer.append(row)
                console.row(row)
                rows_done += 1
                if fault:
                    fault.after_row(env.rank, rows_done)

            if world is not None:
                wrong += sweep(config, world, on_row=on_row, on_algorithm=console.algorithm,
                               before=before)
            progress.at(phase, DONE, f"the end of world size {world_size}",
                        tuple(range(env.world_size)))
            end_phase(world, f"run-{world_size}", device)
    finally:
        console.close()
    return wrong


def finish(config: RunConfig, summarize=None, draw: bool = True) -> int:
    """After measuring: summary from the stored rows (`summarize(frame) -> text`, by default
    the AllReduce summary), figures and report.md, exit code from #wrong."""
    from .report import terminal_summary

    frame = load_results(config.out_dir)
    frame = frame[frame["run_id"] == config.run_id]
    print("\n" + (summarize or terminal_summary)(frame))
    if config.plot and draw:
        from .report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots")
        print(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report}")
    update_meta(config.out_dir, finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / 'results.csv'}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} element(s) wrong; the results above are not to be trusted",
              file=sys.stderr)
        return 1
    return 0


def _start_meta(config: RunConfig) -> None:
    """A fresh meta.json, or a resumed run's with this restart noted."""
    stored = read_meta(config.out_dir)
    if stored.get("run_id") == config.run_id:
        restarts = stored.get("resumed", []) + [{
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": config.command}]
        update_meta(config.out_dir, resumed=restarts)
    else:
        start_meta(config.out_dir, run_meta.host_meta(config))


def _kept(config: RunConfig) -> str:
    rows = resume.count_rows(config.out_dir)
    return (f"{rows} row(s) kept in {Path(config.out_dir) / 'results.csv'}; continue with "
            f"--resume {config.out_dir}")


def drive(config, entry, done_with, world_sizes=None) -> int:
    """The driver every measuring command shares: under a launcher run `entry` on this rank of
    its world; else start a local world for each of `world_sizes` (default: the config's), one
    after the other. Then `done_with(config)` (summary, figures, exit code) where rows are
    written. A rank that dies or Ctrl-C ends a local run with one line, the rows kept."""
    env = launcher_env()
    if env is not None:
        entry(config, env)
        return done_with(config) if env.rank == 0 else 0

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        for world_size in config.world_sizes if world_sizes is None else world_sizes:
            launch_local(world_size, entry, config.with_world_sizes((world_size,)))
    except ChildFailedError as error:
        print(f"allreduce-bench: run stopped: {describe_failure(error)}; {_kept(config)}",
              file=sys.stderr)
        return 1
    except (SignalException, KeyboardInterrupt) as error:
        sig = getattr(error, "sigval", signal.SIGINT)
        print(f"allreduce-bench: interrupted ({sig.name}); {_kept(config)}", file=sys.stderr)
        return 128 + int(sig)  # 130 for Ctrl-C, as shells report it
    return done_with(config)


def run(config: RunConfig) -> int:
    """`allreduce-bench run`: measure under a launcher's world, or a local world per world size,
    skipping the world sizes a resumed run has finished."""
    env = launcher_env()
    if env is None or env.rank == 0:
        _start_meta(config)
        resume.repair_tail(config.out_dir)  # before reading which rows are done
    if env is not None:
        return drive(config, rank_main, finish)
    done = resume.done_keys(config.out_dir, config.run_id)
    itemsize = config.torch_dtype.itemsize
    todo = [k for k in config.world_sizes
            if any((a, k, s // itemsize * itemsize) not in done
                   for a in config.algorithms for s in config.sizes)]
    return drive(config, rank_main, finish, todo)
