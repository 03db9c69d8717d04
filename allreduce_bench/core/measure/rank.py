"""The one per-rank entry point of every benchmark under every launcher, and what a benchmark
declares.

`rank_main(config, benchmark)` joins the world, gathers where every rank runs into meta.json,
hands the benchmark a `Session` (device, progress, the writer of rows and samples), and turns a
lost peer, a timeout or Ctrl-C into one line and an exit code. A benchmark only says what it
builds and times (`Benchmark.measure(session) -> #wrong`) and what its driver does around the
ranks (`prepare`, `world_sizes`, `finish`): launch/driver.py runs any benchmark it is handed.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from allreduce_bench.core.environment import RankEnv, export_for_env_init, launcher_env, master_of, under_elastic_agent
from allreduce_bench.core.errors import UsageError, is_out_of_memory
from allreduce_bench.core.measure import (
    binding,
    flight_recorder,
    link_peaks,
    nccl_debug,
    scheduling,
    stopped,
    world,
)
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.console import RowBar
from allreduce_bench.core.measure.device import PeerTimeout, make_device, process_group_options
from allreduce_bench.core.measure.faults import (
    Fault,
    Progress,
    claim_or_wait,
    exit_now,
    failure_line,
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
from allreduce_bench.core.units import parse_tc_rate

LINGER_S = 3.0  # see faults.exit_now


def _quiet_interrupt(signum, frame) -> None:
    # Ctrl-C reaches every rank of a local run at once; the launcher reports it in one line.
    os._exit(130)


def join_world(config, env: RankEnv | None, present: bool = False, local: bool = False):
    """(this rank's device, its Binder, where it runs, its Presence) and its place in the
    default process group, the same way for every per-rank entry point (run, links, ddp) and
    every launcher. `config` needs
    backend, device, timeout_s and bind: the binding is applied before the process group's
    threads start. A rank that cannot join exits with one line. `present`: the world is made
    of the ranks that arrive within --timeout (measure/world.py `join_present`: the Presence,
    else None; this rank's place in it is `presence.env`, None when it sits out). `local`: a
    rank of a local world, started by this host's driver."""
    if env is None:
        raise RuntimeError("a per-rank entry point needs a launcher's environment (RANK, WORLD_SIZE, ...)")
    nccl_debug.enable(config)  # before NCCL's first call: it reads NCCL_DEBUG* once per process
    flight_recorder.enable(config)  # before the process group: torch reads TORCH_FR_* then
    export_for_env_init(env)
    if under_elastic_agent():  # under torchrun or a local run: the agent handles ^C
        signal.signal(signal.SIGINT, _quiet_interrupt)
    device = make_device(config.device, env.local_rank, env.local_world_size, config.timeout_s)
    # before the binding (which depends on it) and before gloo starts the threads that inherit it
    sched = scheduling.apply(getattr(config, "sched", "other"), device.kind)
    # an emulated cluster's hosts share this machine's CPUs: its ranks are all local ranks here
    here = (env.rank, env.world_size) if config.emulation else (env.local_rank, env.local_world_size)
    binder = binding.Binder.here(config.bind, started_here=local,
                                 gpu_index=device.torch_device.index if device.kind == "cuda" else None,
                                 sched=sched.as_dict())
    placement = binder.bind(*here)
    options = process_group_options(config.backend, device, config.timeout_s)
    presence = None
    try:
        if present:
            presence = world.join_present(env, config.backend, options, config.timeout_s, socket.gethostname(),
                               getattr(config, "ranks_per_node", None) or env.local_world_size)
        else:
            dist.init_process_group(config.backend, **options)
    except (RuntimeError, ValueError) as error:  # unreachable master, rendezvous timeout, ...
        where = ":".join(str(part or "?") for part in master_of(env))
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        exit_now(f"allreduce-bench: rank {env.rank}: could not join the world of {env.world_size} "
                 f"({env.launcher}, master {where}): {first}", **({"code": 1} if present else {}))
    return device, binder, placement, presence


@dataclass(frozen=True)
class Benchmark:
    """What a benchmark declares: what its ranks measure, handed to the driver by its command.

    On every rank: `measure(session) -> #wrong`, rows through `session.record`; `meta(config)`
    is the meta.json a new run starts with. On the writer (the local driver, or rank 0 under a
    launcher): `prepare(config)` before any rank starts, `world_sizes(config)` the local worlds
    still to start (None: every world size of the config). What comes after the ranks (summary,
    figures, verdicts) is the command's. `resumable`: a stopped run says how to continue it.
    `joins_present`: its world is made of the ranks that arrive, not of all launched. Every
    field is a module-level function, so spawned ranks receive the declaration by reference."""

    name: str
    meta: Callable[[Any], dict]  # each takes the benchmark's own config
    measure: Callable[[Session], int]
    prepare: Callable[[Any], None] | None = None
    world_sizes: Callable[[Any], list[int]] | None = None
    resumable: bool = False
    joins_present: bool = False  # its world: the ranks that arrive in --timeout (health)
    # (config, {launched rank: exit code of each failed rank}, since) -> exit code: the local
    # driver's verdict from what survived when a rank died (health), instead of its one line
    salvage: Callable[..., int] | None = None


class Session:
    """One rank's measuring context: the same for every benchmark."""

    def __init__(self, config, env: RankEnv, device, progress: Progress, hosts: list[str],
                 binder: binding.Binder | None = None, presence: world.Presence | None = None,
                 local: bool = False):
        self.config, self.env, self.device, self.progress = config, env, device, progress
        self.local = local  # a rank of a local world, started by this host's driver
        self.binder = binder
        self.presence = presence  # who came, in a world of the ranks that arrive (health)
        self.hosts = hosts  # hostname of every global rank, for the raw samples
        self.lead = env.rank == 0  # rank 0 is the only writer
        self.fault = Fault.from_env()
        self.rows_done = 0
        # {"intra_GBps": ..., "inter_GBps": ...} as _gather_meta recorded them (measure/link_peaks.py)
        self.peaks = read_meta(config.out_dir).get("peaks", {}).get(str(env.world_size), {}) if self.lead else {}
        self.show: Callable[[dict], None] = lambda row: None  # the benchmark's console line
        self.bar: RowBar | None = None  # progress over the rows (expect)
        self._rows = ResultsWriter(config.out_dir, COLUMNS + PEAK_COLUMNS) if self.lead else None
        self._samples = SamplesWriter(config.out_dir) if self.lead else None

    def record(self, row: dict, samples=None) -> None:
        """Keep one finished measurement: its row and, on rank 0, its raw per-rank samples
        (a DataFrame in the samples schema, or None). Called on every rank: the test-only fault
        hook fires between two measurements on whichever rank it names."""
        if self.lead:
            assert self._rows is not None and self._samples is not None  # the lead's writers
            if samples is not None and len(samples):
                self._samples.append(samples)  # first: a row never points at missing samples
            row = self.with_peak(row)
            self._rows.append(row)
            if self.bar is not None:
                self.bar.show(self.show, row)
            else:
                self.show(row)
        self.rows_done += 1
        if self.fault:
            self.fault.after_row(self.env.rank, self.rows_done, self._rows_on_disk)

    def _rows_on_disk(self) -> int:
        """Rows in results.csv now (header and a half-written row not counted); the test fault
        hook waits for the writer with it."""
        path = self.config.out_dir / RESULTS_FILE
        return max(0, path.read_bytes().count(b"\n") - 1) if path.exists() else 0

    def expect(self, rows: int, what: str) -> None:
        """Show a progress bar over the `rows` this run will record (rank 0, a terminal)."""
        if self.lead:
            self.bar = RowBar(rows, what)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def bind_phase(self, world_size: int) -> None:
        """Before the sub-world of the first `world_size` ranks measures: its ranks on each
        host are placed again as that many local ranks (the others wait, where they are), and
        rank 0 writes the placements to meta.json `binding.<world_size>`. Collective."""
        if self.binder is None:
            return
        members = binding.local_members(world_size, self.env.rank, self.hosts,
                                        bool(self.config.emulation))
        mine = (self.binder.bind(members.index(self.env.rank), len(members)).as_dict()
                if self.env.rank in members else None)
        placements: list = [None] * self.env.world_size
        dist.all_gather_object(placements, mine)
        if self.lead:
            placements = placements[:world_size]
            update_meta(self.config.out_dir, binding={
                **read_meta(self.config.out_dir).get("binding", {}), str(world_size): {
                    "summary": binding.summary(placements, self.hosts), "ranks": placements}})

    def before_clock(self):
        """What this rank runs before each sample's clock starts (the test hook's delay)."""
        return self.fault.before_clock(self.env.rank) if self.fault else None

    def with_peak(self, row: dict) -> dict:
        """`link_peak_GBps` (the link class bounding this row's world: its `link`, else intra
        inside one node and inter across nodes; an emulated cluster's shaped rate) and busbw as
        a percentage of it."""
        busbw = row.get("busbw_GBps")
        if busbw is None:
            return row
        link = row.get("link") or ("inter" if (row.get("nodes") or 1) > 1 else "intra")
        peak = self.peaks.get(f"{link}_GBps")
        emulation = str(row.get("emulation") or "")
        if link == "inter" and "@" in emulation:
            try:
                peak = parse_tc_rate(emulation.split("@", 1)[1]) / 8e9
            except UsageError:
                pass
        if not peak:
            return row
        return {**row, "link_peak_GBps": round(peak, 3), "busbw_pct_of_peak": round(100.0 * busbw / peak, 1)}


def rank_main(config, benchmark: Benchmark, env: RankEnv | None = None, dump_verdict=None,
              local=None) -> bool:
    """Measure `benchmark` on this rank; returns whether this process finishes the run: rank 0,
    or the first rank of a world of the ranks that came (rank 0 may sit out). `dump_verdict`:
    the hang feature's line on Flight Recorder dumps (Extensions.dump_verdict), for rank 0's
    failure line under a launcher. `local`: the LocalRun of a local world's driver (None under
    a launcher).

    A collective that fails or times out ends this process at once with exit code 3 and one
    line naming the step and the missing rank (see faults.py); rows already written stay.
    """
    env = env or launcher_env()
    assert env is not None, "a rank runs under the driver or a launcher"
    fault = Fault.from_env()
    if fault and env is not None:
        fault.at_start(env.rank)  # test-only: a rank that hangs while it starts
    device, binder, placement, presence = join_world(config, env, benchmark.joins_present,
                                                     local is not None)
    if presence is not None:
        launched, env = env, presence.env
        if env is None:  # came after the world formed, or its host is short of a rank
            print(f"allreduce-bench: rank {launched.rank}: the world was formed without it "
                  f"(it came late, or a rank of its host never came): it sits out", file=sys.stderr, flush=True)
            presence.sit_out()
            return False
    progress = Progress(env.rank, env.world_size, master_of(env))
    # under an outer launcher, a SIGTERM (another rank failed, a time limit) is reported too
    with nullcontext() if local is not None else \
            stopped.watch(env.rank, env.world_size, progress, config, dump_verdict):
        _measure_or_exit(config, benchmark, env, device, placement, binder, progress,
                         presence, dump_verdict, local)
    dist.destroy_process_group()
    if env.rank == 0:
        _write_parquet(config.out_dir)
    return env.rank == 0


def _measure_or_exit(config, benchmark: Benchmark, env: RankEnv, device, placement, binder,
                     progress: Progress, presence=None, dump_verdict=None, local=None) -> int:
    """The benchmark's #wrong; a lost peer, a timeout or Ctrl-C ends the process with one line
    (and, in a local world, the ranks it gave up on for its driver: faults.py `leave_lost`)."""
    try:
        hosts = _gather_meta(config, benchmark, env, device, placement)
        session = Session(config, env, device, progress, hosts, binder, presence, local is not None)
        if getattr(config, "rows_expected", None):  # a config that knows its rows (ddp's)
            session.expect(config.rows_expected, benchmark.name)
        wrong = benchmark.measure(session)
        session.close()
        if presence is not None:
            presence.end_world()
        nccl_debug.collect(config, env.rank, env.world_size)
        flight_recorder.dump(config, env.rank)
    except (RuntimeError, PeerTimeout) as error:  # torch's DistBackendError is a RuntimeError
        if is_out_of_memory(error):
            raise  # not a lost peer: launch/reasons.py says "out of memory" in one line
        claim_or_wait()
        if not (peer_died(error) or peer_silent(error)):
            traceback.print_exc()  # not a lost peer: maybe a bug, keep the evidence
        line = failure_line(env.rank, progress, error, config.timeout_s)
        if local is not None:
            leave_lost(local.reasons, env.rank, progress)
        line += flight_recorder.after_failure(config, env.rank, env.world_size,
                                              local=local is not None,
                                              dump_verdict=dump_verdict)
        exit_now(line, linger_s=LINGER_S if peer_died(error) else 0.0)
    except KeyboardInterrupt:  # srun/mpirun pass Ctrl-C to every rank
        claim_or_wait()
        exit_now(f"allreduce-bench: rank {env.rank}: interrupted at {progress.where}", 130)
    return wrong


def _write_parquet(out_dir) -> None:
    """results.parquet beside the CSV once this world is done; the CSV stays the record.
    Nothing when no row was measured (a health check whose only pair lost a member)."""
    if not (Path(out_dir) / RESULTS_FILE).exists():
        return
    try:
        write_parquet(out_dir)
    except (OSError, ValueError, ImportError) as error:
        print(f"allreduce-bench: results.parquet not written ({error}); results.csv is complete",
              file=sys.stderr)


def _gather_meta(config, benchmark: Benchmark, env: RankEnv, device,
                 placement: binding.Placement) -> list[str]:
    """Where every rank runs and the link peaks it can know, into meta.json (rank 0 writes; a
    new run starts its meta here when no driver did, as under a launcher). On CPU, ranks 0 and 1
    first time a short point-to-point probe; the world's peaks go to meta.json `peaks.<N>`, its
    ranks' placements to `binding.<N>`. Returns every rank's hostname (for the raw samples)."""
    probe_GBps = probe_bytes = None
    if device.kind == "cpu" and env.world_size > 1:
        probe_GBps, probe_bytes = link_peaks.probe(env.rank) or (None, None)
    infos: list = [None] * env.world_size
    dist.all_gather_object(infos, {**run_meta.rank_info(device, env),
                                   "peaks": link_peaks.local_peaks(device),
                                   "placement": placement.as_dict()})
    hosts = [info["hostname"] for info in infos]
    if env.rank != 0:
        return hosts
    per_rank = [{"rank": i, **info.pop("peaks")} for i, info in enumerate(infos)]
    placements = [info.pop("placement") for info in infos]
    world_peaks = link_peaks.world_peaks(per_rank, probe_GBps)
    if read_meta(config.out_dir).get("run_id") != config.run_id:
        start_meta(config.out_dir, benchmark.meta(config))
    meta = read_meta(config.out_dir)
    if len(infos) >= len(meta.get("hostnames", [])):  # a local sub-world does not shrink it
        meta.update(run_meta.world_meta(infos))
        run_meta.save_topologies(config.out_dir, meta.get("gpu_topology"))
    meta.setdefault("peaks", {})[str(env.world_size)] = {
        **world_peaks, "probe": {"GBps": probe_GBps, "bytes": probe_bytes} if probe_GBps else None,
        "per_rank": per_rank}
    meta.setdefault("binding", {})[str(env.world_size)] = {
        "summary": binding.summary(placements, hosts), "ranks": placements}
    write_meta(config.out_dir, meta)
    if resume.repair_tail(config.out_dir):
        print("allreduce-bench: dropped a half-written last row of results.csv", file=sys.stderr)
    return hosts
