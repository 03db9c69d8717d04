"""The cost model, the DDP step model and their commands: plain numbers, no processes."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError
from allreduce_bench.model import step as ddp
from allreduce_bench.model.cost import (
    CostModel,
    Link,
    Links,
    MissingLink,
    allreduce_time,
    compare,
    crossovers,
    fit,
    median_abs_error,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "results" / "example-cpu-gloo"
FAST = Links(Link(1e-6, 100e9), Link(10e-6, 1e9))  # intra: 1 us, 100 GB/s; inter: 10 us, 1 GB/s
MB = 1e6


def cli(*args):
    return CliRunner().invoke(main, list(args))


# ---- the seed's worked example --------------------------------------------------------------

def test_seed_example_numbers():
    grad = ddp.gradient_bytes(units.parse_count("7B"), "bfloat16")
    assert grad == 14e9
    assert ddp.traffic_bytes(grad) == 28e9
    nvlink = ddp.seed_step(grad, 0.5, units.parse_bandwidth("900GB/s"))
    infiniband = ddp.seed_step(grad, 0.5, units.parse_bandwidth("25GB/s"))
    assert round(nvlink.comm_s, 3) == 0.031
    assert round(infiniband.comm_s, 2) == 1.12
    assert nvlink.hidden and nvlink.efficiency > 0.99  # inside a node: hidden behind compute
    assert not infiniband.hidden and infiniband.comm_s > infiniband.compute_s  # across: exposed
    # backward = 2/3 of 0.5 s overlaps; 1.12 s - 1/3 s is exposed
    assert infiniband.step_s == pytest.approx(0.5 + 1.12 - 0.5 * 2 / 3)
    assert infiniband.efficiency == pytest.approx(0.5 / infiniband.step_s)


def test_seed_example_command():
    result = cli("model", "ddp", "--params", "7B", "--dtype", "bfloat16", "--compute", "0.5s",
                 "--bandwidth", "900GB/s", "--bandwidth", "25GB/s")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "= 14 GB" in out and "= 28 GB" in out
    nvlink, infiniband = [line for line in out.splitlines() if "GB/s" in line and " s " in line]
    assert "0.0311 s" in nvlink and "hidden" in nvlink
    assert "1.12 s" in infiniband and "exposed" in infiniband and "bottleneck" in infiniband


def test_step_model_overlap_rules():
    # comm all but the last bucket fits in backward: only the last bucket is exposed
    step = ddp.step_time(compute_s=0.6, comm_s=0.3, last_bucket_s=0.01)
    assert step.exposed_s == pytest.approx(0.01) and step.hidden
    # backward (0.4 s) bounds the overlap
    step = ddp.step_time(compute_s=0.6, comm_s=1.0, last_bucket_s=0.01)
    assert step.exposed_s == pytest.approx(0.6) and not step.hidden
    assert step.efficiency == pytest.approx(0.6 / 1.2)
    # an explicit overlappable part, and no overlap at all
    assert ddp.step_time(1.0, 0.5, 0.1, overlappable_s=0.2).exposed_s == pytest.approx(0.3)
    assert ddp.step_time(1.0, 0.5, 0.1, backward_share=0).step_s == pytest.approx(1.5)
    assert ddp.buckets(60 * 2 ** 20, 25 * 2 ** 20) == (2, 10 * 2 ** 20)
    assert ddp.buckets(50 * 2 ** 20, 25 * 2 ** 20) == (1, 25 * 2 ** 20)


def test_weak_scaling_by_hand():
    links = Links(Link(0.0, 900e9), Link(0.0, 25e9))
    work = ddp.TrainingStep(7e9, "bfloat16", 0.5, 1e9, ddp.DEFAULT_BACKWARD_SHARE, None, 14e9, 14)
    table = ddp.weak_scaling(work, [1, 8, 16], 8, links)
    one, node, two_nodes = table.to_dict("records")
    assert one["comm_s"] == 0 and one["efficiency"] == 1
    assert node["comm_s"] == pytest.approx(2 * 7 / 8 * 14e9 / 900e9) and node["hidden"]
    assert two_nodes["comm_s"] == pytest.approx(2 * 15 / 16 * 14e9 / 25e9)  # inter link bounds
    assert not two_nodes["hidden"] and two_nodes["efficiency"] < 0.5
    assert ddp.parse_gpu_counts("8,16,...,1024") == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert ddp.parse_gpu_counts("4,2,1") == [1, 2, 4]
    for bad in ("8,12,...,100", "8,16,...,1000", "...,8", "eight"):
        with pytest.raises(UsageError):
            ddp.parse_gpu_counts(bad)


def test_scaling_command_prints_and_plots(tmp_path):
    figure = tmp_path / "ddp.png"
    result = cli("model", "ddp", "--params", "7B", "--compute", "0.5s", "--gpus", "8,16,...,64",
                 "--ranks-per-node", "8", "--bandwidth", "900GB/s", "--bandwidth", "25GB/s",
                 "--plot", str(figure))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()  # the table's rows, not a wrapped line's end
            if len(line.split()) > 5 and line.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["8", "16", "32", "64"]
    assert rows[0][-1] == "hidden" and all(r[-1] == "exposed" for r in rows[1:])
    assert figure.stat().st_size > 0


# ---- the AllReduce formulas against hand-computed cases --------------------------------------

def test_ring_one_node():
    links = Links(Link(1e-6, 1e9), None)
    assert allreduce_time("ring", 4 * MB, 4, 4, links) == pytest.approx(6 * (1e-6 + 1e-3))


def test_ring_across_nodes_is_bounded_by_the_slowest_link():
    # 2 nodes x 2: 6 steps of 1 MB, each max(1 us + 10 us, 10 us + 1 ms)
    assert allreduce_time("ring", 4 * MB, 4, 2, FAST) == pytest.approx(6 * (10e-6 + 1e-3))
    # a link faster across than inside: the intra link bounds the step
    swapped = Links(FAST.inter, FAST.intra)
    assert allreduce_time("ring", 4 * MB, 4, 2, swapped) == pytest.approx(6 * (10e-6 + 1e-3))


def test_naive_root_moves_everything():
    # rank 0: 1 tensor from its node, 2 through the uplink, each way
    assert allreduce_time("naive", 4 * MB, 4, 2, FAST) == pytest.approx(2 * 2 * (10e-6 + 4e-3))
    assert allreduce_time("naive", 4 * MB, 4, 4, FAST) == pytest.approx(2 * 3 * (1e-6 + 4e-5))


def test_hierarchical_sends_a_shard_across():
    # 2 nodes x 4: intra RS + AG: 2*3 steps of 1 MB; inter: 2*1 steps, 4 shards of 0.5 MB share
    # the uplink, 2 MB through it per step
    expected = 6 * (1e-6 + 1 * MB / 100e9) + 2 * (10e-6 + 2 * MB / 1e9)
    assert allreduce_time("hierarchical", 4 * MB, 8, 4, FAST) == pytest.approx(expected)
    one_node = allreduce_time("hierarchical", 4 * MB, 4, 4, FAST)
    assert one_node == pytest.approx(allreduce_time("ring", 4 * MB, 4, 4, FAST))


def test_native_is_a_ring_unless_told_otherwise_and_edge_cases():
    assert allreduce_time("native", 4 * MB, 8, 4, FAST) == allreduce_time("ring", 4 * MB, 8, 4, FAST)
    assert allreduce_time("native", 4 * MB, 8, 4, FAST, native_as="hierarchical") == \
        allreduce_time("hierarchical", 4 * MB, 8, 4, FAST)
    assert allreduce_time("ring", 4 * MB, 1, 1, FAST) == 0
    # one rank per node: every ring edge crosses nodes
    assert allreduce_time("ring", 3 * MB, 3, 1, FAST) == pytest.approx(4 * (10e-6 + 1e-3))
    with pytest.raises(UsageError, match="whole number of nodes"):
        allreduce_time("ring", 1, 12, 8, FAST)
    with pytest.raises(UsageError, match="inter-node"):
        allreduce_time("ring", 1, 4, 2, Links(FAST.intra, None))
    with pytest.raises(UsageError, match="unknown algorithm"):
        allreduce_time("no-such-algorithm", 1, 4, 2, FAST)


# ---- fitting ---------------------------------------------------------------------------------

def synthetic(links, layouts=((2, 2), (4, 2)), noise=0.05, seed=0, algorithms=None):
    """Rows as `run` writes them, with times from the model times log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for algorithm in algorithms or ["native", "ring", "naive", "hierarchical"]:
        for world_size, per_node in layouts:
            for size in [4 ** k * 1024 for k in range(1, 9)]:  # 4K .. 64M
                seconds = allreduce_time(algorithm, size, world_size, per_node, links)
                rows.append({"benchmark": "allreduce", "algorithm": algorithm, "world_size": world_size,
                             "nodes": world_size // per_node, "ranks_per_node": per_node,
                             "size_bytes": size, "busbw_GBps": 0.0,
                             "time_us_median": seconds * 1e6 * rng.lognormal(0, noise)})
    return pd.DataFrame(rows)


TRUE = Links(Link(50e-6, 2e9), Link(400e-6, 0.5e9))  # like this machine's loopback, inter slower


@pytest.mark.parametrize("loss", ["absolute", "squares"])
def test_fit_recovers_known_links_from_noisy_data(loss):
    model = fit(synthetic(TRUE), loss=loss)
    for algorithm, result in model.algorithms.items():
        assert not result.shared
        for fitted, true in ((result.links.intra, TRUE.intra), (result.links.inter, TRUE.inter)):
            assert fitted.alpha_s == pytest.approx(true.alpha_s, rel=0.1), algorithm
            assert fitted.bandwidth_Bps == pytest.approx(true.bandwidth_Bps, rel=0.1), algorithm
    errors = median_abs_error(compare(synthetic(TRUE), model))
    assert (errors["all"] < 10).all()


def test_fit_says_what_the_rows_cannot_tell():
    one_node = fit(synthetic(TRUE, layouts=((2, 2), (4, 4)), noise=0))
    assert one_node.links("ring").inter is None
    assert one_node.links("ring").intra.bandwidth_Bps == pytest.approx(2e9)
    only_2x2 = fit(synthetic(TRUE, layouts=((4, 2),), noise=0, algorithms=["hierarchical"]))
    assert only_2x2.algorithms["hierarchical"].shared
    assert only_2x2.links("hierarchical").intra == only_2x2.links("hierarchical").inter
    with pytest.raises(UsageError, match="two different sizes"):
        fit(synthetic(TRUE).query("size_bytes == 4096"))


def test_fit_keeps_the_inter_link_no_faster_than_intra():
    # measured steps across nodes cheaper than inside one (noise on a loaded machine): the fit
    # must not give a faster inter link, or the prediction's max would not be what was fitted
    swapped = Links(TRUE.inter, TRUE.intra)
    data = synthetic(swapped, noise=0, algorithms=["ring"])
    data.loc[data["world_size"] == 4, "time_us_median"] /= 3
    links = fit(data).links("ring")
    assert links.inter.alpha_s >= links.intra.alpha_s
    assert links.inter.bandwidth_Bps <= links.intra.bandwidth_Bps


def test_model_json_round_trip(tmp_path):
    model = fit(synthetic(TRUE), sources=["somewhere"])
    path = model.save(tmp_path / "model.json")
    again = CostModel.load(tmp_path)
    assert again.time("hierarchical", 1 << 20, 8, 2) == pytest.approx(model.time("hierarchical", 1 << 20, 8, 2))
    assert json.loads(path.read_text())["algorithms"]["ring"]["inter"]["bandwidth_GBps"] > 0
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UsageError, match="not a model"):
        CostModel.load(tmp_path / "bad.json")


# ---- commands --------------------------------------------------------------------------------

def test_fit_then_predict_commands(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    synthetic(TRUE).to_csv(run_dir / "results.csv", index=False)
    result = cli("model", "fit", str(run_dir))
    assert result.exit_code == 0, result.output
    assert "Median |error| (%) over sizes >= 1M" in result.output
    made = tmp_path / "plots" / "run"  # where plot and report write (the cwd's plots/), not into the run
    assert (made / "model.json").exists() and (made / "plots" / "model.png").exists()
    assert sorted(p.name for p in run_dir.iterdir()) == ["results.csv"]
    assert cli("model", "fit", str(run_dir), "--tag", "nope").exit_code == 2
    # fitting only the large sizes (a shaped link's burst) still recovers the links
    result = cli("model", "fit", str(run_dir), "--fit-min-size", "1M", "--no-plot")
    assert result.exit_code == 0, result.output
    assert cli("model", "fit", str(run_dir), "--fit-min-size", "64G").exit_code == 2

    result = cli("model", "predict", "--algo", "ring", "--world-size", "4", "--ranks-per-node", "2",
                 "--size", "64M", "--model", str(made))
    assert result.exit_code == 0, result.output
    predicted_ms = float(result.output.split("64M")[1].split()[0])
    assert predicted_ms == pytest.approx(allreduce_time("ring", 64 << 20, 4, 2, TRUE) * 1e3, rel=0.1)

    result = cli("model", "predict", "--algo", "ring", "--world-size", "64", "--ranks-per-node", "8",
                 "--size", "1G", "--intra-bw", "900GB/s", "--inter-bw", "25GB/s",
                 "--intra-latency", "5us", "--inter-latency", "10us")
    assert result.exit_code == 0, result.output
    expected = 126 * (10e-6 + 2 ** 30 / 64 / 25e9)
    assert f"{expected * 1e3:.3g} ms" in result.output


@pytest.mark.parametrize("args", [
    ["ddp", "--params", "7X", "--compute", "0.5s", "--bandwidth", "25GB/s"],
    ["ddp", "--params", "7B", "--compute", "0.5", "--bandwidth", "25GB/s"],
    ["ddp", "--params", "7B", "--compute", "0.5s", "--bandwidth", "25GB"],
    ["ddp", "--params", "7B", "--compute", "0.5s", "--bandwidth", "25GB/s", "--dtype", "float12"],
    ["ddp", "--params", "7B", "--compute", "0.5s", "--gpus", "8,12,...,100", "--bandwidth", "1GB/s"],
    ["predict", "--world-size", "64", "--intra-bw", "fast"],
    ["predict", "--world-size", "12", "--intra-bw", "1GB/s", "--inter-bw", "1GB/s"],
    ["predict", "--world-size", "16", "--intra-bw", "1GB/s"],
    ["predict", "--world-size", "8"],
])
def test_bad_input_is_one_line_and_exit_2(args):
    result = cli("model", *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("allreduce-bench: error:"), result.output
    assert "Traceback" not in result.output


def test_units_parse_and_print():
    assert units.parse_count("7B") == 7e9 and units.parse_count("350M") == 350e6
    assert units.parse_bytes("14GB") == 14e9 and units.parse_bytes("25MiB") == 25 * 2 ** 20
    assert units.parse_bandwidth("25GB/s") == 25e9 == units.parse_bandwidth("200Gb/s")
    assert units.parse_bandwidth("10GBps") == 10e9
    assert units.parse_seconds("0.5s") == 0.5 and units.parse_seconds("10us") == 1e-5
    assert units.parse_seconds("20ms") == 0.02 and units.parse_seconds("0") == 0
    assert units.format_bytes(28e9) == "28 GB" and units.format_bytes(25 * 2 ** 20) == "25 MiB"
    assert units.format_bandwidth(900e9) == "900 GB/s"
    assert units.format_seconds(0.0311) == "31.1 ms" and units.format_seconds(1.12, "s") == "1.12 s"
    assert units.format_seconds(3.36e-6, "s") == "3.36 us"
    assert units.format_count(7e9) == "7B"


# ---- one layout, a quick run, every published log ------------------------------------------------

def _fit_run(data: pd.DataFrame, run_dir: Path):
    """`model fit` on `data` written as a run; it must succeed."""
    run_dir.mkdir()
    data.to_csv(run_dir / "results.csv", index=False)
    out = cli("model", "fit", str(run_dir), "--no-plot")
    assert out.exit_code == 0, out.output
    return out


@pytest.mark.wide_console("model fit's links table: its note column (model/fitting.py links_lines)")
def test_one_layout_gets_an_effective_link_that_predicts_it(tmp_path):
    """An imported 2 x 8 nccl-tests log: every ring step crosses nodes, intra steps ride along."""
    data = synthetic(TRUE, layouts=((16, 8),), algorithms=["native"], noise=0)
    model = fit(data)
    result = model.algorithms["native"]
    assert result.shared and result.links.intra == result.links.inter
    assert result.links.inter.bandwidth_Bps == pytest.approx(TRUE.inter.bandwidth_Bps, rel=1e-3)
    assert (compare(data, model)["error_pct"].abs() < 1).all()
    out = _fit_run(data, tmp_path / "run")
    assert "one effective link for intra and inter (2x8)" in out.output
    assert "Measure one node alone too (a world of 8 ranks on one node" in out.output
    assert "Median |error| (%) over sizes >= 1M" in out.output


def test_a_quick_run_fits_with_the_defaults_and_names_the_missing_sizes(tmp_path):
    run_dir = tmp_path / "quick"
    out = _fit_run(synthetic(TRUE, noise=0.02).query("size_bytes in (4096, 262144)"), run_dir)
    assert "no size of 1M or more was measured (sizes: 4K, 256K)" in out.output
    assert "Median |error| (%) over sizes >= 4K" in out.output
    assert (tmp_path / "plots" / "quick" / "model.json").exists()


def test_model_fit_on_a_committed_example_writes_where_report_does_and_leaves_the_example_alone(tmp_path):
    before = {p: p.stat().st_mtime_ns for p in EXAMPLE.rglob("*")}
    result = cli("model", "fit", str(EXAMPLE))  # from tmp_path (conftest)
    assert result.exit_code == 0, result.output
    assert {p: p.stat().st_mtime_ns for p in EXAMPLE.rglob("*")} == before
    assert (tmp_path / "plots" / EXAMPLE.name / "model.json").exists()


def test_fit_refuses_in_one_line_when_the_fitted_rows_lack_a_measured_layouts_link(tmp_path):
    """Two-node rows of small sizes only: --fit-min-size 1M leaves no inter link to predict them."""
    data = synthetic(TRUE, noise=0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data[(data["world_size"] == 2) | (data["size_bytes"] < 1 << 20)].to_csv(run_dir / "results.csv",
                                                                          index=False)
    result = cli("model", "fit", str(run_dir), "--fit-min-size", "1M", "--no-plot")
    assert result.exit_code == 2, result.output
    assert result.output == (
        "allreduce-bench: error: the fitted rows cannot predict every measured row (no inter-node "
        "link parameters for native at world size 4 (2 ranks per node)); fit rows of every node "
        "layout you compare: check --fit-min-size and --tag\n")
    with pytest.raises(MissingLink, match="; give --inter-bw or fit results that span more than one node$"):
        allreduce_time("ring", 1 << 20, 4, 2, Links(TRUE.intra, None))


def test_crossovers_with_zero_byte_rows():
    data = synthetic(TRUE, noise=0)
    zero = data[data["size_bytes"] == 4096].assign(size_bytes=0)
    data = pd.concat([data, zero], ignore_index=True)
    model = fit(data)
    cross = crossovers(model, compare(data, model))  # was an OverflowError: log2(hi / 0)
    assert (cross["size_bytes"] > 0).all()


# every published log through model fit (and import, plot, report, compare): test_interop.py
