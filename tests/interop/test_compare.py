"""compare: ratio of medians per size, significance from raw samples, the regression gate."""
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.load import load_results, load_samples
from allreduce_bench.core.results.schema import COLUMNS, SAMPLE_COLUMNS
from allreduce_bench.core.results.store import SamplesWriter, write_meta
from allreduce_bench.interop.compare import compare_runs, differing_settings, parse_threshold, rounds_of
from allreduce_bench.interop.significance import bootstrap_medians

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


def _samples(run_id, slow=None, seed=0, n=30, ranks=4, rounds=1, between=0.0, between_runs=0.0):
    """Per round, sample and rank a time; the collective's is the max over ranks. Each size of
    a run sits in its own machine state, a factor exp(N(0, between_runs)), and each of its
    rounds in one more, exp(N(0, between))."""
    slow = slow or {}
    rng = np.random.default_rng(seed)
    rows = []
    for size in SIZES:
        run_state = rng.lognormal(0, between_runs)
        for round_index in range(rounds):
            t = (10 + size / 1e4) * slow.get(size, 1.0) * run_state * rng.lognormal(0, between)
            for sample in range(n):
                for rank in range(ranks):
                    rows.append({"run_id": run_id, "benchmark": "allreduce", "algorithm": "ring",
                                 "world_size": 4, "size_bytes": size, "link": "", "operation": "",
                                 "measure": "", "bucket_mb": float("nan"),
                                 "sample": round_index * n + sample, "rank": rank, "host": "h",
                                 "loops": 1, "round": round_index,
                                 "time_us": t * rng.lognormal(0, 0.05) * (1.0 if rank else 1.02)})
    return pd.DataFrame(rows)[SAMPLE_COLUMNS]


def test_same_distribution_is_not_significant():
    table = compare_runs(_rows("a"), _rows("b"), _samples("a", seed=1, rounds=3, between=0.03),
                         _samples("b", seed=2, rounds=3, between=0.03))
    assert len(table) == len(SIZES)
    assert table["significant"].sum() == 0
    assert (table["ci_low"] < 1).all() and (table["ci_high"] > 1).all()
    assert table["base_rounds"].eq(3).all() and table["verdict"].str.contains("not significant").all()


def test_a_slower_size_is_flagged_with_its_interval():
    slow = {1 << 20: 1.3}
    table = compare_runs(_rows("a"), _rows("b", slow), _samples("a", seed=1, rounds=3, between=0.03),
                         _samples("b", slow, seed=2, rounds=3, between=0.03))
    hit = table.set_index("size_bytes").loc[1 << 20]
    assert hit["significant"] and 1.2 < hit["ratio"] < 1.4 and hit["ci_low"] > 1.1
    assert hit["verdict"].endswith("x slower (significant)")
    assert table["significant"].sum() == 1


def _pairs_flagged(rounds, between_rounds, between_runs, pairs=12):
    """Share of sizes flagged over `pairs` comparisons of identical configurations whose runs
    differ by a run-level factor of log-sd `between_runs`, their rounds by `between_rounds`."""
    flagged = total = 0
    for pair in range(pairs):
        sides = [_samples(f"r{pair}{side}", seed=100 * pair + side, rounds=rounds,
                          between=between_rounds, between_runs=between_runs) for side in (0, 1)]
        table = compare_runs(_rows("a"), _rows("b"), *sides)
        flagged += int(table["significant"].sum())
        total += len(table)
    return flagged / total


@pytest.mark.slow
def test_identical_runs_with_between_round_variation_are_not_flagged():
    # the machine's state changes between rounds by 5% (and runs by 1% more): rounds show it
    assert _pairs_flagged(rounds=3, between_rounds=0.05, between_runs=0.01, pairs=30) <= 0.05


@pytest.mark.slow
def test_folders_of_runs_see_variation_between_runs():
    """Runs 6% apart with steady rounds: one run a side cannot know (it flags), three a side
    can; the runs are the units then."""
    def side(name, count, seed):
        return pd.concat([_samples(f"{name}{k}", seed=seed + k, rounds=2, between=0.01,
                                   between_runs=0.06).assign(source=f"{name}{k}")
                          for k in range(count)], ignore_index=True)
    single = [compare_runs(_rows("a"), _rows("b"), side("a", 1, 10 * i), side("b", 1, 10 * i + 5))
              for i in range(4)]
    folders = [compare_runs(_rows("a"), _rows("b"), side("a", 3, 10 * i), side("b", 3, 10 * i + 5))
               for i in range(4)]
    flagged = [sum(int(t["significant"].sum()) for t in tables) for tables in (single, folders)]
    assert flagged[1] <= 1 < flagged[0]
    assert folders[0]["base_rounds"].eq(6).all()


@pytest.mark.slow
def test_pooled_samples_would_cry_wolf():
    """The same data bootstrapped as independent samples (today's test before rounds) calls
    far more identical sizes different: the within-round spread understates the uncertainty."""
    def pooled_flags(base, other):
        medians = [bootstrap_medians([[np.concatenate(side[0])]], np.random.default_rng(1))
                   for side in (base, other)]
        low, high = np.quantile(medians[1] / medians[0], [0.025, 0.975])
        ratio = np.median(np.concatenate(other[0])) / np.median(np.concatenate(base[0]))
        return bool((low > 1 or high < 1) and abs(ratio - 1) >= 0.03)
    pooled = hierarchical = 0
    for pair in range(6):
        sides = [rounds_of(_samples(f"p{pair}{s}", seed=10 * pair + s, rounds=3, between=0.05))
                 for s in (0, 1)]
        for key in sides[0]:
            pooled += pooled_flags(sides[0][key], sides[1][key])
        table = compare_runs(_rows("a"), _rows("b"), *[_samples(f"p{pair}{s}", seed=10 * pair + s,
                                                                rounds=3, between=0.05) for s in (0, 1)])
        hierarchical += int(table["significant"].sum())
    assert pooled >= 5 * max(1, hierarchical)  # 22 against 3 of 36 sizes


def test_a_real_difference_is_still_flagged_through_run_variation():
    slow = {1 << 22: 1.5, 1 << 24: 1.5}
    table = compare_runs(_rows("a"), _rows("b", slow),
                         _samples("a", seed=5, rounds=3, between=0.05),
                         _samples("b", slow, seed=6, rounds=3, between=0.05))
    flagged = table[table["significant"] == True]["size_bytes"].tolist()  # noqa: E712
    assert flagged == [1 << 22, 1 << 24]


def test_single_round_gets_a_wide_interval_and_says_why():
    one = compare_runs(_rows("a"), _rows("b"), _samples("a", seed=1), _samples("b", seed=2))
    three = compare_runs(_rows("a"), _rows("b"), _samples("a", seed=1, rounds=3),
                         _samples("b", seed=2, rounds=3))
    assert ((one["ci_high"] - one["ci_low"]) > 2 * (three["ci_high"] - three["ci_low"])).all()
    assert one["verdict"].str.contains("one round on a side").any()
    assert one["base_rounds"].eq(1).all()


def test_runs_that_disagree_with_themselves_say_so():
    table = compare_runs(_rows("a"), _rows("b"), _samples("a", seed=1, rounds=4, between=0.25),
                         _samples("b", seed=2, rounds=4, between=0.25))
    assert not table["significant"].any()
    assert table["verdict"].str.contains(r"not significant: the runs disagree with themselves by \d+%").all()
    assert (table["round_spread"] > 0.2).all()


def test_bootstrap_draws_rounds_then_samples():
    rng = np.random.default_rng(0)
    apart = [[np.full(40, 10.0), np.full(40, 14.0)]]  # one run, two rounds, no spread inside
    medians = bootstrap_medians(apart, np.random.default_rng(1))
    assert set(np.unique(np.round(medians, 6))) <= {10.0, 12.0, 14.0}
    assert 0.2 < np.mean(medians == 10.0) < 0.3  # both draws the first round: 1 in 4
    flat = bootstrap_medians([[rng.normal(10, 1, 80)]], np.random.default_rng(1))
    assert np.std(flat) < np.std(medians)


def test_max_over_ranks_makes_the_sample():
    samples = _samples("a", n=5)
    from allreduce_bench.interop.compare import collective_times
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
    with pytest.raises(UsageError, match=r"'5' has no unit; write 5% for 5 percent"):
        parse_threshold("5")  # 5% or 500%: said, not guessed
    lines = differing_settings([{"versions": {"torch": "2.1"}, "hostnames": ["a"]}],
                               [{"versions": {"torch": "2.3"}, "hostnames": ["a"]}],
                               _rows("a"), _rows("b", dtype="bfloat16"))
    assert lines == ["dtype: float32 -> bfloat16", "versions.torch: 2.1 -> 2.3"]


def unwrapped(result) -> str:
    """A command's output with its lines' wrapping (to the terminal's width) undone."""
    return " ".join(result.output.split())


def _run_dir(path, run_id, slow=None, seed=0, dtype="float32", rounds=3):
    rows = _rows(run_id, slow, dtype)
    for column in COLUMNS:
        if column not in rows.columns:
            rows[column] = None
    path.mkdir(parents=True)
    rows[COLUMNS].to_csv(path / "results.csv", index=False)
    write_meta(path, {"run_id": run_id, "versions": {"torch": "2.13"}})
    SamplesWriter(path).append(_samples(run_id, slow, seed, rounds=rounds, between=0.02))
    return path


@pytest.mark.slow
def test_compare_command_gate_and_files(tmp_path):
    base = _run_dir(tmp_path / "base", "a", seed=1)
    same = _run_dir(tmp_path / "same", "b", seed=2)
    slow = _run_dir(tmp_path / "slow", "c", {1 << 24: 1.5}, seed=3, dtype="bfloat16")
    assert len(load_samples(base)) == 3 * 30 * 4 * len(SIZES)
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


def test_compare_command_reads_a_folder_of_runs_per_side(tmp_path):
    for side, seed in (("base", 20), ("other", 30)):
        for k in range(2):
            _run_dir(tmp_path / side / f"run{k}", f"{side}{k}", seed=seed + k)
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "base"), str(tmp_path / "other"),
                                       "--out-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "c" / "compare.csv")
    assert table["base_rounds"].eq(6).all() and table["other_rounds"].eq(6).all()
    assert table["base_samples"].eq(2 * 3 * 30).all()


def _two_state_samples(run_id, loops, seed, slow_share=0.6, rounds=4, n=8):
    """Samples of `loops` calls each, every call in a fast (400 us) or a slow (4000 us) state,
    as gloo's calls on a VM switch between a running and a halted peer; rank 1 lags a little."""
    rng = np.random.default_rng(seed)
    rows = []
    for round_index in range(rounds):
        for sample in range(n):
            calls = np.where(rng.random(loops) < slow_share, 4000.0, 400.0) * rng.lognormal(0, 0.05, loops)
            for rank in range(2):
                rows.append({"run_id": run_id, "benchmark": "allreduce", "algorithm": "ring",
                             "world_size": 4, "size_bytes": 1 << 20, "link": "", "operation": "",
                             "measure": "", "bucket_mb": float("nan"), "sample": round_index * n + sample,
                             "rank": rank, "host": "h", "loops": loops, "round": round_index,
                             "time_us": float(calls.mean()) * (1.0 if rank else 0.99)})
    return pd.DataFrame(rows)[SAMPLE_COLUMNS]


def test_samples_of_very_different_loops_are_compared_by_their_mean_per_call():
    """One call per sample: the median is the slow state's 4000 us; 20 calls per sample: each
    sample is near the mean over states, 2560 us. Same calls, so no difference may be called
    (by medians it read 0.64x, 'faster'); equal loops keep the median."""
    rows = _rows("a")
    rows = rows[rows["size_bytes"] == 1 << 20]
    one, twenty = _two_state_samples("a", 1, seed=1), _two_state_samples("b", 20, seed=2)
    by_median = np.median(twenty.groupby("sample")["time_us"].max()) / np.median(one.groupby("sample")["time_us"].max())
    assert by_median < 0.8  # what a median would have said
    line = compare_runs(rows, rows.assign(run_id="b"), one, twenty).iloc[0]
    assert line["statistic"] == "mean" and (line["base_loops"], line["other_loops"]) == (1, 20)
    assert 0.8 < line["ratio"] < 1.25 and not line["significant"]
    assert "means per call: samples of 1 and 20 calls" in line["verdict"]
    same = compare_runs(rows, rows.assign(run_id="b"), one, _two_state_samples("b", 1, seed=3)).iloc[0]
    assert same["statistic"] == "median" and "means per call" not in same["verdict"]


def test_a_regression_line_names_collective_algorithm_world_size_and_size(tmp_path):
    base = _run_dir(tmp_path / "base", "a", seed=1)
    slow = _run_dir(tmp_path / "slow", "c", {1 << 22: 1.5, 1 << 24: 1.5}, seed=3)
    result = CliRunner().invoke(main, ["compare", str(base), str(slow), "--fail-if-slower", "5%",
                                       "--out-dir", str(tmp_path / "c")])
    assert result.exit_code == 1, result.output
    assert f"REGRESSION: 2 size(s) of {slow} significantly slower than {base} by more than 5%:" in unwrapped(result)
    lines = [line for line in result.output.splitlines() if line.startswith("  allreduce ring N=4 ")]
    assert [line.split(":")[0] for line in lines] == ["  allreduce ring N=4 4M", "  allreduce ring N=4 16M"]
    assert all(re.search(r"us -> .* us \(median\), 1\.\d\dx slower \[", line) for line in lines)
    # the times are the run's own: the median its tables print as time_us_median
    assert "the time_us_median the run's tables print" in result.output


def test_a_run_compared_with_itself_is_refused(tmp_path):
    run = _run_dir(tmp_path / "run", "a", seed=1)
    shutil.copytree(run, tmp_path / "copy")
    for other in (run, tmp_path / "copy"):
        result = CliRunner().invoke(main, ["compare", str(run), str(other), "--out-dir", str(tmp_path / "c")])
        assert result.exit_code == 2 and "the same run(s)" in result.output
        assert "Traceback" not in result.output and not (tmp_path / "c").exists()


def test_compare_writes_beside_the_runs_it_reads_not_into_one(tmp_path):
    base = _run_dir(tmp_path / "base", "a", seed=1)
    new = _run_dir(tmp_path / "new", "b", seed=2)
    inside = sorted(p.name for p in new.iterdir())
    result = CliRunner().invoke(main, ["compare", str(base), str(new)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in new.iterdir()) == inside  # the run read is as it was
    assert (tmp_path / "compare-new" / "compare.csv").exists()
    assert f"compare: {tmp_path / 'compare-new' / 'compare.csv'}" in result.output
    refused = CliRunner().invoke(main, ["compare", str(base), str(new), "--fail-if-slower", "5"])
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output


def test_an_earlier_comparison_is_not_replaced_silently(tmp_path):
    base = _run_dir(tmp_path / "base", "a", seed=1)
    one, two = _run_dir(tmp_path / "one", "b", seed=2), _run_dir(tmp_path / "two", "c", seed=3)
    first = CliRunner().invoke(main, ["compare", str(base), str(one), "--out-dir", str(tmp_path / "c")])
    assert first.exit_code == 0 and "replaces" not in first.output
    second = CliRunner().invoke(main, ["compare", str(base), str(two), "--out-dir", str(tmp_path / "c")])
    assert second.exit_code == 0
    assert f"replaces the earlier one there, which compared {one} against {base}" in unwrapped(second)


def test_the_gate_wants_the_whole_interval_past_the_threshold():
    # a sweep gates tens of sizes at once: a point past 5% whose interval reaches below 1.05 is
    # what same-code runs showed by chance ([1.00, 1.16] on the 2-core VM), not a regression
    from allreduce_bench.interop.compare import regressions

    table = pd.DataFrame({"ratio": [1.08, 1.08, 1.30, 1.30], "ci_low": [1.004, 1.06, 1.2, 1.2],
                          "ci_high": [1.16, 1.10, 1.4, 1.4], "significant": [True, True, True, None]})
    assert regressions(table, 0.05).index.tolist() == [1, 2]
