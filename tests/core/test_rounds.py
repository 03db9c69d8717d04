"""--rounds: the order of the passes, the sampling of each round, pooling and the spread."""
import math

import pytest

from allreduce_bench.core.config import Sampling
from allreduce_bench.core.measure import rounds


def test_passes_alternate_direction():
    items = [("ring", 1), ("ring", 2), ("tree", 1)]
    planned = rounds.order(items, 3)
    assert planned[:3] == [(0, i) for i in items]
    assert planned[3:6] == [(1, i) for i in reversed(items)]
    assert planned[6:] == [(2, i) for i in items]
    # the last pass runs forward: rows come in the order of the items
    assert rounds.order(items, 2) == [(0, i) for i in reversed(items)] + [(1, i) for i in items]
    assert rounds.order(items, 1) == [(0, i) for i in items]
    with pytest.raises(ValueError):
        rounds.order(items, 0)


def test_each_round_gets_its_share_and_later_rounds_reuse_the_first():
    from allreduce_bench.core.measure.timing import Measured

    base = Sampling(budget_s=0.3, min_samples=5, max_samples=50, warmup=2)
    assert rounds.round_sampling(base, 1, 0, None) == base
    first = rounds.round_sampling(base, 3, 0, None)
    assert first.budget_s == pytest.approx(0.1) and first.min_samples == 2 and first.max_samples == 17
    assert first.loops is None and first.samples is None and first.warmup == 2  # calibrates, plans
    later = rounds.round_sampling(base, 3, 2, Measured([[1.0] * 7], loops=64, samples=7))
    assert later.loops == 64 and later.samples == 7 and later.warmup == 2
    fixed = rounds.round_sampling(Sampling(loops=4, samples=9), 3, 0, None)
    assert fixed.loops == 4 and fixed.samples == 3
    # --samples is the total over the rounds: 6 over 4 rounds is 2, 2, 1, 1
    split = [rounds.round_sampling(Sampling(samples=6), 4, k, Measured([[1.0]], 3, 2)).samples
             for k in range(4)]
    assert split == [2, 2, 1, 1]


def test_pooling_and_the_spread_of_round_medians():
    per_round = [[[10, 11, 12], [10, 10, 13]],  # round 0: rank 0, rank 1 -> max 10, 11, 13
                 [[20, 20], [21, 19]]]  # round 1 -> max 21, 20
    assert rounds.pooled(per_round) == [[10, 11, 12, 20, 20], [10, 10, 13, 21, 19]]
    # medians 11 and 20.5: (20.5 - 11) / 15.75
    assert rounds.round_spread(per_round) == pytest.approx(9.5 / 15.75)
    agree = rounds.round_columns([[[10, 10]], [[10.5, 10.4]]])
    assert not agree["rounds_disagree"] and agree["round_spread"] < 0.06
    one = rounds.round_columns([[[1, 2]]])
    assert one["rounds"] == 1 and one["round_spread"] == 0.0 and not one["rounds_disagree"]


def test_rounds_disagree_only_when_apart_and_beyond_their_samples_spread():
    # 4 rounds of 6 samples, each round 30% slower than the one before: apart and significant
    shifted = [[[100 * 1.3 ** k + j for j in range(6)]] for k in range(4)]
    columns = rounds.round_columns(shifted)
    assert columns["round_spread"] > 0.2 and columns["round_p"] < 0.01 and columns["rounds_disagree"]
    # 2 samples a round drawn from one wide distribution: medians far apart by chance, p large
    chance = [[[100, 130]], [[135, 160]], [[95, 170]], [[105, 150]]]
    columns = rounds.round_columns(chance)
    assert columns["round_spread"] > 0.2 and columns["round_p"] > 0.5 and not columns["rounds_disagree"]
    # close rounds are never tested
    assert math.isnan(rounds.round_columns([[[10, 10]], [[10.5, 10.4]]])["round_p"])


@pytest.mark.slow
def test_a_run_in_rounds_pools_them_and_keeps_each_rounds_samples(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from allreduce_bench.core.results.load import load_results, load_samples

    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--out", str(tmp_path),
                           "--world-sizes", "2", "--sizes", "4K,64K", "--algos", "native,ring",
                           "--rounds", "3", "--samples", "6", "--loops", "1", "--bind", "core"],
                          capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = load_results(tmp_path)
    assert len(rows) == 4 and (rows["rounds"] == 3).all() and (rows["samples"] == 6).all()
    assert rows["round_spread"].ge(0).all() and (rows["wrong"] == 0).all()
    samples = load_samples(tmp_path)
    per_row = samples.groupby(["algorithm", "size_bytes"])
    assert (per_row["round"].nunique() == 3).all() and (per_row["sample"].nunique() == 6).all()
    assert sorted(samples["sample"].unique()) == list(range(6))  # numbered on across rounds
    placement = json.loads((tmp_path / "meta.json").read_text())["binding"]["2"]
    assert [p["how"] for p in placement["ranks"]] == ["core", "core"]
    if len(os.sched_getaffinity(0)) >= 2:
        assert placement["summary"] == "ranks bound by core"
        assert placement["ranks"][0]["cpus"] != placement["ranks"][1]["cpus"]
    report = (tmp_path / "plots" / "report.md").read_text()
    assert "N=2: ranks bound by core" in report or "sharing CPUs" in report


def _fake_sweep(settle_after: dict, extra_budget_s: float, call_s: float = 0.1):
    """passes.run over fake items: item x's row is unstable until it has settle_after[x]
    rounds (None: never); each measurement's calls take call_s. Returns (the measurements in
    order as (label, round), the rows emitted as (label, rounds, unstable), the headers)."""
    from types import SimpleNamespace

    from allreduce_bench.core.measure.timing import Measured
    from allreduce_bench.core.sweep import passes

    measured, emitted, headers = [], [], []

    def item(label):
        def measure(sampling, check):
            measured.append(label)
            return Measured([[call_s * 1e6]], loops=1, samples=1), 0

        def row(taken, wrong):
            need = settle_after[label]
            return {"label": label, "rounds": len(taken),
                    "unstable": need is None or len(taken) < need}, None
        return passes.Item(label, 1, measure, row)

    config = SimpleNamespace(rounds=2, sampling=Sampling(budget_s=0.02, warmup=0),
                             extra_budget_s=extra_budget_s, launch=SimpleNamespace(world_sizes=(2,)),
                             algorithms=("x",), collectives=())
    phase = SimpleNamespace(
        wanted=lambda label, size: True, measuring=lambda label, size, index: None,
        record=lambda label, row, samples: emitted.append((row["label"], row["rounds"], row["unstable"])),
        settled=lambda label, world: headers.append(label))
    passes.run(config, SimpleNamespace(rank=0), [item(label) for label in settle_after], phase)
    return measured, emitted, headers


def test_unstable_rows_get_extra_rounds_until_they_settle():
    measured, emitted, headers = _fake_sweep({"a": 2, "b": 4, "c": 3, "d": 2}, extra_budget_s=10)
    # planned: 2 passes over a-d; then extra passes, alternating direction, over b and c only
    assert measured == list("dcba") + list("abcd") + ["c", "b", "b"]
    assert emitted == [("a", 2, False), ("d", 2, False), ("c", 3, False), ("b", 4, False)]
    assert headers == ["a", "d", "c", "b"]  # each label's table once its rows are settled


def test_extra_rounds_stop_when_the_budget_is_spent():
    # 0.1 s of calls each: a budget of 0.25 s allows 3 extra measurements, shared by b and c
    measured, emitted, _ = _fake_sweep({"a": 2, "b": None, "c": None}, extra_budget_s=0.25)
    assert measured[6:] == ["c", "b", "b"]
    assert emitted == [("a", 2, False), ("b", 4, True), ("c", 3, True)]
    # no budget: the rows come after their planned rounds, flagged
    measured, emitted, _ = _fake_sweep({"a": 2, "b": None}, extra_budget_s=0)
    assert len(measured) == 4 and emitted == [("a", 2, False), ("b", 2, True)]


def test_the_summary_names_the_rows_that_took_extra_rounds_and_those_left_unsettled():
    import pandas as pd

    from allreduce_bench.core.analysis.advice import extra_rounds_line

    frame = pd.DataFrame({"algorithm": ["ring", "ring", "native"], "world_size": [2, 2, 2],
                          "size_bytes": [4096, 16 << 20, 4096], "rounds": [4, 7, 9],
                          "unstable": [False, False, True], "time_us_median": [100.0, 9000.0, 50.0],
                          "time_us_ci_low": [99.0, 8900.0, 30.0], "time_us_ci_high": [101.0, 9100.0, 70.0],
                          "round_spread": [0.0, 0.05, 0.05], "round_p": [math.nan] * 3})
    meta = {"config": {"rounds": 4, "extra_budget_s": 4.0}}
    assert extra_rounds_line(frame, meta) == (
        "extra rounds: 2 of 3 rows took them (--extra-budget 4 s); 1 did not settle before it was "
        "spent: native N=2 4K (interval)")
    assert extra_rounds_line(frame[:1], meta) is None


def test_what_ranks_hold_of_a_round_until_its_row_is_made():
    """passes.held: rank 0 every rank's samples as one array, the others the slowest rank's
    series alone (not N ranks' samples); everything that decides extra rounds on every rank
    alike, `unstable`, the rounds' agreement and the calls' seconds, comes out the same, and
    rank 0's row and samples are those of the lists it was given."""
    import numpy as np

    from allreduce_bench.core import metrics
    from allreduce_bench.core.measure import rounds
    from allreduce_bench.core.measure.timing import Measured
    from allreduce_bench.core.results.schema import samples_frame
    from allreduce_bench.core.sweep import passes

    rng = np.random.default_rng(53)
    taken = [Measured((100 + 40 * rng.random((64, 12))).tolist(), loops=3, samples=12) for _ in range(3)]
    others = [passes.held(m, writer=False) for m in taken]
    writer = [passes.held(m, writer=True) for m in taken]
    assert [len(m.per_rank_us) for m in others] == [1, 1, 1] and others[0].loops == 3 and others[0].samples == 12
    assert list(others[0].per_rank_us[0]) == np.max(taken[0].per_rank_us, axis=0).tolist()
    assert np.asarray(writer[0].per_rank_us).dtype == np.float64 and np.asarray(writer[0].per_rank_us).shape == (64, 12)

    def stats(held):
        return metrics.sample_stats(rounds.pooled([m.per_rank_us for m in held]), 3)

    full = stats(taken)
    assert stats(writer) == full
    for key in ("time_us_median", "time_us_ci_low", "time_us_ci_high", "unstable"):
        assert stats(others)[key] == full[key]
    agreement = rounds.round_columns([m.per_rank_us for m in taken])
    for held in (others, writer):
        assert rounds.round_columns([m.per_rank_us for m in held]) == agreement
        assert passes.calls_s(held[0], 1) == passes.calls_s(taken[0], 1)
    row = {"run_id": "r", "benchmark": "allreduce", "algorithm": "ring", "world_size": 64, "size_bytes": 8, "loops": 3}
    assert samples_frame(row, rounds.pooled([m.per_rank_us for m in writer]), range(64)).equals(
        samples_frame(row, rounds.pooled([m.per_rank_us for m in taken]), range(64)))
