"""A first run a user can trust: world sizes sized to the CPUs allowed, the machine's facts in
meta.json and the summary, `unstable` judged on the median (its interval, the rounds), rows
with two states reported with both, and advice that names what would help."""
from __future__ import annotations

import math
import os
import time

import numpy as np
import pandas as pd
import pytest
import synthetic_runs

from allreduce_bench.core import metrics
from allreduce_bench.core.analysis import advice
from allreduce_bench.core.analysis.report import terminal_summary
from allreduce_bench.core.config import cpu_world_sizes
from allreduce_bench.core.config import run as run_options
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.measure import machine
from allreduce_bench.core.measure.console import HEADER, format_row
from allreduce_bench.core.results.load import load_results

# --- world sizes sized to the CPUs allowed -------------------------------------------------------


@pytest.mark.parametrize("cpus, chosen, left", [(1, (2,), (4,)), (2, (2,), (4,)), (3, (2,), (4,)),
                                                (4, (2, 4), ()), (64, (2, 4), ())])
def test_default_world_sizes_fit_the_cpus_allowed(cpus, chosen, left):
    assert cpu_world_sizes(cpus) == (chosen, left)


def test_a_two_cpu_run_measures_n2_and_names_what_it_left_out(monkeypatch):
    from allreduce_bench.core.config.launch import LaunchOptions

    two = Host(cpus=2)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    cpu = LaunchOptions(device="cpu")
    world = run_options.resolve_world(cpu, None, two)
    assert world[0] == (2,) and world[3] == 2  # one node of two ranks
    assert run_options.left_out_world_sizes(None, "cpu", None, two) == (4,)
    assert run_options.left_out_world_sizes("2,4", "cpu", None, two) == ()  # asked for: nothing left out
    assert run_options.resolve_world(LaunchOptions(world_sizes="2,4", device="cpu"), None, two)[0] == (2, 4)
    assert run_options.resolve_world(cpu, None, Host(cpus=8))[0] == (2, 4)


def test_the_summary_says_which_world_sizes_were_left_out_and_how_to_ask(tmp_path):
    run = synthetic_runs.write_run(tmp_path / "r", synthetic_runs.rows(synthetic_runs.default_states()),
                                   world_sizes_left_out=[4])
    text = terminal_summary(load_results(run))
    line = next(line for line in text.splitlines() if line.startswith("world sizes left out"))
    assert "4" in line and "--world-sizes 2,4" in line and "2 CPUs" in line


# --- the machine's facts ------------------------------------------------------------------------

def test_cpuidle_and_cpu_times_are_read_from_their_files(tmp_path):
    idle = tmp_path / "cpuidle"
    idle.mkdir()
    (idle / "current_driver").write_text("haltpoll\n")
    (idle / "current_governor_ro").write_text("haltpoll\n")
    assert machine.cpuidle(idle) == {"driver": "haltpoll", "governor": "haltpoll"}
    assert machine.cpuidle(tmp_path / "missing") == {"driver": None, "governor": None}
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    start = machine.cpu_times(stat)
    assert start["steal"] == 35 and start["idle"] == 800
    stat.write_text("cpu  200 0 100 1600 20 0 10 70 0 0\n")
    end = machine.cpu_times(stat)
    assert machine.steal_share(start, end) == pytest.approx(35 / 1000)
    assert machine.busy_share(start, end) == pytest.approx(1 - 810 / 1000)
    assert machine.steal_share(None, end) is None
    # 1000 ticks, 810 idle (35 of them steal: not busy either): 225 busy, 1.5 s (150 ticks) ours
    tick = os.sysconf("SC_CLK_TCK")
    assert machine.others_share(start, end, 150 / tick) == pytest.approx((1000 - 810 - 35 - 150) / 1000)
    assert machine.others_share(start, end, None) is None  # ranks not ours to count: unknown


def test_meta_facts_at_start_and_end():
    started = machine.facts_at_start()
    assert started["cpus_allowed"] >= 1 and "driver" in started["cpuidle"]
    ended = machine.facts_at_end(started)
    assert set(ended) >= {"steal_share", "busy_share", "load_average_end"}
    assert ended["others_share"] is None  # a rank of a launcher's world: its siblings not counted
    until = time.monotonic() + 0.1
    while time.monotonic() < until:  # CPU time of our own, so the interval has ticks to share
        pass
    assert 0 <= machine.facts_at_end(started, ranks_are_children=True)["others_share"] <= 1


# --- unstable: the median's interval and the rounds ----------------------------------------------

def test_the_median_interval_covers_the_median_as_often_as_it_says():
    rng = np.random.default_rng(1)
    for n in (5, 8, 20, 50):
        low, high = metrics.median_interval(list(range(n)))
        assert low <= (n - 1) / 2 <= high
        covered = 0
        for _ in range(400):
            low, high = metrics.median_interval(rng.exponential(1.0, n))
            covered += low <= math.log(2) <= high  # the exponential's true median
        assert covered / 400 >= metrics.CONFIDENCE - 0.05, n


def test_a_row_with_two_states_reports_both_and_its_median_is_not_trusted_when_they_split():
    rng = np.random.default_rng(2)
    fast, slow = list(170 + rng.uniform(0, 10, 25)), list(2000 + rng.uniform(0, 500, 25))
    stats = metrics.sample_stats([fast + slow])
    assert stats["unstable"]  # a median between two states that both exist
    assert stats["fast_us_median"] == pytest.approx(np.median(fast))
    assert stats["slow_us_median"] == pytest.approx(np.median(slow)) and stats["slow_share"] == 0.5
    line = format_row({**stats, "size_bytes": 16384, "count": 4096, "dtype": "float32",
                       "samples": 50, "loops": 1, "algbw_GBps": 0.1, "busbw_GBps": 0.1, "wrong": 0})
    row, note = line.splitlines()  # the words below the row: no line wider than the header
    assert note == (f"#   the row above: unstable; two states: {np.median(fast):.0f} us 50% / "
                    f"{np.median(slow) / 1e3:.3g} ms 50%") and len(row) == len(HEADER.splitlines()[0])


def test_noisy_single_samples_do_not_flag_a_median_many_samples_pin_down():
    rng = np.random.default_rng(3)
    spread = list(rng.uniform(80, 120, 200))  # cv ~12%: flagged before, by the cv alone
    stats = metrics.sample_stats([spread])
    assert stats["time_cv"] > 0.1 and not stats["unstable"]
    assert metrics.sample_stats([spread[:5]])["unstable"]  # five of them cannot


def test_rounds_that_disagree_flag_a_row(tmp_path):
    from allreduce_bench.core.measure import rounds

    steady = [[[100.0 + i for i in range(10)]]] * 4
    assert not rounds.round_columns(steady)["rounds_disagree"]
    shifted = steady[:2] + [[[130.0 + i for i in range(10)]]] * 2
    assert rounds.round_columns(shifted)["rounds_disagree"]


# --- the summary's advice -----------------------------------------------------------------------

def _advice(tmp_path, states, **machine_facts) -> str:
    run = synthetic_runs.write_run(tmp_path / "r", synthetic_runs.rows(states),
                                   machine={**synthetic_runs.MACHINE, **machine_facts})
    frame = load_results(run)
    return advice.unstable_line(frame, advice.run_metas(frame)[""]) or ""


def test_the_advice_names_the_first_cause_that_applies(tmp_path):
    wide = {("ring", 2, 65536): "wide", ("ring", 4, 65536): "wide", ("ring", 2, 4096): "steady"}
    assert "more ranks than the 2 CPUs" in _advice(tmp_path, wide)
    two = {("ring", 2, 65536): "two", ("ring", 2, 4096): "steady"}
    assert "steal" in _advice(tmp_path, two, steal_share=0.2)
    assert "other processes were running" in _advice(tmp_path, two, load_average_start=6.0)
    # what ran during the run decides over a load average that trails the minute before it
    assert "took 40% of the CPU time" in _advice(tmp_path, two, others_share=0.4)
    assert "other processes were" not in _advice(tmp_path, two, load_average_start=6.0, others_share=0.01)
    wide = {("ring", 2, 65536): "wide", ("ring", 2, 4096): "steady"}
    # a share below the notable one is not "nothing": the line says how much, and under what
    assert "too little else ran to explain it (other processes 1% of CPU time, under 10%" in _advice(
        tmp_path, wide, others_share=0.01)
    assert "fast and a slow state" in _advice(tmp_path, two)
    assert _advice(tmp_path, {("ring", 2, 4096): "steady"}) == ""  # nothing flagged, no advice


def test_the_summary_says_its_counts_are_over_allreduce_rows_where_other_collectives_ran(tmp_path):
    run = synthetic_runs.write_run(tmp_path / "r", synthetic_runs.rows(
        {("ring", 2, 65536): "wide", ("ring", 2, 4096): "two", ("ring", 2, 16384): "steady"}))
    frame = load_results(run)
    meta = advice.run_metas(frame)[""]
    assert " of 3 rows' medians" in advice.unstable_line(frame, meta)
    assert "1 of 3 rows have a fast and a slow state" in advice.states_line(frame)
    with_others = pd.concat([frame, frame.assign(benchmark="all_gather")], ignore_index=True)
    assert " of 3 AllReduce rows' medians" in advice.unstable_line(with_others, meta)  # not "of 3" of 6
    assert "1 of 3 AllReduce rows have a fast and a slow state" in advice.states_line(with_others)


def test_the_machine_line_carries_what_decides_it(tmp_path):
    run = synthetic_runs.write_run(tmp_path / "r", synthetic_runs.rows(synthetic_runs.default_states()))
    line = advice.machine_line(advice.run_metas(load_results(run))[""])
    assert line.startswith("machine: 2 CPUs allowed for 2 ranks; idle driver haltpoll (governor haltpoll)")
    assert "steal 0.1%" in line


# --- SCHED_FIFO ranks (--sched) ------------------------------------------------------------------

def test_sched_auto_means_fifo_on_cpu_runs_only():
    from allreduce_bench.core.config.launch import wanted
    from allreduce_bench.core.measure import scheduling

    assert wanted("auto", "cpu") == "fifo"
    assert wanted("auto", "cuda") == "other"
    assert wanted("auto", "cpu", times_collectives=False) == "other"  # ddp: compute
    assert wanted("auto", "cpu", emulated=True) == "other"  # CFS quotas: RT escapes
    assert wanted("fifo", "cuda") == "fifo" and wanted("other", "cpu") == "other"
    assert scheduling.apply("other", "cpu").as_dict() == {"asked": "other", "policy": "other",
                                                          "why": "--sched other: as started"}


SET_FIFO = """
import json, os, threading, time
from allreduce_bench.core.measure import scheduling
before = threading.Thread(target=time.sleep, args=(1,)); before.start()
sched = scheduling.apply("fifo", "cpu")
after = []
t = threading.Thread(target=lambda: after.append(os.sched_getscheduler(0))); t.start(); t.join()
print(json.dumps({**sched.as_dict(), "main": os.sched_getscheduler(0), "later": after[0],
                  "earlier": os.sched_getscheduler(before.native_id), "FIFO": os.SCHED_FIFO}))
"""


def test_sched_fifo_reaches_every_thread_or_says_why_not():
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SET_FIFO], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if seen["policy"] == "fifo":  # root, CAP_SYS_NICE or RLIMIT_RTPRIO: every thread, new ones too
        assert seen["main"] == seen["earlier"] == seen["later"] == seen["FIFO"]
    else:
        assert "not permitted" in seen["why"] and seen["main"] != seen["FIFO"]


def test_auto_binding_pins_one_cpu_per_rank_only_with_sched_fifo():
    from allreduce_bench.core.measure.binding import Binder

    fifo = {"policy": "fifo", "why": "test"}
    assert Binder("auto", (0, 1), {0: [0, 1]}, sched=fifo).plan(1, 2).how == "core"
    unpinned = Binder("auto", (0, 1), {0: [0, 1]}).plan(1, 2)
    assert unpinned.how == "none" and "SCHED_FIFO" in unpinned.why
    assert Binder("auto", (0, 1, 2, 3), {0: [0, 1, 2, 3]}).plan(1, 2).how == "core"
    assert Binder("core", (0, 1), {0: [0, 1]}).plan(1, 2).how == "core"


def test_the_summary_names_the_policy_and_advises_fifo_where_it_was_refused(tmp_path):
    refused = {"sched": "other", "sched_why": "SCHED_FIFO was not permitted (Operation not permitted)"}
    two = {("ring", 2, 65536): "two", ("ring", 2, 4096): "steady"}
    run = synthetic_runs.write_run(tmp_path / "r", synthetic_runs.rows(two))
    meta_path = run / "meta.json"
    import json

    meta = json.loads(meta_path.read_text())
    meta["binding"] = {"2": {"summary": "ranks unbound", "ranks": [refused, refused]}}
    meta_path.write_text(json.dumps(meta))
    frame = load_results(run)
    meta = advice.run_metas(frame)[""]
    assert "ranks as started (SCHED_FIFO was not permitted" in advice.machine_line(meta)
    assert "--sched fifo, as root" in advice.unstable_line(frame, meta)
    meta["binding"]["2"]["ranks"] = [{"sched": "fifo"}] * 2
    assert advice.machine_line(meta).endswith("ranks SCHED_FIFO")
    assert "nothing this run can set removes it" in advice.unstable_line(frame, meta)
