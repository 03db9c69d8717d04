"""Other collectives' published logs (all_gather, reduce_scatter): imported, they give back
their printed busbw through our formula, and compare against our own rows."""
from __future__ import annotations

import subprocess
import sys

import pytest
from shared_data import PUBLISHED_LOGS, needs

from allreduce_bench import interop
from allreduce_bench.core import metrics

LOGS = PUBLISHED_LOGS
needs_logs = needs(LOGS)


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "allreduce_bench", *args], capture_output=True,
                          text=True, timeout=timeout)


@needs_logs
@pytest.mark.parametrize("prefix, collective", [("11-", "all_gather"), ("12-", "reduce_scatter")])
def test_published_logs_give_back_their_busbw_through_our_formula(prefix, collective):
    (path,) = LOGS.glob(f"{prefix}*")
    (run,) = interop.read_file(path)
    interop.settle(run, str(path), collective)
    checked = 0
    for row in run.rows:
        if row["size_bytes"] >= 1 << 20:  # the printed bandwidths carry 4-5 digits there
            ours = metrics.busbw_GBps(row["size_bytes"], row["time_us_median"], run.world_size, collective)
            algbw = metrics.algbw_GBps(row["size_bytes"], row["time_us_median"])
            # time is printed to 4 digits: allow its rounding, then compare as printed
            assert ours == pytest.approx(row["busbw_GBps"], rel=2e-3), row
            assert ours / algbw == pytest.approx(metrics.busbw_factor(8, collective))
            checked += 1
    assert run.world_size == 8 and checked >= 20


@pytest.mark.slow
@needs_logs
@pytest.mark.timeout(600)
def test_import_and_compare_a_published_all_gather_log_against_our_rows(tmp_path):
    import pandas as pd

    ours = tmp_path / "ours"
    result = cli("run", "--collectives", "all_gather", "--algos", "native", "--world-sizes", "8",
                 "--ranks-per-node", "8", "--sizes", "1M,4M", "--samples", "2", "--loops", "1",
                 "--warmup", "0", "--out", str(ours), "--no-plot", timeout=500)
    assert result.returncode == 0, result.stderr
    (log,) = LOGS.glob("11-*")
    imported = tmp_path / "imported"
    done = cli("import", str(log), "--out", str(imported), "--collective", "all_gather", timeout=60)
    assert done.returncode == 0, done.stderr
    compared = cli("compare", str(imported), str(ours), "--out-dir", str(tmp_path / "cmp"), timeout=60)
    assert compared.returncode == 0, compared.stderr
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    assert sorted(table["size_bytes"]) == [1 << 20, 4 << 20]
    assert set(table["benchmark"]) == {"all_gather"} and set(table["world_size"]) == {8}
