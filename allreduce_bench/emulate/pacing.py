"""`emulate --benchmarks ddp`'s link rate, calibrated on the hosts so DDP's AllReduce waits on the link,
not on the CPU gloo shares with backward (doc/ddp.md, "The overlap, seen")."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable

DDP_RANKS_PER_NODE = 1  # one rank per host: the CPU cores compute, the link communicates
COMM_PER_BACKWARD = 1.0  # the first candidate: the AllReduce as long as backward, on the link alone
CPU_SHARE = 0.3  # gloo's CPU time at most this share of the AllReduce, of the CPU the rank gets
MOST_COMM_PER_BACKWARD = 2.5  # past this little of the AllReduce can hide: `overlap_warning`
PROBES = 3  # candidate rates tried at most
WITHIN = 0.15  # a candidate whose AllReduce is this close to its target is kept


def ddp_rate_bps(settings, nodes: int, ranks_per_node: int, backward_s: float) -> float:
    """The uplink rate at which a ring AllReduce of ddp's gradients takes COMM_PER_BACKWARD x `backward_s`."""
    world = nodes * ranks_per_node
    return 2 * (world - 1) / world * settings.gradient_bytes * 8 / (COMM_PER_BACKWARD * backward_s)


def target_comm_s(probes: list[dict]) -> float:
    """How long the AllReduce should take: medians over every probe so far, as none depends on the rate."""
    def median(key: str) -> float:
        return statistics.median(p[key] for p in probes)
    cpu = median("comm_cpu_s") / median("cpu_rate")  # what gloo's CPU time costs the rank
    return max(median("backward_s") + cpu, cpu / CPU_SHARE)


def choose_rate(first_bps: float, probe: Callable[[float], dict]) -> tuple[float, list[dict]]:
    """(the rate, every probe): each candidate scaled from the one before by comm / target, until one is
    within WITHIN of its target; `probe(rate)` returns {backward_s, comm_s, comm_cpu_s, cpu_rate}."""
    tried: list[dict] = []
    rate = first_bps
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
            "cpu_share": CPU_SHARE, "within": WITHIN, "probes": tried}


def overlap_warning(tried: list[dict]) -> str | None:
    """One line where gloo needs so much CPU that an AllReduce leaving the cores to backward is far longer."""
    last = tried[-1]
    if last["target_comm_s"] <= MOST_COMM_PER_BACKWARD * last["backward_s"]:
        return None
    return (f"this machine cannot show much of DDP's overlap: gloo's AllReduce needs "
            f"{last['comm_cpu_s'] * 1e3:.0f} ms of CPU per step, so it must take "
            f"{last['target_comm_s'] * 1e3:.0f} ms to leave the cores to backward, more than "
            f"{MOST_COMM_PER_BACKWARD:g}x the {last['backward_s'] * 1e3:.0f} ms backward pass it "
            "could hide behind; more cores per rank (or a larger --batch-size) would show it")
