"""The one per-rank entry point of every benchmark: join the world, hand the benchmark a `Session`, and turn a
lost peer, a timeout or Ctrl-C into one line and an exit code."""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from allreduce_bench.core.environment import RankEnv, export_for_env_init, launcher_env, master_of, under_elastic_agent
from allreduce_bench.core.errors import is_out_of_memory
from allreduce_bench.core.measure import binding, flight_recorder, link_peaks, nccl_debug, scheduling, stopped, world
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.console import RowBar
from allreduce_bench.core.measure.context import LocalRun, Run
from allreduce_bench.core.measure.device import Device, PeerTimeout, make_device, process_group_options
from allreduce_bench.core.measure.progress import (
    PEER_LOST_EXIT,
    Progress,
    failure_line,
    leave,
    leave_lost,
    peer_died,
    peer_silent,
)
from allreduce_bench.core.results import resume
from allreduce_bench.core.results.schema import COLUMNS, PEAK_COLUMNS, RESULTS_FILE
from allreduce_bench.core.results.store import (
    ResultsWriter,
    SamplesWriter,
    read_meta,
    start_meta,
    update_meta,
    write_meta,
    write_parquet,
)

LINGER_S = 3.0  # see progress.EndLine.exit


def _quiet_interrupt(signum, frame) -> None:
    # Ctrl-C reaches every rank of a local run at once; the launcher reports it in one line.
    os._exit(130)


@dataclass(frozen=True)
class Joined:
    """A rank in its world: device, binding, placement and who came (None: all launched ranks)."""

    device: Device
    binder: binding.Binder
    placement: binding.Placement
    presence: world.Presence | None


def join_world(run: Run, env: RankEnv, local: bool = False) -> Joined:
    """This rank's device, binding and place in the default group; one line and exit if it cannot join."""
    launch = run.launch
    nccl_debug.enable(launch)  # before NCCL's first call: it reads NCCL_DEBUG* once per process
    flight_recorder.enable(launch)  # before the process group: torch reads TORCH_FR_* then
    export_for_env_init(env)
    if under_elastic_agent():  # under torchrun or a local run: the agent handles ^C
        signal.signal(signal.SIGINT, _quiet_interrupt)
    device = make_device(launch.device, env.local_rank, env.local_world_size, launch.timeout_s)
    device.before_sample = run.hooks.call.before_sample(rank=env.rank)
    # before the binding (which depends on it) and before gloo starts the threads that inherit it
    sched = scheduling.apply(launch.sched, device.kind)
    # an emulated cluster's hosts share this machine's CPUs: its ranks are all local ranks here
    here = (env.rank, env.world_size) if launch.emulation else (env.local_rank, env.local_world_size)
    binder = binding.Binder.here(launch.bind, started_here=local,
                                 gpu_index=device.torch_device.index if device.kind == "cuda" else None,
                                 sched=sched.as_dict())
    placement = binder.bind(*here)
    options = process_group_options(launch.backend, device, launch.timeout_s)
    presence = None
    try:
        if run.benchmark.joins_present:
            presence = world.join_present(env, launch.backend, options, launch.timeout_s, socket.gethostname(),
                                          launch.ranks_per_node or env.local_world_size)
        else:
            dist.init_process_group(launch.backend, **options)
    except (RuntimeError, ValueError) as error:  # unreachable master, rendezvous timeout, ...
        where = ":".join(str(part or "?") for part in master_of(env))
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        leave(f"allreduce-bench: rank {env.rank}: could not join the world of {env.world_size} "
              f"({env.launcher}, master {where}): {first}",
              1 if presence or run.benchmark.joins_present else PEER_LOST_EXIT)
    return Joined(device, binder, placement, presence)


class Session:
    """One rank's services, the same for every benchmark; rank 0 writes rows and samples."""

    def __init__(self, run: Run, env: RankEnv, joined: Joined, progress: Progress, hosts: list[str],
                 local: bool = False):
        self.run, self.config, self.launch = run, run.config, run.launch
        self.env, self.device, self.progress = env, joined.device, progress
        self.local = local  # a rank of a local world, started by this host's driver
        self.binder, self.presence = joined.binder, joined.presence
        self.hosts = hosts  # hostname of every global rank, for the raw samples
        self.writer = env.rank == 0
        self.rows_done = 0
        out_dir = self.launch.out_dir
        # {"intra_GBps": ..., "inter_GBps": ...} as _gather_meta recorded them (measure/link_peaks.py)
        self.peaks = read_meta(out_dir).get("peaks", {}).get(str(env.world_size), {}) if self.writer else {}
        self.show: Callable[[dict], None] = lambda row: None  # the benchmark's console line
        self.bar: RowBar | None = None  # progress over the rows (expect)
        self._rows = ResultsWriter(out_dir, COLUMNS + PEAK_COLUMNS) if self.writer else None
        self._samples = SamplesWriter(out_dir) if self.writer else None

    def record(self, row: dict, samples=None) -> None:
        """Keep one finished measurement's row and raw samples (rank 0); every rank calls it."""
        if self.writer:
            assert self._rows is not None and self._samples is not None  # the writer's
            if samples is not None and len(samples):
                self._samples.append(samples)  # first: a row never points at missing samples
            row = self.with_peak(row)
            self._rows.append(row)
            if self.bar is not None:
                self.bar.show(self.show, row)
            else:
                self.show(row)
        self.rows_done += 1
        self.run.hooks.call.row_recorded(session=self)

    def expect(self, rows: int, what: str) -> None:
        if self.writer:
            self.bar = RowBar(rows, what)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def bind_phase(self, world_size: int) -> None:
        """Place the first `world_size` ranks again for their sub-world, into meta.json. Collective."""
        if self.binder is None:
            return
        members = binding.local_members(world_size, self.env.rank, self.hosts,
                                        bool(self.launch.emulation))
        mine = (self.binder.bind(members.index(self.env.rank), len(members)).as_dict()
                if self.env.rank in members else None)
        placements: list = [None] * self.env.world_size if self.writer else []  # to rank 0 alone: it writes them
        self.device.guarded(lambda: dist.gather_object(mine, placements if self.writer else None, dst=0),
                            "the placements' gather")
        if self.writer:
            placements = placements[:world_size]
            update_meta(self.launch.out_dir, binding={
                **read_meta(self.launch.out_dir).get("binding", {}), str(world_size): {
                    "summary": binding.summary(placements, self.hosts), "ranks": placements}})

    def with_peak(self, row: dict) -> dict:
        """The row with its link's peak and busbw as a percentage of it."""
        busbw = row.get("busbw_GBps")
        if busbw is None:
            return row
        link = row.get("link") or ("inter" if (row.get("nodes") or 1) > 1 else "intra")
        peak = dict(self.launch.link_peaks).get(f"{link}_GBps") or self.peaks.get(f"{link}_GBps")
        if not peak:
            return row
        return {**row, "link_peak_GBps": round(peak, 3), "busbw_pct_of_peak": round(100.0 * busbw / peak, 1)}


def rank_main(run: Run, env: RankEnv | None = None, local: LocalRun | None = None) -> bool:
    """Measure `run`'s benchmark on this rank; True where this process finishes the run."""
    env = env or launcher_env()
    assert env is not None, "a rank runs under the driver or a launcher"
    run.hooks.call.rank_starting(rank=env.rank)
    joined = join_world(run, env, local is not None)
    if joined.presence is not None:
        launched, env = env, joined.presence.env
        if env is None:  # came after the world formed, or its host is short of a rank
            print(f"allreduce-bench: rank {launched.rank}: the world was formed without it "
                  f"(it came late, or a rank of its host never came): it sits out", file=sys.stderr, flush=True)
            joined.presence.sit_out()
            return False
    progress = Progress(env.rank, env.world_size, master_of(env))
    # under an outer launcher, a SIGTERM (another rank failed, a time limit) is reported too
    with nullcontext() if local is not None else stopped.watch(run, progress, env.world_size):
        _measure_or_exit(run, env, joined, progress, local)
    if torch.__version__ < "2.8":  # freeing a group held the GIL gloo's worker may need (pytorch#154976)
        time.sleep(0.1)
    dist.destroy_process_group()
    if env.rank == 0:
        _write_parquet(run.launch.out_dir)
    return env.rank == 0


def _measure_or_exit(run: Run, env: RankEnv, joined: Joined, progress: Progress,
                     local: LocalRun | None) -> int:
    """The benchmark's #wrong; a lost peer, a timeout or Ctrl-C ends the process in one line."""
    launch = run.launch
    try:
        hosts = _gather_meta(run, env, joined)
        session = Session(run, env, joined, progress, hosts, local is not None)
        if run.benchmark.rows is not None:  # a benchmark that knows its rows (ddp's)
            session.expect(run.benchmark.rows(run.config), run.benchmark.name)
        wrong = run.benchmark.measure(session)
        session.close()
        if joined.presence is not None:
            joined.presence.end_world()
        nccl_debug.collect(launch, env.rank, env.world_size, joined.device.guarded)
        flight_recorder.dump(launch, env.rank)
    except (RuntimeError, PeerTimeout) as error:  # torch's DistBackendError is a RuntimeError
        if is_out_of_memory(error):
            raise  # not a lost peer: launch/reasons.py says "out of memory" in one line
        progress.end.claim_or_wait()
        if not (peer_died(error) or peer_silent(error)):
            traceback.print_exc()  # not a lost peer: maybe a bug, keep the evidence
        line = failure_line(env.rank, progress, error, launch.timeout_s)
        if local is not None:
            leave_lost(local.reasons, env.rank, progress)
        line += flight_recorder.after_failure(run, env.rank, env.world_size, local=local is not None)
        progress.end.exit(line, linger_s=LINGER_S if peer_died(error) else 0.0)
    except KeyboardInterrupt:  # srun/mpirun pass Ctrl-C to every rank
        progress.end.claim_or_wait()
        progress.end.exit(f"allreduce-bench: rank {env.rank}: interrupted at {progress.where}", 130)
    return wrong


def _write_parquet(out_dir) -> None:
    """results.parquet beside the CSV (which stays the record), where rows were measured."""
    if not (Path(out_dir) / RESULTS_FILE).exists():
        return
    try:
        write_parquet(out_dir)
    except (OSError, ValueError, ImportError) as error:
        print(f"allreduce-bench: results.parquet not written ({error}); results.csv is complete",
              file=sys.stderr)


def _gather_meta(run: Run, env: RankEnv, joined: Joined) -> list[str]:
    """Where every rank runs and its link peaks, into meta.json (rank 0); every rank's hostname."""
    device, launch = joined.device, run.launch
    probe_GBps = probe_bytes = None
    if device.kind == "cpu" and env.world_size > 1:
        probe_GBps, probe_bytes = link_peaks.probe(env.rank) or (None, None)
    infos: list = [None] * env.world_size if env.rank == 0 else []
    mine = {**run_meta.rank_info(device, env), "peaks": link_peaks.local_peaks(device),
            "placement": joined.placement.as_dict()}

    def exchange() -> list[str]:
        # the facts to rank 0 alone, the hostnames back to all: an all-gather of the facts would
        # send every rank every rank's (N^2 over the world, issue 53)
        dist.gather_object(mine, infos if env.rank == 0 else None, dst=0)
        names: list = [[info["hostname"] for info in infos] if env.rank == 0 else None]
        dist.broadcast_object_list(names, src=0)
        return names[0]

    hosts = device.guarded(exchange, "the hosts' gather")
    if env.rank != 0:
        return hosts
    per_rank = [{"rank": i, **info.pop("peaks")} for i, info in enumerate(infos)]
    placements = [info.pop("placement") for info in infos]
    world_peaks = link_peaks.world_peaks(per_rank, probe_GBps)
    if read_meta(launch.out_dir).get("run_id") != launch.run_id:
        start_meta(launch.out_dir, run.benchmark.meta(run.config))
    meta = read_meta(launch.out_dir)
    if len(infos) >= len(meta.get("hostnames", [])):  # a local sub-world does not shrink it
        meta.update(run_meta.world_meta(infos))
        run_meta.save_topologies(launch.out_dir, meta.get("gpu_topology"))
    meta.setdefault("peaks", {})[str(env.world_size)] = {
        **world_peaks, "probe": {"GBps": probe_GBps, "bytes": probe_bytes} if probe_GBps else None,
        "per_rank": per_rank}
    meta.setdefault("binding", {})[str(env.world_size)] = {
        "summary": binding.summary(placements, hosts), "ranks": placements}
    write_meta(launch.out_dir, meta)
    if resume.repair_tail(launch.out_dir):
        print("allreduce-bench: dropped a half-written last row of results.csv", file=sys.stderr)
    return hosts
