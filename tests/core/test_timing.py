"""The measuring core: calibration on a fake clock, sample statistics and the late-rank method,
the timing loop's order of events, the GPU spin path with mocks, samples on disk, the
slowest-rank analysis, analysis without torch, and no import circles."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fault_plugin import fault_env

from allreduce_bench.core import metrics
from allreduce_bench.core.analysis import ranks
from allreduce_bench.core.measure import timing
from allreduce_bench.core.results.load import load_results, load_samples, upgrade
from allreduce_bench.core.results.schema import SAMPLE_COLUMNS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "results" / "example-cpu-gloo"


# --- calibration on a fake clock -------------------------------------------------------------

class FakeClock:
    """A sample of `loops` calls lasts skew + overhead + loops x per_call seconds, of which
    `skew` (the barrier's exit skew) once per sample, whatever the loops."""

    def __init__(self, per_call: float, overhead: float = 20e-6, skew: float = 0.0):
        self.per_call, self.overhead, self.skew, self.asked = per_call, overhead, skew, []

    def __call__(self, loops: int) -> tuple[float, float]:
        self.asked.append(loops)
        return self.skew + self.overhead + loops * self.per_call, self.skew


@pytest.mark.parametrize("per_call", [1e-6, 30e-6, 150e-6, 1.9e-3, 5e-3, 0.3])
def test_calibration_reaches_the_minimum_sample_time_in_few_samples(per_call):
    clock = FakeClock(per_call)
    loops, took = timing.calibrate_loops(clock, min_sample_s=2e-3, max_loops=10_000)
    assert len(clock.asked) <= 3  # one call, a jump to the estimate, then a confirmation
    assert took == clock(loops)[0] and took >= 2e-3
    assert loops == 1 or clock(loops // 2)[0] < 2e-3 * 1.3  # not far beyond what was needed


@pytest.mark.parametrize("per_call, skew, max_sample_s, share", [
    (150e-6, 50e-6, 1.0, 0.01),    # 5 ms of calls: the skew's 1% asks for more than min_sample_s
    (5e-3, 200e-6, 1.0, 0.01),     # one call would hold 4% skew: a few calls
    (0.3, 1e-3, 1.0, 0.01),        # one call is long enough
    (150e-6, 2e-3, 0.02, 0.10),    # 200 ms would be needed: capped at max_sample_s, 10% skew left
])
def test_calibration_makes_the_skew_at_most_its_share_of_a_sample(per_call, skew, max_sample_s, share):
    clock = FakeClock(per_call, skew=skew)
    loops, took = timing.calibrate_loops(clock, min_sample_s=2e-3, max_loops=10_000,
                                         max_skew_share=0.01, max_sample_s=max_sample_s)
    assert len(clock.asked) <= 3
    assert skew / took <= share and took >= 2e-3
    assert loops == 1 or clock(loops // 2)[0] < 1.3 * max(2e-3, min(max_sample_s, skew / 0.01))
    without, _ = timing.calibrate_loops(FakeClock(per_call, skew=skew), min_sample_s=2e-3,
                                        max_loops=10_000)
    assert without <= loops


def test_calibration_stops_at_max_loops_for_an_empty_call():
    clock = FakeClock(0.0, overhead=0.0)
    loops, _ = timing.calibrate_loops(clock, min_sample_s=2e-3, max_loops=64)
    assert loops == 64


@pytest.mark.parametrize("sample_s, expected", [(1e-3, 100), (0.05, 5), (0.01, 20), (2.0, 5), (0, 100)])
def test_samples_fit_the_budget_within_bounds(sample_s, expected):
    assert timing.plan_samples(sample_s, budget_s=0.2, min_samples=5, max_samples=100) == expected


# --- statistics and the late rank -----------------------------------------------------------

def test_a_late_rank_measures_the_shortest_interval_and_is_named():
    # rank 2 starts every sample 3 ms late; the others wait for it inside the collective
    rng = np.random.default_rng(0)
    base = 400 + rng.normal(0, 5, size=(4, 30))
    per_rank = base + 3000
    per_rank[2] = base[2]  # the late rank's clock starts when the others have waited 3 ms
    stats = metrics.sample_stats(per_rank, loops=1)
    assert stats["late_rank"] == 2 and stats["late_rank_share"] == 1.0
    assert stats["late_rank_lag_us"] == pytest.approx(3000, rel=0.05)
    assert stats["time_us_median"] == pytest.approx(3400, rel=0.02)  # the slowest rank's time
    assert stats["skew_share"] == pytest.approx(3000 / 3400, rel=0.03)  # a sample's share of waiting
    assert (per_rank.argmax(axis=0) != 2).all()  # the longest interval names a rank that waited


def test_sample_stats_numbers():
    per_rank = [[10.0, 20.0, 30.0, 40.0, 50.0], [12.0, 18.0, 33.0, 41.0, 49.0]]
    stats = metrics.sample_stats(per_rank, loops=4)
    slowest = [12.0, 20.0, 33.0, 41.0, 50.0]
    assert stats["time_us_median"] == 33.0 and stats["time_us_max"] == 50.0
    assert stats["time_us_mean"] == pytest.approx(np.mean(slowest))
    assert stats["time_us_p5"] == pytest.approx(np.percentile(slowest, 5))
    assert stats["time_cv"] == pytest.approx(np.std(slowest) / np.mean(slowest))
    assert stats["time_us_rank_mean"] == pytest.approx(np.mean(per_rank))  # nccl-tests' -a 1
    assert stats["unstable"]  # cv ~ 0.4


def test_unstable_judges_the_median_not_the_spread_of_single_samples():
    tight = [[100.0 + i % 3 for i in range(20)]]
    assert not metrics.sample_stats(tight)["unstable"]
    split = [[100.0] * 12 + [128.0] * 8]  # the median's interval spans both groups
    assert metrics.sample_stats(split)["unstable"]
    # a bimodal machine: 30% of the samples 10x slower; the median is the fast state's, exactly
    mostly_fast = [[100.0 + i % 3 for i in range(35)] + [1000.0 + i for i in range(15)]]
    stats = metrics.sample_stats(mostly_fast)
    assert stats["time_cv"] > 1 and not stats["unstable"]
    assert stats["fast_us_median"] == pytest.approx(101) and stats["fast_share"] == 0.7
    assert stats["slow_us_median"] == pytest.approx(1007) and stats["slow_share"] == 0.3
    assert np.isnan(metrics.two_states([100.0] * 19 + [300.0])["slow_share"])  # one outlier


# --- the loop's order of events, and the GPU path with mocks ----------------------------------

class RecordingDevice:
    """A device that records what the loop asks of it (no process group needed)."""

    torch_device = "cpu"

    def __init__(self, events):
        self.events, self.spin = events, None

    def timer(self, count):
        events = self.events

        class Timer:
            def start(self, i):
                events.append(("start", i))

            def stop(self, i):
                events.append(("stop", i))

            def times_us(self):
                return [100.0] * count
        return Timer()

    def launch_spin_s(self, loops, group):
        return 0.001 * loops

    def align(self, group, spin_s):
        self.events.append(("align", spin_s))

    def note_launch(self, host_s, loops):
        self.events.append(("launched", loops))


def test_each_sample_is_aligned_then_timed_around_loops_calls_only():
    events = []
    device = RecordingDevice(events)
    times = timing.take_samples(lambda: events.append("call"), device, None, loops=3, count=2,
                                before_sample=lambda: events.append("late"))  # the hooks' (Device.before_sample)
    assert times == [100.0 / 3] * 2
    one = [("align", 0.003), "late", ("start", 0), "call", "call", "call", ("stop", 0), ("launched", 3)]
    assert events[:8] == one and events[8] == ("align", 0.003) and len(events) == 16
    events.clear()
    timing.take_samples(lambda: None, device, None, loops=2, count=1, host_launch=True)
    assert events[0] == ("align", 0.0)  # --host-launch: no spin


def test_cuda_align_spins_for_the_queued_calls(monkeypatch):
    import torch
    from fake_cuda import Ranks, cuda_device, install

    from allreduce_bench.core.measure import device as device_module
    install(monkeypatch)
    one = Ranks(1)
    one.patch(monkeypatch)
    slept, barriers = [], []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append, raising=False)
    cuda = cuda_device()
    cuda._cycles_per_ms = 1.5e6
    monkeypatch.setattr(device_module.CudaDevice, "barrier", lambda self, group: barriers.append(group))
    cuda.note_launch(host_s=0.001, loops=100)  # 10 us per call measured
    spin = one.run(lambda rank: cuda.launch_spin_s(100, None))[0]
    assert spin == pytest.approx(2 * 10e-6 * 100 + 50e-6)
    cuda.align("group", spin)
    assert barriers == ["group"] and slept == [int(spin * 1e3 * 1.5e6)]
    cuda.align("group", 0.0)
    assert len(slept) == 1  # no spin asked, none queued
    assert one.run(lambda rank: cuda.launch_spin_s(10**7, None))[0] == 0.05  # bounded


def test_cuda_timer_reads_events_after_the_last_one(monkeypatch):
    from fake_cuda import GPU, cuda_device, install

    install(monkeypatch)
    timer = cuda_device(timeout_s=1.0).timer(2)
    for i in range(2):
        timer.start(i)
        GPU.clock_ms += 1.0
        timer.stop(i)
    assert timer.times_us() == [1000.0, 1000.0]


# --- samples on disk, and the late rank in a real run ----------------------------------------

def _run(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--no-plot",
                           "--out", str(tmp_path), *args], capture_output=True, text=True,
                          timeout=240, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_samples_are_kept_per_rank_and_name_a_delayed_rank(tmp_path):
    delay = "rank=2,action=delay,seconds=0.02"
    done = _run(tmp_path, "--world-sizes", "4", "--ranks-per-node", "2", "--sizes", "4K,64K",
                "--algos", "native,ring", "--samples", "6", "--loops", "2",
                env=fault_env(delay))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = load_results(tmp_path)
    samples = load_samples(tmp_path)
    assert list(samples.columns[:len(SAMPLE_COLUMNS)]) == SAMPLE_COLUMNS
    assert len(samples) == int((rows["samples"] * rows["world_size"]).sum()) == 4 * 6 * 4
    assert (samples["loops"] == 2).all() and set(samples["rank"]) == {0, 1, 2, 3}
    assert (rows["samples"] == 6).all() and (rows["loops"] == 2).all()
    assert (rows["timing"] == "samples").all() and rows["time_cv"].notna().all()
    assert (rows["late_rank"] == 2).all(), rows[["late_rank", "late_rank_share"]]
    table = ranks.rank_table(rows)
    assert table.loc[("", 4), "rank"] == 2 and bool(table.loc[("", 4), "stands_out"])
    assert json.loads((tmp_path / "meta.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert rows["skew_share"].between(0, 1).all()
    # the rows' medians come from the samples: max over ranks per sample, median over samples
    one = samples[(samples["algorithm"] == "ring") & (samples["size_bytes"] == 4096)]
    slowest = one.groupby("sample")["time_us"].max().median()
    row = rows[(rows["algorithm"] == "ring") & (rows["size_bytes"] == 4096)].iloc[0]
    assert row["time_us_median"] == pytest.approx(slowest)


def test_rank_table_on_a_synthetic_frame():
    frame = pd.DataFrame({
        "run_id": "r1", "tag": "", "benchmark": "allreduce", "algorithm": ["ring", "native", "ring"],
        "world_size": 4, "size_bytes": [1, 1, 2], "late_rank": [3, 3, 1],
        "late_rank_share": [0.9, 0.8, 0.3], "late_rank_lag_us": [50.0, 70.0, 5.0],
        "time_us_median": 1.0, "busbw_GBps": 1.0, "source": "nowhere"})
    table = ranks.rank_table(frame)
    row = table.loc[("", 4)]
    assert row["rank"] == 3 and row["rows_named"] == 2 and row["rows"] == 3
    assert row["share_of_samples"] == pytest.approx(0.85) and row["lag_us"] == pytest.approx(60)
    assert bool(row["stands_out"])
    assert not ranks.stands_out(1, 3, 0.9, 4) and not ranks.stands_out(3, 3, 0.3, 4)


def test_older_rows_are_read_as_what_they_were():
    old = pd.DataFrame({"algorithm": ["ring"], "iters": [10], "time_us_median": [5.0]})
    new = upgrade(old)
    assert new.loc[0, "timing"] == "per-iteration" and new.loc[0, "samples"] == 10
    assert new.loc[0, "loops"] == 1 and "time_cv" not in new.columns  # nothing guessed


# --- the layout: analysis without torch, no import circles -----------------------------------

BLOCK_TORCH = """
import importlib.abc, sys
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is hidden in this test")
sys.meta_path.insert(0, _NoTorch())
"""


@pytest.mark.slow
def test_plot_report_and_model_run_where_torch_cannot_be_imported(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCK_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    for args in (["plot", str(EXAMPLE), "--out-dir", str(out)],
                 ["report", str(EXAMPLE), "--out-dir", str(out)],
                 ["model", "fit", str(EXAMPLE), "--out", str(out), "--no-plot"],
                 ["model", "predict", "--algo", "ring", "--world-size", "8", "--ranks-per-node", "4",
                  "--size", "1M", "--intra-bw", "100GB/s", "--inter-bw", "10GB/s"]):
        done = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True)
        assert done.returncode != 0  # the block works
        done = subprocess.run([sys.executable, "-m", "allreduce_bench", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (args, done.stderr[-1500:])
    assert (out / "bandwidth.png").exists() and (out / "report.md").exists()


def test_schema_2_late_rank_columns_are_read_under_their_schema_3_names(tmp_path):
    """Schema 2 called the rank that started last `slowest_rank`; loading renames it."""
    from allreduce_bench.core.results.load import load_results

    old = pd.DataFrame({"algorithm": ["ring"], "world_size": [4], "size_bytes": [1024],
                        "time_us_median": [10.0], "busbw_GBps": [1.0], "timing": ["samples"],
                        "slowest_rank": [3], "slowest_rank_share": [0.9], "rank_lag_us": [50.0]})
    old.to_csv(tmp_path / "results.csv", index=False)
    frame = load_results(tmp_path)
    assert frame.loc[0, "late_rank"] == 3 and frame.loc[0, "late_rank_share"] == 0.9
    assert frame.loc[0, "late_rank_lag_us"] == 50.0 and "slowest_rank" not in frame.columns


@pytest.mark.slow
def test_groups_side_by_side_in_lockstep_agree_on_counts_and_keep_their_own_times():
    from distributed import run_world
    from rank_functions import rails_in_lockstep

    results = run_world(4, rails_in_lockstep, 1024)
    loops, samples = {r[0] for r in results}, {r[1] for r in results}
    assert len(loops) == 1 and len(samples) == 1  # decided over the world
    assert all(r[2] == 2 for r in results)  # each group's times are its own two ranks'
    # every sample (calibration ones too) began with a barrier over the world
    assert all(r[3][0] >= next(iter(samples)) for r in results)


@pytest.mark.slow
def test_loops_amortise_a_large_exit_skew_and_the_row_says_how_much_was_left():
    """A rank 2 ms late after every barrier: with the 1% rule loops grow until the sample is
    long (up to max_sample_s, 50 ms here, which the budget allows) and skew_share is small;
    with min_sample_s alone (2 ms) the skew would be a large part of each sample. (Loose bounds: the
    calibration's estimate undershoots on a loaded machine, 17 ms of the 50 once in CI.)"""
    from distributed import run_world
    from rank_functions import skew_amortised

    (loops, share, sample_s), (loops_without, share_without, _) = run_world(2, skew_amortised, 0.002)[0]
    assert sample_s >= 0.01 and share < 0.2, (loops, share, sample_s)
    # relative, not absolute: under load a call takes ms and even 1-2 calls dilute the skew
    # (0.26 once, with loops 2, beside the whole suite)
    assert loops_without < loops and share_without > 2 * share, (loops_without, share_without, share)


def test_the_skew_never_stretches_a_sample_beyond_the_budgets_share():
    """The default CPU run's first round (budget 25 ms, 2 samples at least): 12.5 ms at most."""
    from allreduce_bench.core.config import CPU_DEFAULTS, ROUNDS
    from allreduce_bench.core.measure import rounds

    first = rounds.round_sampling(CPU_DEFAULTS["sampling"], ROUNDS, 0)
    assert timing.longest_sample_s(first) == pytest.approx(0.0125)
    clock = FakeClock(150e-6, skew=2e-3)
    loops, took = timing.calibrate_loops(clock, min_sample_s=2e-3, max_loops=10_000,
                                         max_skew_share=0.01, max_sample_s=timing.longest_sample_s(first))
    assert 0.0125 <= took <= 0.0125 * 1.3


class TwoStateClock(FakeClock):
    """gloo's two states: the first call slow (2.5 ms), every later one fast (0.3 ms)."""

    def __call__(self, loops: int) -> tuple[float, float]:
        self.asked.append(loops)
        first = len(self.asked) == 1
        return (2.5e-3 if first else 0.0) + (loops - first) * 0.3e-3, 0.0


def test_one_slow_first_call_does_not_fix_loops_at_one():
    """A slow first call alone reached 2 ms, and loops stayed 1 in gloo's slow state: a second
    call confirms, and the faster pace sets loops."""
    clock = TwoStateClock(0.0)
    loops, took = timing.calibrate_loops(clock, min_sample_s=2e-3, max_loops=10_000)
    assert clock.asked[:2] == [1, 1] and loops * 0.3e-3 >= 2e-3 and took >= 2e-3
    steady = FakeClock(2.5e-3)  # a call that is long every time: one call, confirmed once
    assert timing.calibrate_loops(steady, min_sample_s=2e-3, max_loops=10_000)[0] == 1
    assert steady.asked == [1, 1]


def test_samples_far_shorter_than_the_minimum_ask_for_more_loops():
    """Two slow calibration calls (2.5 ms) fixed loops at 1, but the samples' median call took
    0.27 ms: the samples are retaken with the loops the median asks; long enough ones are kept."""
    from allreduce_bench.core.config import Sampling

    sampling = Sampling(min_sample_s=2e-3)
    loops, took = timing.recalibrated([270.0] * 20 + [2500.0] * 4, 1, sampling)
    assert loops * 270e-6 >= 2e-3 and took == pytest.approx(loops * 270e-6)
    assert timing.recalibrated([2500.0] * 24, 1, sampling) is None
    assert timing.recalibrated([180.0] * 8, 12, sampling) is None  # 2.16 ms: long enough
    assert timing.recalibrated([150.0] * 8, 12, sampling)[0] == 16  # 1.8 ms: 1.2 x 2 ms / 0.15
    assert timing.recalibrated([1.0] * 8, 10_000, sampling) is None  # max_loops reached


@pytest.mark.slow
def test_slow_calibration_calls_do_not_leave_the_samples_one_call_long():
    """Both calibration calls slow (5 ms), every later one 0.1 ms: the samples taken with the
    loops = 1 that the calibration chose are retaken with as many calls as 2 ms asks."""
    from distributed import run_world
    from rank_functions import slow_calibration_calls

    for loops, sample_s in run_world(2, slow_calibration_calls):
        assert loops >= 8 and sample_s >= 1e-3, (loops, sample_s)


def test_samples_frame_is_one_row_per_rank_and_sample_built_by_columns():
    """samples_frame fills whole columns (a record per sample took ~3 s a row at 4,096 ranks x
    200 samples, issue 53): the same rows, values and types as one (sample, rank, host, time)
    record per sample, ragged ranks, ranks past the hostnames and a first sample included."""
    import pandas as pd

    from allreduce_bench.core.results.schema import samples_frame

    row = {"run_id": "r", "benchmark": "allreduce", "algorithm": "ring", "world_size": 3, "size_bytes": 64,
           "loops": 2, "link": "intra"}
    frame = samples_frame(row, [[1.0, 2.5], [3.0], [4.0, 5.0]], (4, 5, 9), ["h"] * 6, round_index=1,
                          first_sample=3)
    assert list(frame.columns) == SAMPLE_COLUMNS
    assert frame[["sample", "rank", "host", "time_us"]].values.tolist() == [
        [3, 4, "h", 1.0], [4, 4, "h", 2.5], [3, 5, "h", 3.0], [3, 9, "", 4.0], [4, 9, "", 5.0]]
    assert frame["sample"].dtype == "int64" and frame["rank"].dtype == "int64" and frame["time_us"].dtype == float
    assert pd.api.types.is_string_dtype(frame["host"]) and set(frame["round"]) == {1}
    assert set(frame["link"]) == {"intra"} and frame["bucket_mb"].isna().all() and set(frame["operation"]) == {""}
    big = samples_frame(row, [[1.0] * 200] * 4096, range(4096), [f"n{r // 8}" for r in range(4096)])
    assert len(big) == 4096 * 200 and big["host"].iloc[-1] == "n511"
