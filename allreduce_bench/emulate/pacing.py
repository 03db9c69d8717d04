"""`emulate --benchmarks ddp`: the link paced so the overlap shows, on a fast CPU as on a slow one.

DDP hides its AllReduce behind backward only where the AllReduce waits on the link. gloo's
AllReduce also costs CPU time (its threads copy and add every byte), taken from the CPU the
rank's backward runs on: on a 2-core machine at a rate where gloo keeps the CPU busy for half the
AllReduce, nothing is hidden (issue 43: 0-10% at 4.97 Gbit/s, paced to backward alone). So
with --inter-bandwidth auto the rate is calibrated on the emulated hosts themselves
(`choose_rate`): the AllReduce should take the longer of backward lengthened by gloo's CPU
time (the link is then busy as long as backward runs, which the bucket-pipeline model of
ddp/analysis.py finds hides the most) and that CPU time / CPU_SHARE, i.e. gloo's CPU time at
most CPU_SHARE of the AllReduce. gloo's CPU time counts over the CPU a rank gets, measured as
its backward's CPU seconds per second: about 1 with a core per rank, 0.5 under `--host-cpu
node0=50%`, whose quota backward and gloo's threads share (judged against a whole CPU, that
run's 87 ms of gloo CPU in a 186 ms AllReduce looked like 47% but was 94% of the rank's).
Each probe (emulate/probe.py `ddp`) runs at a candidate rate where `ddp` will run (namespaces,
shaped link, --host-cpu's cgroups) and measures backward, the CPU it got, the AllReduce alone
and its CPU time; the next candidate scales the rate by how far the AllReduce is from its
target (its time goes as 1 / rate).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable

DDP_RANKS_PER_NODE = 1  # one rank per host: the CPU cores compute, the link communicates
# The first candidate: the AllReduce as long as backward on the link alone.
COMM_PER_BACKWARD = 1.0
# gloo's CPU time at most this share of the AllReduce, of the CPU the rank gets: at 2 Gbit/s on
# the 2-core VM (about 21%) 35% was hidden, at 4.97 Gbit/s (about 50%) nothing (issue 43).
CPU_SHARE = 0.3
# Past this, the AllReduce is so much longer than backward that little of it can hide: the
# run says so (`overlap_warning`).
MOST_COMM_PER_BACKWARD = 2.5
PROBES = 3  # candidate rates tried at most
WITHIN = 0.15  # a candidate whose AllReduce is this close to its target is kept


def ddp_rate_bps(settings, nodes: int, ranks_per_node: int, backward_s: float) -> float:
    """The first candidate: the uplink rate at which ddp's AllReduce would take
    COMM_PER_BACKWARD x `backward_s` on the link alone: a ring over N ranks sends 2(N-1)/N of
    the gradients (ddp's DdpSettings.gradient_bytes) through each host's uplink."""
    world = nodes * ranks_per_node
    return 2 * (world - 1) / world * settings.gradient_bytes * 8 / (COMM_PER_BACKWARD * backward_s)


def target_comm_s(probes: list[dict]) -> float:
    """How long the AllReduce should take, from the probes' backward, CPU time and CPU per rank:
    medians over every probe so far, as none depends on the rate (one probe's backward moved 2x
    under load)."""
    def median(key: str) -> float:
        return statistics.median(p[key] for p in probes)
    cpu = median("comm_cpu_s") / median("cpu_rate")  # what gloo's CPU time costs the rank
    return max(median("backward_s") + cpu, cpu / CPU_SHARE)


def choose_rate(first_bps: float, probe: Callable[[float], dict]) -> tuple[float, list[dict]]:
    """(the rate, every probe with its rate and CPU share): `probe(rate)` shapes the link to
    `rate` and returns {backward_s, comm_s, comm_cpu_s, cpu_rate}; up to PROBES candidates, each scaled
    from the one before by comm / target (its target from every probe so far), stopping at one
    within WITHIN of its target."""
    rate, tried = first_bps, []
    for _ in range(PROBES):
        found = probe(rate)
        target = target_comm_s([*tried, found])
        share = found["comm_cpu_s"] / (found["comm_s"] * found["cpu_rate"])
        tried.append({"rate_bps": rate, **found, "cpu_share": share, "target_comm_s": target})
        ratio = found["comm_s"] / target
        if abs(ratio - 1) <= WITHIN or not math.isfinite(ratio):
            return rate, tried
        rate *= ratio
    return rate, tried


def calibration_meta(tried: list[dict]) -> dict:
    """meta.json's emulation.calibration: the rule and every probe behind the rate."""
    return {"rule": f"AllReduce = max(backward + its CPU time / c, its CPU time / ({CPU_SHARE:g} x c)), c "
                    "the CPU seconds per second a rank's backward got; "
                    "each candidate rate scaled by comm / target, from the rate that paces the link "
                    "alone to backward timed on host 0",
            "cpu_share": CPU_SHARE, "within": WITHIN,
            "probes": tried}


def overlap_warning(tried: list[dict]) -> str | None:
    """One line where this machine cannot show DDP's overlap: gloo needs so much CPU that an
    AllReduce long enough to leave the cores to backward is far longer than backward."""
    last = tried[-1]
    if last["target_comm_s"] <= MOST_COMM_PER_BACKWARD * last["backward_s"]:
        return None
    return (f"this machine cannot show much of DDP's overlap: gloo's AllReduce needs "
            f"{last['comm_cpu_s'] * 1e3:.0f} ms of CPU per step, so it must take "
            f"{last['target_comm_s'] * 1e3:.0f} ms to leave the cores to backward, more than "
            f"{MOST_COMM_PER_BACKWARD:g}x the {last['backward_s'] * 1e3:.0f} ms backward pass it "
            "could hide behind; more cores per rank (or a larger --batch-size) would show it")
