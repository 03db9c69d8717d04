"""One emulated run: build the cluster, set its links (measured or given), run each benchmark's
command on every host at once, record the emulation in meta.json, and remove everything."""
from __future__ import annotations

import shlex
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allreduce_bench.core.hooks import Runnable
from allreduce_bench.core.results.resume import kept
from allreduce_bench.core.results.store import update_meta
from allreduce_bench.core.text import wrapped
from allreduce_bench.emulate import rates
from allreduce_bench.emulate.cluster import (
    PREFIX,
    EmulatedCluster,
    Emulation,
    check_can_emulate,
    pid_alive,
    remove_namespaces,
    stale_namespaces,
)
from allreduce_bench.emulate.faults import CpuLimits, remove_cgroups, stale_cgroups
from allreduce_bench.emulate.pacing import (
    COMM_PER_BACKWARD,
    CPU_SHARE,
    calibration_meta,
    choose_rate,
    ddp_rate_bps,
    overlap_warning,
)
from allreduce_bench.emulate.processes import FirstFailure, run_on_hosts, terminate_as_interrupt


@dataclass(frozen=True)
class Plan:
    """What the emulate command validated: the cluster, its links, and per benchmark its options, config
    and `Runnable`."""

    nodes: int
    ranks_per_node: int
    rate_bps: float | None  # None: auto
    latency_s: float
    inter_ratio: float
    forwarded: dict[str, list[str]]
    configs: dict[str, Any]
    out_dir: Path
    runnables: dict[str, Runnable]
    host_rates: dict[int, float] = field(default_factory=dict)  # host -> bit/s (--host-bandwidth)
    host_cpu: dict[int, float] = field(default_factory=dict)  # host -> share of a CPU (--host-cpu)

    def faults_meta(self) -> dict:
        return {"host_bandwidth": {f"node{i}": rates.format_tc_rate(r) for i, r in self.host_rates.items()},
                "host_cpu": {f"node{i}": f"{share:.0%}" for i, share in self.host_cpu.items()}}


LAUNCHER_LOG = "launcher.log"  # every host's torchrun output, tracebacks included


def _say(line: str) -> None:
    print(wrapped(f"emulate: {line}"), file=sys.stderr, flush=True)


def clean_stale() -> None:
    from allreduce_bench.emulate.slurm import stale_slurm

    stale = stale_namespaces()
    if stale:
        remove_namespaces(stale)
        _say(f"removed {len(stale)} namespace(s) left by an earlier run")
    if stale_slurm():
        _say("stopped the daemons of an emulated Slurm cluster left by an earlier run")
    remove_cgroups(stale_cgroups(pid_alive))  # --host-cpu's, once their processes are gone


def links_of(cluster: EmulatedCluster, plan: Plan, cpu: CpuLimits) -> Emulation:
    """The emulation's parameters: the rate given, or measured here (ddp: calibrated on the hosts)."""
    rate, measured, backward, tried = plan.rate_bps, None, None, None
    if rate is None and list(plan.configs) == ["ddp"]:  # the link paced so the overlap shows
        settings = plan.configs["ddp"].settings
        _say("timing ddp's backward pass here for a first rate, then ddp's AllReduce on the hosts "
             "to calibrate it against backward and gloo's CPU time (--inter-bandwidth auto)")
        backward = cluster.probe_backward(settings)

        def probe(rate_bps: float) -> dict:
            cluster.shape(rate_bps, plan.latency_s, plan.host_rates)
            found = cluster.probe_ddp(settings, rate_bps, cpu.procs)
            _say(f"  at {rates.format_tc_rate(rate_bps)}: AllReduce {found['comm_s'] * 1e3:.0f} ms, "
                 f"{found['comm_cpu_s'] * 1e3:.0f} ms of it CPU; backward {found['backward_s'] * 1e3:.0f} ms "
                 f"at {found['cpu_rate']:.2f} CPU")
            return found

        rate, tried = choose_rate(ddp_rate_bps(settings, plan.nodes, plan.ranks_per_node, backward), probe)
        if warning := overlap_warning(tried):
            _say(warning)
    elif rate is None:
        _say("measuring the intra-node point-to-point bandwidth on node0 (--inter-bandwidth auto)")
        measured = cluster.probe_intra_p2p()
        rate = measured * 8e9 / plan.inter_ratio
    return Emulation(plan.nodes, plan.ranks_per_node, rate, plan.latency_s, measured,
                     plan.inter_ratio if measured else None, backward,
                     COMM_PER_BACKWARD if backward else None,
                     calibration=calibration_meta(tried) if tried else None)


def describe(cluster: EmulatedCluster, emulation: Emulation, out_dir: Path) -> str:
    measured = emulation.intra_p2p_GBps
    return (f"{emulation.nodes} hosts x {emulation.ranks_per_node} ranks in namespaces "
            f"{cluster.hosts[0]}..; inter-node link {rates.format_tc_rate(emulation.inter_rate_bps)}"
            + (f" (1/{emulation.inter_ratio:g} of the {measured:.3f} GB/s measured intra-node p2p)"
               if measured else "")
            + (f" (calibrated on the hosts: DDP's AllReduce "
               f"{emulation.calibration['probes'][-1]['target_comm_s'] * 1e3:.0f} ms, the longer of "
               f"backward + gloo's CPU time and gloo's CPU time / {CPU_SHARE:g}, that CPU time over the "
               f"{emulation.calibration['probes'][-1]['cpu_rate']:.2f} CPU a rank gets)"
               if emulation.calibration else "")
            + (f", +{emulation.inter_latency_s * 1e3:g} ms" if emulation.inter_latency_s else "")
            + f" -> {out_dir}")


def run_emulated(plan: Plan) -> int:
    """Every benchmark of the plan, one after the other on the same shaping; an exit code."""
    check_can_emulate()
    clean_stale()
    out_dir = Path(plan.out_dir).absolute()
    cluster = EmulatedCluster(plan.nodes, plan.ranks_per_node)
    with terminate_as_interrupt(), CpuLimits(f"{PREFIX}{cluster.token}", plan.host_cpu) as cpu, cluster:
        emulation = links_of(cluster, plan, cpu)
        cluster.shape(emulation.inter_rate_bps, emulation.inter_latency_s, plan.host_rates)
        _say(describe(cluster, emulation, out_dir) + _faults(plan))
        code = 0
        for step, (benchmark, args) in enumerate(plan.forwarded.items(), start=1):
            try:
                code = _run_one(Shaped(cluster, emulation, cpu, out_dir), plan.runnables[benchmark], args,
                                plan.configs[benchmark], f"[{step}/{len(plan.forwarded)}] {benchmark}") or code
            except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or SIGTERM/SIGHUP
                code = stop.code if isinstance(stop, SystemExit) and isinstance(stop.code, int) else 130
                how = signal.Signals(code - 128).name if 128 < code < 160 else f"exit {code}"
                _say(f"interrupted ({how}); " + kept(out_dir, f"`allreduce-bench emulate "
                                                              f"--resume {out_dir}` and the same options"))
                return code
            finally:
                if (out_dir / "meta.json").exists():
                    update_meta(out_dir, emulation={**emulation.as_meta(), **plan.faults_meta(),
                                                    "command": shlex.join(sys.argv)})
        return code


@dataclass(frozen=True)
class Shaped:
    """The shaped cluster the benchmarks run on, one after the other, and where they write."""

    cluster: EmulatedCluster
    emulation: Emulation
    cpu: CpuLimits
    out_dir: Path


def _run_one(on: Shaped, runnable: Runnable, args: list[str], config: Any, step: str) -> int:
    """One benchmark on every host; its own exit code where it declares one (health's 0/3/1)."""
    cluster, out_dir = on.cluster, on.out_dir
    watch, since = runnable.watch, time.time()
    command = [runnable.command, *args, "--out", str(out_dir)]
    _say(f"{step}: `allreduce-bench {shlex.join(command[:-2])}` on {cluster.nodes} hosts x "
         f"{cluster.ranks_per_node} ranks")
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / LAUNCHER_LOG
    watching = watch(out_dir, since, config) if watch else FirstFailure()
    code = run_on_hosts(cluster, command, on.emulation, on.cpu.procs, watching, log)
    stopped = getattr(watching, "stopped", None)
    if stopped:  # a benchmark without its own verdict: say who stopped it
        if (out_dir / "meta.json").exists():
            update_meta(out_dir, stopped=stopped)
        _say(f"{step} stopped: {stopped['host']}: {stopped['how']}; the rows completed before are kept "
             f"in {out_dir} (meta.json's `stopped`)")
    _say(f"{step} ended in {time.time() - since:.0f} s (exit code {code}; the launchers' output: {log})")
    return code


def _faults(plan: Plan) -> str:
    said = [f"node{i} at {rates.format_tc_rate(r)}" for i, r in plan.host_rates.items()]
    said += [f"node{i} at {share:.0%} of a CPU" for i, share in plan.host_cpu.items()]
    return f"; faults put in: {', '.join(said)}" if said else ""


def hold_slurm(nodes: int, rate_bps: float | None, latency_s: float, inter_ratio: float,
               host_rates: dict[int, float], cpus: int) -> int:
    """`emulate --slurm`: a Slurm cluster held until Ctrl-C/SIGTERM; its exports also in <state>/env.sh."""
    from allreduce_bench.emulate.slurm import slurm_cluster

    if rate_bps is None:  # auto: measured on a bare cluster first, as `emulate` does
        check_can_emulate()
        with EmulatedCluster(2, 2) as probe:
            rate_bps = probe.probe_intra_p2p() * 8e9 / inter_ratio
    with terminate_as_interrupt():
        try:
            with slurm_cluster(nodes, rate_bps, latency_s, host_rates, cpus) as slurm:
                env_file = slurm.root / "env.sh"
                env_file.write_text(slurm.exports())
                slowed = "".join(f", node{i} at {rates.format_tc_rate(r)}" for i, r in host_rates.items())
                _say(f"Slurm cluster node[0-{nodes - 1}] up: {nodes} hosts in namespaces "
                     f"{slurm.cluster.hosts[0]}.., inter-node link {rates.format_tc_rate(rate_bps)}"
                     f"{slowed}; slurmctld on {slurm.control_host}")
                print(slurm.exports(), flush=True)
                _say(f"in another shell: source {env_file}; srun -N {nodes} allreduce-bench run "
                     "--quick. Ctrl-C stops it and removes everything.")
                while True:
                    time.sleep(3600)
        except (KeyboardInterrupt, SystemExit) as stop:
            _say("stopped; every namespace and daemon removed")
            return 0 if isinstance(stop, KeyboardInterrupt) or stop.code in (130, 143) else 1
