"""--min-busbw: nccl-tests' NCCL_TESTS_MIN_BW for every table of a run."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from allreduce_bench.core.analysis.floor import footer_lines, table_averages, verdict_lines
from allreduce_bench.core.config.checks import parse_floor
from allreduce_bench.core.errors import UsageError


def _rows():
    return pd.DataFrame({"collective": ["all_reduce"] * 4 + ["all_gather"] * 4,
                         "benchmark": ["allreduce"] * 4 + ["all_gather", "all_gather", "all_gather-in-place",
                                                           "all_gather-in-place"],
                         "algorithm": "ring", "world_size": [2, 2, 4, 4, 2, 2, 2, 2],
                         "busbw_GBps": [1.0, 3.0, 0.5, 0.7, 1.0, 2.0, 3.0, 4.0]})


def test_the_average_is_the_plain_mean_of_a_table_and_both_its_halves():
    averages = table_averages(_rows()).set_index("table")["avg_busbw_GBps"]
    assert averages.to_dict() == {"all_reduce ring N=2": 2.0, "all_reduce ring N=4": 0.6,
                                  "all_gather ring N=2": 2.5}


def test_below_ninety_percent_of_the_floor_fails_as_nccl_tests_judges():
    averages = table_averages(_rows())
    assert verdict_lines(averages, 2.2) == [  # 2.0 >= 0.9 x 2.2 passes; 0.6 does not
        "FAILED: all_reduce ring N=4: average bus bandwidth 0.6 GB/s is below 90% of --min-busbw 2.2 GB/s"]
    assert verdict_lines(averages, 0.5) == []
    assert footer_lines(averages, 2.2)[1] == "# Avg bus bandwidth    : 0.6 FAILED  (all_reduce ring N=4)"
    assert footer_lines(averages, 2.2)[0].split()[5] == "2"  # where scripts read nccl-tests' number


def test_the_floor_is_a_bandwidth():
    assert (parse_floor("1.2GB/s"), parse_floor("200Gb/s"), parse_floor("3")) == (1.2, 25.0, 3.0)
    for bad in ("fast", "-1", "1.2GB"):
        with pytest.raises(UsageError):
            parse_floor(bad)


def test_bad_floor_is_refused_before_any_rank_starts():
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--min-busbw", "lots"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--min-busbw" in done.stderr


@pytest.mark.slow
def test_a_floor_below_what_the_machine_reaches_passes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--quick", "--algos", "native",
                           "--world-sizes", "2", "--no-plot", "--out", str(tmp_path / "r"), "--min-busbw",
                           "0.000001"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "# Avg bus bandwidth    : " in done.stdout and " OK  (all_reduce native N=2)" in done.stdout
    assert "FAILED" not in done.stderr
