"""`allreduce-bench ddp`: hook-counted AllReduce with and without no_sync, gradients against a
hand-computed average on a real gloo world, the set_epoch check, the model and the tables."""
import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner
from ddp_ranks import all_checks
from distributed import run_world

from allreduce_bench.cli import main
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.units import parse_whole_count
from allreduce_bench.ddp.analysis import (
    accumulation_table,
    ddp_markdown,
    ddp_summary_text,
    overlap_table,
    overlappable_us,
    pipelined_step_us,
    predicted_step_us,
    timeline_of,
    timeline_overlap,
)
from allreduce_bench.ddp.config import DdpConfig, DdpOptions, ddp_settings, parse_bucket_mbs, rows_expected
from allreduce_bench.ddp.net import layer_width
from allreduce_bench.ddp.plots import timeline_plot
from allreduce_bench.ddp.sampler import set_epoch_check
from allreduce_bench.ddp.sections import ddp_parts
from allreduce_bench.ddp.timeline_store import append_timeline

K = 4


@pytest.fixture(scope="module")
def world_of_two():
    return run_world(2, all_checks, K, timeout=150)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_hook_counts_k_calls_syncing_and_one_with_no_sync(world_of_two):
    for rank in world_of_two:
        one = rank["one_bucket"]
        assert len(one["layout"]) == 1
        assert (one["sync_calls"], one["nosync_calls"]) == (K, 1)
        assert one["sync_bytes"] == K * one["grad_bytes"]
        assert one["nosync_bytes"] == one["grad_bytes"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bucket_bytes_sum_to_the_gradient_size(world_of_two):
    for rank in world_of_two:
        many = rank["many_buckets"]
        buckets = len(many["layout"])
        assert buckets >= 2
        assert sum(many["layout"]) == many["grad_bytes"]
        assert (many["sync_calls"], many["nosync_calls"]) == (K * buckets, buckets)
        assert (many["sync_bytes"], many["nosync_bytes"]) == (K * many["grad_bytes"],
                                                              many["grad_bytes"])
        assert many["wrong"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ddp_gradients_equal_the_average_by_hand(world_of_two):
    for rank in world_of_two:
        grads = rank["gradients"]
        assert grads["local_differs"]  # ranks saw different data: averaging is not a no-op
        assert grads["max_diff"] <= 1e-6 * grads["scale"]
        assert grads["check_wrong"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_timeline_has_every_bucket_in_order_and_its_bytes(world_of_two):
    for rank in world_of_two:
        found = rank["timeline"]
        timeline = pd.DataFrame(found["timeline"])
        assert set(timeline["measure"]) == {"step", "no_overlap"}
        assert (timeline.groupby("measure")["rank"].nunique() == 1).all()  # the slowest rank's
        assert sorted(timeline["iteration"].unique()) == [0, 1, 2]
        for (measure, _), spans in timeline.groupby(["measure", "iteration"]):
            by = {s: spans[spans["span"] == s] for s in ("forward", "backward", "optimizer",
                                                           "allreduce")}
            assert all(len(by[s]) == 1 for s in ("forward", "backward", "optimizer"))
            forward, backward, optimizer = (by[s].iloc[0] for s in ("forward", "backward", "optimizer"))
            # start <= forward end <= backward end <= optimizer start <= end = the step
            assert 0 == forward["start_us"] <= forward["end_us"] == backward["start_us"]
            assert backward["start_us"] <= backward["end_us"] <= optimizer["start_us"]
            assert optimizer["start_us"] <= optimizer["end_us"] == pytest.approx(spans["step_us"].iloc[0])
            reduces = by["allreduce"]
            assert (reduces["start_us"] >= backward["start_us"]).all()  # launched in backward...
            assert (reduces["start_us"] <= reduces["end_us"]).all()
            assert (reduces["end_us"] <= optimizer["start_us"]).all()  # ...done before the step
            assert reduces["bytes"].sum() == found["grad_bytes"]
            if measure == "step":  # every bucket DDP sent, once
                assert sorted(reduces["bytes"]) == sorted(found["layout"])
                assert sorted(reduces["bucket"]) == list(range(len(found["layout"])))
                assert len(found["layout"]) >= 2
            else:  # one AllReduce of all gradients, after backward
                assert len(reduces) == 1 and reduces["start_us"].iloc[0] >= backward["end_us"]
        assert found["times"]["no_overlap"] and found["times"]["backward"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_no_overlap_baseline_gradients_equal_ddps(world_of_two):
    for rank in world_of_two:
        baseline = rank["baseline"]
        assert baseline["grad_max_diff"] <= 1e-6 * baseline["grad_scale"]
        assert baseline["weight_max_diff"] <= 1e-6


def test_set_epoch_check_reports_repeat_without_and_change_with():
    for world_size in (1, 2, 4):
        check = set_epoch_check(16, world_size)
        assert check["without_set_epoch"]["epochs_identical"] is True
        assert check["with_set_epoch"]["epochs_identical"] is False
        for mode in ("without_set_epoch", "with_set_epoch"):
            assert check[mode]["each_epoch_covers_dataset"] is True
            assert len(check[mode]["rank0_epoch0"]) == 16 // world_size


def test_parsers_and_one_line_errors():
    parse_count = parse_whole_count
    assert parse_count("50M") == 50_000_000
    assert parse_count("7B") == 7_000_000_000
    assert parse_count("1.5k") == 1500
    assert parse_bucket_mbs("1,5,25,100") == (1.0, 5.0, 25.0, 100.0)
    for bad in ("abc", "5X", "0"):
        with pytest.raises(UsageError):
            parse_count(bad)
    for bad in ("", "a,b", "0,5"):
        with pytest.raises(UsageError):
            parse_bucket_mbs(bad)
    for args in (["--params", "lots"], ["--bucket-mb", "-1"], ["--accum", "0"],
                 ["--params", "3", "--layers", "8"], ["--backend", "mpi"]):
        result = CliRunner().invoke(main, ["ddp", *args, "--world-sizes", "2"])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def test_layer_width_matches_the_parameter_count():
    for params, layers in ((10_000_000, 8), (50_000_000, 8), (2_000, 2)):
        width = layer_width(params, layers)
        assert abs(layers * (width * width + width) - params) / params < 0.01


def test_model_overlappable_and_prediction():
    # Backward 100 us, comm 80 us in 4 equal buckets: the window is 75 us, the hideable part
    # 60 us (the last bucket never hides), so 60 us is overlappable and 20 us exposed.
    assert overlappable_us(100.0, 80.0, [1, 1, 1, 1]) == pytest.approx(60.0)
    assert predicted_step_us(200.0, 80.0, 60.0) == pytest.approx(220.0)
    # One bucket: nothing can hide.
    assert overlappable_us(100.0, 80.0, [4]) == 0.0
    # Comm shorter than what can hide: prediction is the compute alone.
    assert predicted_step_us(200.0, 10.0, 50.0) == 200.0


def test_pipelined_model_follows_the_buckets():
    # compute 300 (backward 200), comm 100 in two equal buckets: the first is ready at 100 and
    # sent by 150, the second at 200 and sent by 250: the step is 100 + 250.
    assert pipelined_step_us(300.0, 200.0, 100.0, [10, 10]) == pytest.approx(350.0)
    # a slow link: buckets queue; the step is forward/optimizer + the link's finish
    assert pipelined_step_us(300.0, 200.0, 400.0, [10, 10]) == pytest.approx(100.0 + 100.0 + 400.0)
    # one bucket: nothing overlaps
    assert pipelined_step_us(300.0, 200.0, 100.0, [20]) == pytest.approx(400.0)
    # CPU time of the first bucket's AllReduce (half of 40) lengthens backward on shared cores
    assert pipelined_step_us(300.0, 200.0, 100.0, [10, 10], comm_cpu_us=40.0) == pytest.approx(
        100.0 + 220.0 + 50.0)


def _timeline(caps=(1.0, 25.0), buckets=3) -> pd.DataFrame:
    """A recorded-looking timeline: per cap, two iterations of a DDP step whose buckets run
    during backward, and of a wait-then-AllReduce step (times written in ms)."""
    rows = []
    for cap in caps:
        for iteration, stretch in enumerate((1.0, 1.2)):
            for measure in ("step", "no_overlap"):
                step = (400.0 if measure == "step" else 500.0) * stretch
                base = dict(run_id="r1", world_size=2, bucket_mb=cap, measure=measure, rank=1,
                            iteration=iteration, step_us=step)
                rows += [dict(base, span="forward", bucket=-1, bytes=0, start_us=0, end_us=100),
                         dict(base, span="backward", bucket=-1, bytes=0, start_us=100, end_us=300),
                         dict(base, span="optimizer", bucket=-1, bytes=0, start_us=step - 20,
                              end_us=step)]
                if measure == "step":
                    rows += [dict(base, span="allreduce", bucket=b, bytes=10, start_us=150 + 50 * b,
                                  end_us=210 + 50 * b) for b in range(buckets)]
                else:
                    rows.append(dict(base, span="allreduce", bucket=0, bytes=10 * buckets,
                                     start_us=300, end_us=480))
    frame = pd.DataFrame(rows)
    for column in ("step_us", "start_us", "end_us"):  # in ms
        frame[column] = frame[column] * 1e3
    return frame


def test_timeline_figure_has_the_seed_diagrams_elements():
    fig = timeline_plot(_timeline(), footnote="note")
    axes = fig.axes
    assert len(axes) == 2  # one panel per bucket cap
    for ax in axes:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == ["DDP: compute", "DDP: AllReduce", "wait-then-AllReduce: compute",
                          "wait-then-AllReduce: AllReduce"]
        # forward, backward, optimizer per step kind; one bar per bucket plus the baseline's one
        bars = [c for c in ax.collections if c.get_label() == "allreduce"]
        compute = [c for c in ax.collections if c.get_label() in ("forward", "backward", "optimizer")]
        assert (len(bars), len(compute)) == (3 + 1, 6)
        assert {t.get_text() for t in ax.texts} >= {"b1", "b2", "b3"}
        assert "DDP 400 ms (3 buckets)" in ax.get_title(loc="left")  # the median iteration: the shorter
    assert timeline_plot(_timeline().iloc[0:0]) is None


def test_timeline_overlap_and_reading_back(tmp_path):
    timeline = _timeline(caps=(5.0,))
    overlap = timeline_overlap(timeline).set_index("measure")
    # buckets at 150-210, 200-260, 250-310: busy 150-310, of which 150-300 inside backward
    assert overlap.loc["step", "comm_busy_us"] == pytest.approx(160e3)
    assert overlap.loc["step", "during_backward_us"] == pytest.approx(150e3)
    assert overlap.loc["no_overlap", "during_backward_us"] == 0.0
    append_timeline(tmp_path, timeline.to_dict("records"))
    append_timeline(tmp_path, timeline.assign(run_id="other").to_dict("records"))
    rows = pd.DataFrame({"benchmark": ["ddp"], "source": [str(tmp_path)], "run_id": ["r1"]})
    back = timeline_of(rows)
    assert len(back) == len(timeline) and set(back["run_id"]) == {"r1"}


def _frame(step_us: float, comm_us: float = 100.0) -> pd.DataFrame:
    base = dict(benchmark="ddp", world_size=2, bucket_sizes="", accum=1, allreduce_calls=math.nan,
                allreduce_bytes=math.nan, wrong=0, bucket_mb=math.nan)
    rows = [dict(base, measure="compute", bucket_mb=25.0, time_us_median=300.0),
            dict(base, measure="backward", bucket_mb=25.0, time_us_median=200.0),
            dict(base, measure="step", bucket_mb=25.0, bucket_sizes="10;10", time_us_median=step_us),
            dict(base, measure="comm", bucket_mb=25.0, bucket_sizes="10;10", time_us_median=comm_us),
            dict(base, measure="accum_sync", accum=4, allreduce_calls=8, allreduce_bytes=80,
                 time_us_median=1000.0),
            dict(base, measure="accum_no_sync", accum=4, allreduce_calls=2, allreduce_bytes=20,
                 time_us_median=800.0)]
    return pd.DataFrame(rows)


def test_overlap_table_hidden_share_and_clipping():
    row = overlap_table(_frame(step_us=340.0)).iloc[0]
    assert row["exposed_us"] == pytest.approx(40.0)
    assert row["hidden_share"] == pytest.approx(0.6)
    assert not row["clipped"]
    assert row["predicted_us"] == pytest.approx(350.0)  # overlappable = min(100, 50)
    slow = overlap_table(_frame(step_us=500.0)).iloc[0]  # slower than compute + comm
    assert slow["hidden_share"] == 0.0 and slow["clipped"]
    assert slow["hidden_share_raw"] == pytest.approx(-1.0)
    # the console explains it where it prints it: exposed 200 ms > comm 100 ms
    summary = " ".join(ddp_summary_text(_frame(step_us=500.0)).split())  # wrapped to the terminal
    assert "0% (raw -100%, clipped)" in summary
    assert ("N=2, bucket cap 25 MiB: the DDP step took 0.2 ms more than compute, more than the "
            "0.1 ms its AllReduce takes alone, so nothing was hidden") in summary
    assert "less than compute" in ddp_summary_text(_frame(step_us=250.0))  # raw > 1: noise
    accum = accumulation_table(_frame(340.0)).iloc[0]
    assert accum["saving"] == pytest.approx(0.2)
    assert (accum["sync_calls"], accum["no_sync_calls"]) == (8, 2)
    text = ddp_markdown(_frame(500.0), {"set_epoch_check": [set_epoch_check(8, 2)]})
    assert "clipped" in text and "no_sync" in text and "identical" in text
    assert ddp_markdown(pd.DataFrame({"benchmark": ["allreduce"]})) == ""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ddp_command_end_to_end(tmp_path):
    """The CLI on a local world of 2: rows, figures, meta with the set_epoch check, a section."""
    from allreduce_bench.core.config.launch import LaunchConfig, LaunchOptions

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["ddp", "--world-sizes", "2", "--params", "40K", "--layers",
                                       "4", "--bucket-mb", "0.0625,25", "--accum", "2", "--iters",
                                       "2", "--warmup", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = load_results(out)
    assert set(frame["benchmark"]) == {"ddp"}
    assert set(frame["measure"]) == {"compute", "backward", "ddp_no_comm", "step", "comm", "comm_cpu",
                                     "compute_cpu", "no_overlap", "accum_sync", "accum_no_sync"}
    # the progress bar counts rows_expected: every row the run records
    settings = ddp_settings(DdpOptions(LaunchOptions(), params="40K", layers=4, bucket_mb="0.0625,25",
                                       accum=2, iters=2, warmup=0), device="cpu")
    launch = LaunchConfig((2,), "gloo", "cpu", None, "", out, 60.0)
    assert len(frame) == rows_expected(DdpConfig(launch, settings)) == 18
    assert int(frame["wrong"].sum()) == 0
    table = overlap_table(frame)
    assert list(table["bucket_mb"]) == [0.0625, 25.0]
    assert (table["step_us"] > 0).all() and (table["comm_us"] > 0).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["set_epoch_check"][0]["with_set_epoch"]["epochs_identical"] is False
    assert (out / "plots" / "ddp_overlap.png").exists()
    assert (out / "plots" / "ddp_accumulation.png").exists()
    assert (out / "plots" / "ddp_timeline.png").exists()
    assert (table["no_overlap_us"] > 0).all() and (table["speedup_vs_no_overlap"] > 0).all()
    section = ddp_parts(load_results(out), out / "plots")[0]
    assert "ddp_overlap.png" in section and "| 2 | 25 |" in section
    assert "ddp_timeline.png" in section and "wait-then-AllReduce" in section


def test_gloo_cpu_time_costs_backward_more_where_the_rank_gets_less_cpu():
    """Under a 50% quota (compute got 0.5 CPU seconds per second) gloo's 20 us of CPU take 40 us
    from backward: the model counts it so (issue 43: it predicted 20% short at --host-cpu 50%)."""
    base = _frame(step_us=400.0)
    cpu = dict(base.iloc[3], measure="comm_cpu", time_us_median=20.0)

    def compute_cpu(us: float) -> dict:
        return dict(base.iloc[0], measure="compute_cpu", time_us_median=us)
    whole = overlap_table(pd.concat([base, pd.DataFrame([cpu, compute_cpu(300.0)])], ignore_index=True)).iloc[0]
    half = overlap_table(pd.concat([base, pd.DataFrame([cpu, compute_cpu(150.0)])], ignore_index=True)).iloc[0]
    assert whole["cpu_rate"] == pytest.approx(1.0) and half["cpu_rate"] == pytest.approx(0.5)
    # backward 200 + 10 (or 20) of CPU, the second bucket's 50 us of link after it: step = compute + 10 (20) + 50
    assert whole["predicted_us"] == pytest.approx(360.0) and half["predicted_us"] == pytest.approx(370.0)
    # 25 us of CPU in 100 us is CPU-bound at half a CPU (50 us of the rank's time), not at a whole one
    bound = [pd.concat([_frame(step_us=500.0), pd.DataFrame([dict(cpu, time_us_median=25.0), compute_cpu(us)])],
                       ignore_index=True) for us in (300.0, 150.0)]
    assert [overlap_table(f).iloc[0]["cpu_bound"] for f in bound] == [False, True]


def test_a_cpu_bound_allreduce_gets_one_line_instead_of_a_hidden_share_of_0():
    base = _frame(step_us=500.0)
    cpu = dict(base.iloc[3], measure="comm_cpu", time_us_median=60.0)  # 60 of the 100 us alone
    frame = pd.concat([base, pd.DataFrame([cpu])], ignore_index=True)
    assert overlap_table(frame).iloc[0]["cpu_bound"]
    summary = " ".join(ddp_summary_text(frame).split())  # the console wraps its notes
    assert "0% (raw" not in summary and "| 2 | 25 | 2 | 0.3 | 0.1 | 0.1 | 0.5 | 0.2 | - |" in ddp_markdown(frame)
    assert ("no overlap can show at N=2, bucket caps 25 MiB: gloo's AllReduce is CPU-bound there "
            "(CPU 0.1-0.1 ms of its 0.1-0.1 ms alone)") in summary
    assert "so nothing was hidden" not in summary  # the line replaces the clipped note
    # the same step with little CPU time is noise or DDP's own cost: the clipped share stays
    light = frame.assign(time_us_median=frame["time_us_median"].where(frame["measure"] != "comm_cpu", 10.0))
    assert not overlap_table(light).iloc[0]["cpu_bound"] and "0% (raw -100%, clipped)" in ddp_summary_text(light)
