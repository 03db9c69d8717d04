"""The sweep on one (sub-)world: for each algorithm and size one measurement (build, time, check) and its row."""
from __future__ import annotations

import datetime as _dt
import sys
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from allreduce_bench.core import algorithms
from allreduce_bench.core.algorithms import nccl
from allreduce_bench.core.config import RunConfig
from allreduce_bench.core.measure import collective as measuring
from allreduce_bench.core.measure import machine, timing
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.console import Console
from allreduce_bench.core.measure.context import Benchmark
from allreduce_bench.core.measure.device import torch_dtype
from allreduce_bench.core.measure.progress import DONE
from allreduce_bench.core.measure.rank import Session
from allreduce_bench.core.measure.world import World, end_phase, group_timeout, make_world
from allreduce_bench.core.results import resume
from allreduce_bench.core.results.store import read_meta, start_meta, update_meta
from allreduce_bench.core.sweep import collectives, passes
from allreduce_bench.core.sweep.rows import Point, pooled_row
from allreduce_bench.core.text import wrapped


def allreduce_item(config: RunConfig, world: World, name: str, count: int, hosts: list[str]) -> passes.Item:
    def measure_once(sampling: timing.Sampling, check: bool):
        return measuring.measure(algorithms.lookup(name), world,
                                 measuring.Payload(count, torch_dtype(config.dtype)), sampling, check)

    return passes.Item(name, count * config.itemsize, measure_once,
                       lambda taken, wrong: pooled_row(config, world, Point(name, count), taken, wrong, hosts))


def left_out(config: RunConfig, world_size: int) -> list[str]:
    """The built-ins world size 1 leaves out: with one rank they have no steps (the backend's call stays)."""
    return [name for name in config.algorithms if name in algorithms.BUILT_IN and name != "native"
            and name not in nccl.VARIANTS] if world_size == 1 else []


def sweep(config: RunConfig, world: World, phase: passes.Phase, hosts: list[str]) -> int:
    """Every algorithm at every size, then every other collective's, in interleaved passes; #wrong summed."""
    out = left_out(config, world.size)
    if world.size == 1 and world.rank == 0:
        print(wrapped("allreduce-bench: world size 1 measures the backend's own call with no peer (NCCL "
                      "launches nothing for an in-place sum on one rank); busbw is 0 there by definition "
                      "(one rank moves nothing)" + (f", and {', '.join(out)} are left out (with one rank "
                                                    "they have no steps)" if out else "")),
              file=sys.stderr, flush=True)
    accepted = [name for name in config.algorithms if name not in out and not nccl.refused(name, world)]
    items = [allreduce_item(config, world, name, size // config.itemsize, hosts)
             for name in accepted for size in config.sizes]
    wrong_total = passes.run(config, world, items, phase)
    for collective, names in config.collectives:  # --collectives beyond AllReduce
        wrong_total += collectives.sweep(config, world, collective, names, phase, hosts)
    return wrong_total


# --- the per-rank entry point ----------------------------------------------------------------

class Phase:
    """One world size's sweep as this rank reports it: resumed rows, progress, rows and rank 0's tables."""

    def __init__(self, session: Session, console: Console, world_size: int, index: int, done: set):
        self.session, self.console, self.done = session, console, done
        self.world_size, self.index = world_size, index
        self.steps = iter(range(1, DONE))

    def wanted(self, label: str, size_bytes: int) -> bool:
        if (label, self.world_size, size_bytes) in self.done:
            self.console.skipped()
            return False
        self.session.progress.at(self.index, next(self.steps), f"{label}, world size "
                                 f"{self.world_size}, {size_bytes} B", tuple(range(self.world_size)))
        return True

    def measuring(self, label: str, size_bytes: int, round_index: int) -> None:
        self.console.measuring(label, self.world_size, size_bytes, round_index)

    def record(self, label: str, row: dict, samples) -> None:
        self.session.record(row, samples)
        self.console.row(label, row)

    def settled(self, label: str, world: World) -> None:
        self.console.table(label, world)


def measure_phases(session: Session) -> int:
    """Every world size, one phase each: the first k ranks measure while the others wait."""
    config, env, device, progress = session.config, session.env, session.device, session.progress
    launch = session.launch
    ranks_per_node = launch.ranks_per_node or env.local_world_size
    done: list[Any] = [resume.done_keys(launch.out_dir, launch.run_id) if session.writer else None]
    device.guarded(lambda: dist.broadcast_object_list(done, src=0), "the done rows' broadcast")  # skipped alike
    total = sum(config.measurements_per_size - len(left_out(config, k)) for k in launch.world_sizes) * len(config.sizes)
    console = Console(total, enabled=session.writer, rounds=config.rounds)
    wrong = 0
    everyone = tuple(range(env.world_size))
    try:
        for index, world_size in enumerate(launch.world_sizes, start=1):
            progress.at(index, 0, f"building the groups of world size {world_size}", everyone)
            session.bind_phase(world_size)
            world = make_world(world_size, ranks_per_node, device, launch.timeout_s)
            pinned = nccl.create(config.algorithms, world_size, group_timeout(device, launch.timeout_s))
            if world is not None:
                phase = Phase(session, console, world_size, index, done[0])
                wrong += sweep(config, replace(world, pinned=pinned), phase, session.hosts)
            progress.at(index, DONE, f"the end of world size {world_size}", everyone)
            end_phase(world, f"run-{world_size}", device)
            pinned.close()
    finally:
        console.close()
    return wrong


# --- the driver's side ---------------------------------------------------------------------

def prepare(config: RunConfig) -> None:
    """A fresh meta.json, or a resumed run's with this restart noted; a torn last row dropped."""
    stored = read_meta(config.launch.out_dir)
    if stored.get("run_id") == config.launch.run_id:
        restarts = stored.get("resumed", []) + [{
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": config.launch.command}]
        # the machine's facts from this restart on: the steal of the time in between is not the run's
        update_meta(config.launch.out_dir, resumed=restarts, machine=machine.facts_at_start())
    else:
        start_meta(config.launch.out_dir, run_meta.host_meta(config))
    resume.repair_tail(config.launch.out_dir)


def world_sizes_to_do(config: RunConfig) -> list[int]:
    """The world sizes with a row still missing."""
    done = resume.done_keys(config.launch.out_dir, config.launch.run_id)
    return [k for k in config.launch.world_sizes
            if any(key not in done and key[0] not in left_out(config, k)
                   for key in collectives.measurement_keys(config, k))]


BENCHMARK = Benchmark("allreduce", run_meta.host_meta, measure_phases,
                      prepare=prepare, world_sizes=world_sizes_to_do, resumable=True)
