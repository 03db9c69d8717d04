"""The summary's lines about the machine a run measured, and for unstable rows the advice that
would help on it (the first cause that applies)."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.analysis.noise import (
    BUSY_BEFORE,
    FEW_SAMPLES,
    OTHERS_NOTABLE,
    STEAL_NOTABLE,
    flag,
    two_state_rows,
    unstable_rows,
    why_unstable,
)
from allreduce_bench.core.analysis.tables import label_runs, run_metas
from allreduce_bench.core.metrics import CONFIDENCE, ROUNDS_ALPHA, ROUNDS_DISAGREE, TRUSTED_TO
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.units import format_size


def machine_line(meta: dict) -> str | None:
    """'machine: 2 CPUs allowed for 2 ranks; idle driver ...'; None for runs without the facts."""
    facts = meta.get("machine")
    if not isinstance(facts, dict):
        return None
    ranks = max((int(k) for k in meta.get("binding", {}) or {}), default=None) or max(
        (meta.get("config") or {}).get("world_sizes") or [0]) or "?"
    idle = facts.get("cpuidle") or {}
    parts = [f"{facts.get('cpus_allowed', '?')} CPUs allowed for {ranks} ranks",
             f"idle driver {idle.get('driver') or 'not known'} (governor "
             f"{idle.get('governor') or 'not known'})"]
    if facts.get("steal_share") is not None:
        parts.append(f"steal {100 * facts['steal_share']:.1f}% of CPU time over the run")
    if facts.get("others_share") is not None:
        parts.append(f"other processes {100 * facts['others_share']:.0f}% of CPU time over the run")
    elif facts.get("load_average_start") is not None:
        parts.append(f"load average {facts['load_average_start']:.2f} at the start")
    sched = sched_of(meta)
    if sched:
        parts.append(sched)
    return "machine: " + "; ".join(parts)


def rank_scheds(meta: dict) -> list[dict]:
    """Every rank's placement in the run's largest world (meta.json `binding`)."""
    found = meta.get("binding") or {}
    largest = max(found, key=int, default=None)
    return list((found.get(largest) or {}).get("ranks") or []) if largest else []


def sched_of(meta: dict) -> str | None:
    """'ranks SCHED_FIFO' or 'ranks as started (why)'; None for runs from before --sched."""
    ranks = [r for r in rank_scheds(meta) if r and r.get("sched")]
    if not ranks:
        return None
    if all(r["sched"] == "fifo" for r in ranks):
        return "ranks SCHED_FIFO"
    return f"ranks as started ({ranks[0].get('sched_why') or 'SCHED_OTHER'})"


def left_out_line(meta: dict) -> str | None:
    """The default world sizes left out for lack of CPUs, and how to ask for them."""
    config = meta.get("config") or {}
    left = config.get("world_sizes_left_out") or []
    if not left:
        return None
    measured = list(config.get("world_sizes") or [])
    cpus = (meta.get("machine") or {}).get("cpus_allowed", "?")
    return (f"world sizes left out: {','.join(map(str, left))} (this process may use {cpus} CPUs; "
            f"more ranks would share them and measure the scheduler); ask for them with "
            f"--world-sizes {','.join(map(str, sorted(set(measured + list(left)))))}")


def _allreduce_rows(frame: pd.DataFrame) -> str:
    """'8 rows', or '8 AllReduce rows' where the run has other collectives' rows too."""
    rows = len(allreduce_rows(frame))
    return f"{rows} AllReduce rows" if rows < len(frame) else f"{rows} rows"


def states_line(frame: pd.DataFrame) -> str | None:
    rows = two_state_rows(frame)
    if rows.empty:
        return None
    first = rows.sort_values("slow_share", ascending=False).iloc[0]
    return (f"two states: {len(rows)} of {_allreduce_rows(frame)} have a fast and a slow "
            f"state (e.g. {first['algorithm']} N={first['world_size']} at "
            f"{format_size(int(first['size_bytes']))}: {first['fast_us_median']:.0f} us "
            f"{100 * first['fast_share']:.0f}% / {first['slow_us_median']:.0f} us "
            f"{100 * first['slow_share']:.0f}%); the two-state table lists both for each")


def advice(frame: pd.DataFrame, meta: dict) -> str:
    machine = meta.get("machine")
    facts = machine if isinstance(machine, dict) else {}
    cpus = facts.get("cpus_allowed")
    flagged = unstable_rows(frame)
    crowded = sorted({int(n) for n in flagged["world_size"] if cpus and int(n) > cpus})
    if crowded:
        return (f"N={','.join(map(str, crowded))} ran more ranks than the {cpus} CPUs allowed: "
                f"their calls wait for a CPU; measure up to N={cpus} here")
    if (facts.get("steal_share") or 0) > STEAL_NOTABLE:
        return (f"the hypervisor took {100 * facts['steal_share']:.0f}% of the CPU time (steal: other "
                "VMs' load); rerun when it is lower, or on a dedicated host")
    others, load = facts.get("others_share"), facts.get("load_average_start")
    if others is not None and others > OTHERS_NOTABLE:
        return (f"other processes took {100 * others:.0f}% of the CPU time during the run; rerun "
                "when they are done")
    if others is None and cpus and load is not None and load > BUSY_BEFORE * cpus:
        return (f"other processes were running (load average {load:.1f} on {cpus} CPUs at the "
                "start); rerun when they are done")
    states = two_state_rows(flagged)
    if len(states) * 2 >= len(flagged):
        return "their calls switch between a fast and a slow state: " + states_advice(meta)
    if (pd.to_numeric(flagged.get("samples"), errors="coerce") < FEW_SAMPLES).mean() > 0.5:
        return "few samples per row: a larger --budget narrows the median's interval"
    if others is not None:  # known, and below OTHERS_NOTABLE: nothing else to blame
        return (f"too little else ran to explain it (other processes {100 * others:.0f}% of CPU time, "
                f"under {100 * OTHERS_NOTABLE:.0f}%; steal {100 * (facts.get('steal_share') or 0):.0f}%, "
                f"under {100 * STEAL_NOTABLE:.0f}%): this machine's calls "
                "varied between rounds on their own, and no setting of this run removes that; read "
                "each median with its interval (time_us_ci_low/high) and judge two runs with compare, "
                "which weighs their rounds")
    return "the machine changed state between rounds: something else ran during the run"


def states_advice(meta: dict) -> str:
    """What helps calls in a slow state: SCHED_FIFO ranks where they were not, else nothing."""
    sched = sched_of(meta)
    if sched and sched != "ranks SCHED_FIFO":
        return ("SCHED_FIFO ranks keep gloo's calls in the fast one on machines like this "
                "(--sched fifo, as root; doc/noise.md)")
    return ("they stayed so with SCHED_FIFO ranks, so nothing this run can set removes it: read "
            "the fast state's median (the two-state table) as the collective's own cost")


def unstable_line(frame: pd.DataFrame, meta: dict) -> str | None:
    flagged = unstable_rows(frame)
    if flagged.empty:
        return None
    reasons = pd.Series([why_unstable(row) for row in flagged.to_dict("records")])
    by_interval = int(reasons.str.contains("interval").sum())
    by_rounds = int(reasons.str.contains("rounds").sum())
    return (f"unstable: {len(flagged)} of {_allreduce_rows(frame)}' medians cannot be "
            f"trusted to +-{100 * TRUSTED_TO:.0f}% ({by_interval} by their {100 * CONFIDENCE:.0f}% "
            f"interval, {by_rounds} by rounds that disagree: > {100 * ROUNDS_DISAGREE:.0f}% apart, "
            f"p < {ROUNDS_ALPHA:g}): "
            + advice(frame, meta))


def extra_rounds_line(frame: pd.DataFrame, meta: dict) -> str | None:
    """'extra rounds: 5 of 28 rows took them ...'; None where no row took any (sweep/passes.py)."""
    config = meta.get("config")
    config = config if isinstance(config, dict) else {}
    planned = config.get("rounds")
    if not isinstance(planned, int) or "rounds" not in frame.columns:
        return None
    extra = frame[pd.to_numeric(frame["rounds"], errors="coerce") > planned]
    if extra.empty:
        return None
    left = extra[flag(extra["unstable"])]
    named = ", ".join(f"{row['algorithm']} N={row['world_size']} {format_size(row['size_bytes'])} "
                      f"({why_unstable(row)})" for row in left.to_dict("records"))
    return (f"extra rounds: {len(extra)} of {len(frame)} rows took them (--extra-budget "
            f"{config.get('extra_budget_s', 0):g} s); "
            + (f"{len(left)} did not settle before it was spent: {named}" if len(left)
               else "all settled"))


def machine_lines(frame: pd.DataFrame, meta: dict) -> list[str]:
    lines = (machine_line(meta), left_out_line(meta), states_line(frame), extra_rounds_line(frame, meta),
             unstable_line(frame, meta))
    return [line for line in lines if line]


def facts_by_run(frame: pd.DataFrame) -> list[tuple[str, list[str]]]:
    labelled = label_runs(frame)
    found = [(run, machine_lines(labelled[labelled["run"] == run], meta)) for run, meta in run_metas(frame).items()]
    return [(run, lines) for run, lines in found if lines]
