"""The sweep on one (sub-)world: for each algorithm and size, one measurement
(measure/collective.py: build, time, check) and its row.

Timing is the one loop of measure/timing.py: calibrated samples of `loops` back-to-back calls,
each rank's time per call kept per sample.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from allreduce_bench.core import algorithms
from allreduce_bench.core.algorithms import nccl
from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import collective as measuring
from allreduce_bench.core.measure import machine, timing
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.console import Console
from allreduce_bench.core.measure.device import torch_dtype
from allreduce_bench.core.measure.faults import DONE
from allreduce_bench.core.measure.rank import Benchmark, Session
from allreduce_bench.core.measure.world import World, end_phase, group_timeout, make_world
from allreduce_bench.core.results import resume
from allreduce_bench.core.results.store import read_meta, start_meta, update_meta
from allreduce_bench.core.sweep import collectives, passes
from allreduce_bench.core.sweep.rows import pooled_row


def allreduce_item(config: RunConfig, world: World, name: str, count: int, hosts,
                   before_clock) -> passes.Item:
    """One AllReduce measurement; sizes are whole elements (options.run_config)."""
    def measure_once(sampling: timing.Sampling, check: bool):
        return measuring.measure(algorithms.lookup(name), world, count, torch_dtype(config.dtype),
                                  sampling, before_clock=before_clock, check=check)

    return passes.Item(name, count * config.itemsize, measure_once,
                       lambda taken, wrong: pooled_row(config, world, name, count, taken, wrong, hosts))


def sweep(config: RunConfig, world: World, on_row: Callable[..., None],
          on_algorithm: Callable[[str, World], None] = lambda a, w: None,
          should_measure: Callable[[str, int], bool] = lambda algorithm, size_bytes: True,
          hosts: list[str] | None = None, before_clock=None,
          on_measure: Callable[[str, int, int], None] = lambda label, size, index: None) -> int:
    """Measure every algorithm at every size, in `config.rounds` interleaved passes
    (sweep/passes.py); `on_row(row, samples)` gets each row, after its last round, and its
    raw samples (only rank 0's matter); `on_measure(label, size_bytes, round)` runs before each
    measurement (the progress bar).

    `should_measure(algorithm, size_bytes)` runs ahead of each measurement, outside any timing; it
    returns False to skip one (a resumed run's finished rows; the same answer on every rank).
    A pinned NCCL variant that NCCL refuses on this machine is left out, in one line
    (algorithms/nccl.py `refused`).
    """
    accepted = [name for name in config.algorithms if not nccl.refused(name, world)]
    items = [allreduce_item(config, world, name, size // config.itemsize, hosts, before_clock)
             for name in accepted for size in config.sizes]
    wrong_total = passes.run(config, world, items, on_row, on_algorithm, should_measure,
                             on_measure)
    for collective, names in config.collectives:  # --collectives beyond AllReduce
        wrong_total += collectives.sweep(config, world, collective, names, on_row, on_algorithm,
                                         should_measure, hosts, before_clock, on_measure)
    return wrong_total


# --- the per-rank entry point ----------------------------------------------------------------

def measure_phases(session: Session) -> int:
    """Every world size of the run, one phase each: the sub-world of its first k ranks measures
    the sweep while the other ranks wait; a resumed run's finished rows are skipped."""
    config, env, device, progress = session.config, session.env, session.device, session.progress
    ranks_per_node = config.ranks_per_node or env.local_world_size
    done: list[Any] = [resume.done_keys(config.out_dir, config.run_id) if session.lead else None]
    dist.broadcast_object_list(done, src=0)  # every rank must skip the same rows
    done = done[0]
    total = config.measurements_per_size * len(config.sizes) * len(config.world_sizes)
    console = Console(total, enabled=session.lead, rounds=config.rounds)
    session.show = console.row
    wrong = 0
    try:
        for phase, world_size in enumerate(config.world_sizes, start=1):
            members = tuple(range(world_size))
            progress.at(phase, 0, f"building the groups of world size {world_size}",
                        tuple(range(env.world_size)))
            session.bind_phase(world_size)
            world = make_world(world_size, ranks_per_node, device, config.timeout_s)
            nccl.create(config.algorithms, world_size, group_timeout(device, config.timeout_s))
            steps = iter(range(1, DONE))

            def should_measure(algorithm: str, size_bytes: int) -> bool:
                if (algorithm, world_size, size_bytes) in done:
                    console.skipped()
                    return False
                progress.at(phase, next(steps), f"{algorithm}, world size {world_size}, "
                            f"{size_bytes} B", members)
                return True

            if world is not None:
                wrong += sweep(config, world, on_row=session.record, on_algorithm=console.algorithm,
                               should_measure=should_measure, hosts=session.hosts,
                               before_clock=session.before_clock(),
                               on_measure=lambda label, size, index: console.measuring(
                                   label, world_size, size, index))
            progress.at(phase, DONE, f"the end of world size {world_size}",
                        tuple(range(env.world_size)))
            end_phase(world, f"run-{world_size}", device)
    finally:
        console.close()
    return wrong


# --- the driver's side ---------------------------------------------------------------------

def prepare(config: RunConfig) -> None:
    """A fresh meta.json, or a resumed run's with this restart noted; a torn last row dropped
    before anything reads which rows are done."""
    stored = read_meta(config.out_dir)
    if stored.get("run_id") == config.run_id:
        restarts = stored.get("resumed", []) + [{
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": config.command}]
        # the machine's facts from this restart on: the steal of the time in between is not the run's
        update_meta(config.out_dir, resumed=restarts, machine=machine.facts_at_start())
    else:
        start_meta(config.out_dir, run_meta.host_meta(config))
    resume.repair_tail(config.out_dir)


def world_sizes_to_do(config: RunConfig) -> list[int]:
    """The world sizes with a row still missing (all of them, unless the run is resumed)."""
    done = resume.done_keys(config.out_dir, config.run_id)
    return [k for k in config.world_sizes
            if any(key not in done for key in collectives.measurement_keys(config, k))]


BENCHMARK = Benchmark("allreduce", run_meta.host_meta, measure_phases,
                      prepare=prepare, world_sizes=world_sizes_to_do, resumable=True)
