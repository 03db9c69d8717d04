"""compare: ratio of medians per size, significance from raw samples, the regression gate."""
import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from allreduce_bench.analysis.compare import compare_runs, differing_settings, parse_threshold
from allreduce_bench.cli import main
from allreduce_bench.errors import UsageError
from allreduce_bench.results.load import load_results, load_samples
from allreduce_bench.results.schema import COLUMNS, SAMPLE_COLUMNS
from allreduce_bench.results.store import SamplesWriter, write_meta

SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24]


def _rows(run_id, slow=None, dtype="float32"):
    slow = slow or {}
    rows = []
    for size in SIZES:
        t = 10 + size / 1e4
        rows.append({"run_id": run_id, "benchmark": "allreduce", "algorithm": "ring", "world_size": 4,
                     "size_bytes": size, "time_us_median": t * slow.get(size, 1.0),
                     "busbw_GBps": 1.0, "dtype": dtype, "backend": "gloo", "wrong": 0})
    return pd.DataFrame(rows)


def _samples(run_id, slow=None, seed=0, n=30, ranks=4):
    """Per sample and rank a time; the collective's is the max over ranks."""
    slow = slow or {}
    rng = np.random.default_rng(seed)
    rows = []
    for size in SIZES:
        t = (10 + size / 1e4) * slow.get(size, 1.0)
        for sample in range(n):
            for rank in range(ranks):
                rows.append({"run_id": run_id, "benchmark": "allreduce", "algorithm": "ring",
                             "world_size": 4, "size_bytes": size, "link": "", "operation": "",
                             "measure": "", "bucket_mb": float("nan"), "sample": sample, "rank": rank,
                             "host": "h", "loops": 1,
                             "time_us": t * rng.lognormal(0, 0.05) * (1.0 if rank else 1.02)})
    return pd.DataFrame(rows)[SAMPLE_COLUMNS]


def test_same_distribution_is_not_significant():
    table = compare_runs(_rows("a"), _rows("b"), _samples("a", seed=1), _samples("b", seed=2))
    assert len(table) == len(SIZES)
    assert table["significant"].sum() <= 1
    assert table["ci_low"].lt(1).all() or table["ci_high"].gt(1).all()
    assert table["verdict"].str.contains("significant").all()


def test_a_slower_size_is_flagged_with_its_interval():
    slow = {1 << 20: 1.3}
    table = compare_runs(_rows("a"), _rows("b", slow), _samples("a", seed=1), _samples("b", slow, seed=2))
    hit = table.set_index("size_bytes").loc[1 << 20]
    assert hit["significant"] and 1.2 < hit["ratio"] < 1.4 and hit["ci_low"] > 1.1
    assert hit["verdict"].startswith("1.3") and hit["verdict"].endswith("slower (significant)")
    assert table["significant"].sum() == 1


def test_max_over_ranks_makes_the_sample():
    samples = _samples("a", n=5)
    from allreduce_bench.analysis.compare import collective_times
    times = collective_times(samples)
    assert len(times) == 5 * len(SIZES)
    first = samples[(samples["size_bytes"] == SIZES[0]) & (samples["sample"] == 0)]["time_us"].max()
    assert times.iloc[0]["time_us"] == pytest.approx(first)


def test_without_samples_ratio_only():
    empty = pd.DataFrame(columns=SAMPLE_COLUMNS)
    table = compare_runs(_rows("a"), _rows("b", {1 << 10: 2.0}), empty, empty)
    assert table["significant"].isna().all() and table["ci_low"].isna().all()
    assert table.iloc[0]["verdict"] == "2.00x slower (no samples: ratio only)"


def test_nothing_in_common_is_a_usage_error():
    other = _rows("b").assign(world_size=8)
    with pytest.raises(UsageError, match="share no"):
        compare_runs(_rows("a"), other, pd.DataFrame(columns=SAMPLE_COLUMNS), pd.DataFrame(columns=SAMPLE_COLUMNS))


def test_threshold_and_settings():
    assert parse_threshold("5%") == 0.05 and parse_threshold("0.1") == 0.1
    with pytest.raises(UsageError):
        parse_threshold("five")
    lines = differing_settings([{"versions": {"torch": "2.1"}, "hostnames": ["a"]}],
                               [{"versions": {"torch": "2.3"}, "hostnames": ["a"]}],
                               _rows("a"), _rows("b", dtype="bfloat16"))
    assert lines == ["dtype: float32 -> bfloat16", "versions.torch: 2.1 -> 2.3"]


def _run_dir(path, run_id, slow=None, seed=0, dtype="float32"):
    rows = _rows(run_id, slow, dtype)
    for column in COLUMNS:
        if column not in rows.columns:
            rows[column] = None
    path.mkdir(parents=True)
    rows[COLUMNS].to_csv(path / "results.csv", index=False)
    write_meta(path, {"run_id": run_id, "versions": {"torch": "2.13"}})
    SamplesWriter(path).append(_samples(run_id, slow, seed))
    return path


def test_compare_command_gate_and_files(tmp_path):
    base = _run_dir(tmp_path / "base", "a", seed=1)
    same = _run_dir(tmp_path / "same", "b", seed=2)
    slow = _run_dir(tmp_path / "slow", "c", {1 << 24: 1.5}, seed=3, dtype="bfloat16")
    assert len(load_samples(base)) == 30 * 4 * len(SIZES)
    result = CliRunner().invoke(main, ["compare", str(base), str(same), "--fail-if-slower", "5%",
                                       "--out-dir", str(tmp_path / "c1")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["compare", str(base), str(slow), "--fail-if-slower", "5%",
                                       "--out-dir", str(tmp_path / "c2")])
    assert result.exit_code == 1, result.output
    assert re.search(r"16M .* 1\.[45]\dx slower \(significant\)", result.output)
    assert "dtype: float32 -> bfloat16" in result.output
    table = pd.read_csv(tmp_path / "c2" / "compare.csv")
    assert list(table.columns[2:11]) == ["algorithm", "world_size", "size_bytes", "base_us", "other_us",
                                         "ratio", "ci_low", "ci_high", "significant"]
    assert (tmp_path / "c2" / "compare.png").stat().st_size > 0
    assert json.loads((base / "meta.json").read_text())["run_id"] == "a"
    assert len(load_results([base, slow], explain_skips=False)) == 2 * len(SIZES)
