"""Figures and report numbers from results alone: synthetic frames, and one real --quick run."""
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import synthetic_runs
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core import metrics
from allreduce_bench.core.analysis import plots, report, style
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.schema import COLUMNS

REPO = Path(__file__).resolve().parents[2]
K, M = 1 << 10, 1 << 20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def model_frame(tag="", run_id="run-a", world_sizes=(2, 4, 8)):
    """Rows shaped like a real sweep, times from a simple alpha-beta model (not measurements)."""
    rows = []
    alpha_us = {"native": 20, "ring": 60, "naive": 30, "hierarchical": 80}
    for world_size in world_sizes:
        for algorithm, alpha in alpha_us.items():
            # bytes the busiest rank sends per byte of tensor, over a 10 GB/s link
            volume = (world_size - 1) if algorithm == "naive" else metrics.busbw_factor(world_size)
            for size in [4 * K * 4 ** i for i in range(8)]:  # 4K .. 64M
                time_us = alpha * (world_size - 1) + size * volume / 10e9 * 1e6
                rows.append(dict(run_id=run_id, tag=tag, benchmark="allreduce",
                                 algorithm=algorithm, backend="gloo", device="cpu",
                                 world_size=world_size, nodes=max(1, world_size // 2),
                                 ranks_per_node=min(2, world_size), size_bytes=size,
                                 time_us_median=time_us, time_us_p95=time_us * 1.2,
                                 busbw_GBps=metrics.busbw_GBps(size, time_us, world_size),
                                 wrong=0, timestamp="2026-11-29T10:00:00+00:00"))
    return pd.DataFrame(rows)


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_size_axis_labels_binary_sizes():
    fig, ax = plt.subplots()
    style.size_axis(ax)
    formatter = ax.xaxis.get_major_formatter()
    assert [formatter(s, 0) for s in (K, M, 1 << 30)] == ["1K", "1M", "1G"]
    plt.close(fig)


def test_figures_from_a_synthetic_frame_carry_titles_units_legends_and_footnote():
    figures = plots.figures(model_frame(), note="backend gloo, device cpu, hosts vm, today")
    assert set(figures) == {"bandwidth", "latency", "scaling", "speedup"}  # no link rows
    for name, fig in figures.items():
        assert fig._suptitle.get_text(), name
        assert any("backend gloo" in t.get_text() for t in fig.texts), name
        for ax in visible_axes(fig):
            assert ax.get_legend() is not None, name
            assert ax.get_ylabel() and ax.get_xlabel(), name

    bandwidth = visible_axes(figures["bandwidth"])
    assert [ax.get_title() for ax in bandwidth] == [
        "N = 2 (1 node(s) x 2 ranks)", "N = 4 (2 node(s) x 2 ranks)", "N = 8 (4 node(s) x 2 ranks)"]
    for ax in bandwidth:
        assert ax.get_xlabel() == style.SIZE_LABEL and ax.get_ylabel() == "busbw (GB/s)"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "native", "ring", "naive", "hierarchical"]

    latency = visible_axes(figures["latency"])
    assert all(ax.get_yscale() == "log" and ax.collections for ax in latency)  # p95 bands
    assert latency[0].get_ylabel() == "time per AllReduce (us)"

    left, right = visible_axes(figures["scaling"])
    assert left.get_xlabel() == right.get_xlabel() == "world size N (ranks)"
    assert left.get_ylabel() == "scaling efficiency busbw(N) / busbw(N_min)"
    assert right.get_ylabel() == "time(N) / time(N_min)"
    assert "64M" in figures["scaling"]._suptitle.get_text()  # default: the largest size
    ideal = [line for line in left.get_lines() if line.get_label() == "ideal (flat busbw)"]
    assert list(ideal[0].get_ydata()) == [1.0, 1.0]

    speedup = visible_axes(figures["speedup"])
    labels = [t.get_text() for t in speedup[0].get_legend().get_texts()]
    assert labels == ["ring", "naive", "hierarchical"]  # native is the reference
    for fig in figures.values():
        plt.close(fig)


@pytest.mark.slow
def test_draw_all_writes_valid_images(tmp_path):
    frame = model_frame()
    written = plots.draw_all(frame, tmp_path / "png")
    assert sorted(written) == ["bandwidth", "latency", "scaling", "speedup"]
    for path in written.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert plt.imread(path).ndim == 3
        assert path.stat().st_size < 200_000  # KBs, fit to commit
    svg = plots.draw_all(frame, tmp_path / "svg", fmt="svg")["bandwidth"]
    assert svg.suffix == ".svg" and "<svg" in svg.read_text()[:1000]


def test_two_tags_merged_get_two_line_styles_and_tagged_labels():
    frame = pd.concat([model_frame("nvlink", "r1"), model_frame("ib", "r2")], ignore_index=True)
    fig = plots.bandwidth_figure(frame)
    ax = visible_axes(fig)[0]
    assert {line.get_linestyle() for line in ax.get_lines()} == {"-", "--"}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ring [ib]" in labels and "ring [nvlink]" in labels
    # one algorithm's two runs: two shades, not one colour
    colour = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colour["ring [ib]"] != colour["ring [nvlink]"]
    assert len(set(colour.values())) == len(colour)
    plt.close(fig)


def test_runs_sharing_a_tag_are_told_apart_by_run_id():
    frame = pd.concat([model_frame("x", "aaaaaaaa11"), model_frame("x", "bbbbbbbb22")])
    assert set(report.label_runs(frame)["series"]) == {"x (aaaaaaaa)", "x (bbbbbbbb)"}
    assert set(report.label_runs(model_frame("x"))["series"]) == {"x"}


def hand_frame():
    """Few explicit points whose report numbers are worked out by hand in the test below."""
    points = {  # (algorithm, world_size): busbw at 1K, 1M, 4M; times at 1K, 1M, 4M
        ("native", 2): ([0.5, 5, 10], [10, 200, 400]),
        ("native", 4): ([0.4, 4, 9], [20, 300, 600]),
        ("ring", 2): ([0.2, 9, 8], [30, 180, 500]),
        ("ring", 4): ([0.1, 3, 8], [60, 350, 520]),
        ("naive", 2): ([0.3, 2, 4], [15, 500, 1000]),
        ("naive", 4): ([0.1, 1, 1.5], [40, 1500, 2500]),
        ("hierarchical", 4): ([0.1, 3, 12], [70, 330, 300]),
    }
    return pd.DataFrame([dict(algorithm=a, world_size=n, size_bytes=s, busbw_GBps=b,
                              time_us_median=t, time_us_p95=t, benchmark="allreduce")
                         for (a, n), (busbws, times) in points.items()
                         for s, b, t in zip([K, M, 4 * M], busbws, times)])


def test_report_numbers_equal_hand_computed_ones():
    frame = hand_frame()
    peaks = report.peak_busbw(frame)
    assert peaks.loc[("", "ring", 2)].tolist() == [9, M]  # the peak need not be at the largest
    assert peaks.loc[("", "native", 4)].tolist() == [9, 4 * M]
    assert peaks.loc[("", "hierarchical", 4), "peak_busbw_GBps"] == 12

    half = report.half_peak_size(frame)
    assert half[("", "native", 2)] == M  # 5 >= 10/2: reaching half counts
    assert half[("", "native", 4)] == 4 * M  # 4 < 9/2
    assert half[("", "naive", 4)] == M  # 1 >= 1.5/2

    ring_native = report.ratio_at_largest(frame, "ring", "native")
    assert ring_native.loc[("", 2), "busbw_ratio"] == pytest.approx(8 / 10)
    assert ring_native.loc[("", 4), "busbw_ratio"] == pytest.approx(8 / 9)
    assert (ring_native["size_bytes"] == 4 * M).all()
    hier_ring = report.ratio_at_largest(frame, "hierarchical", "ring")
    assert list(hier_ring.index) == [("", 4)]  # no hierarchical at N=2
    assert hier_ring.loc[("", 4), "busbw_ratio"] == pytest.approx(12 / 8)

    penalty = report.naive_penalty(frame)
    assert penalty.loc[("", 4)].tolist() == [2, 4 * M, pytest.approx(2500 / 1000), 3.0]

    scaling = report.scaling_efficiency(frame, 4 * M)
    assert scaling.loc[("", "native", 4), "efficiency"] == pytest.approx(0.9)
    assert scaling.loc[("", "native", 4), "time_ratio"] == pytest.approx(1.5)
    assert scaling.loc[("", "naive", 4), "efficiency"] == pytest.approx(1.5 / 4)
    assert scaling.loc[("", "ring", 2), "efficiency"] == 1.0
    assert scaling.loc[("", "hierarchical", 4), "reference_world_size"] == 4
    assert report.scaling_efficiency(frame, M).loc[("", "ring", 4), "efficiency"] == \
        pytest.approx(3 / 9)

    assert report.chosen_size(frame) == 4 * M
    assert report.chosen_size(frame, "1M") == M


def test_links_figure_and_ratio_from_link_rows(tmp_path):
    """links lends the report its table and plots/ its figure (links/hooks.py); the core's
    own tables and figures know no link."""
    from allreduce_bench.links import summary
    from allreduce_bench.links.hooks import report_sections
    SECTION, = report_sections()

    frame = model_frame(world_sizes=(4,))
    intra = frame[frame["algorithm"] == "native"].assign(link="intra")
    inter = intra.assign(link="inter", busbw_GBps=intra["busbw_GBps"] / 12.5)
    frame = pd.concat([frame, intra, inter], ignore_index=True)
    ratios = summary.link_ratio(frame)
    assert ratios["intra_inter_ratio"].tolist() == [pytest.approx(12.5)]
    assert ratios["size_bytes"].tolist() == [64 * M]
    fig = summary.links_figure(frame)
    ax = visible_axes(fig)[0]
    assert ax.get_ylabel() == "busbw (GB/s)" and ax.get_xlabel() == style.SIZE_LABEL
    assert any("12.5x at 64M" in t.get_text() for t in ax.texts)
    assert {line.get_linestyle() for line in ax.get_lines()} == {"-", "--"}
    plt.close(fig)
    assert "links" not in plots.draw_all(frame, tmp_path / "core")
    assert "links" in plots.draw_all(frame, tmp_path / "lent", sections=(SECTION,))
    title = "Intra- vs inter-node links"
    assert title not in [t for t, _, _ in report.report_tables(frame, 64 * M)]
    assert title in [t for t, _, _ in report.report_tables(frame, 64 * M, (SECTION,))]


def one_line_error(args):
    result = CliRunner().invoke(main, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("allreduce-bench: error:"), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_bad_results_give_one_line_and_exit_2(tmp_path):
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert "missing columns" in one_line_error(["plot", str(tmp_path / "other.csv")])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.csv").write_text(",".join(COLUMNS) + "\n")
    assert "no rows" in one_line_error(["report", str(tmp_path / "empty")])
    assert "no results at" in one_line_error(["plot", str(tmp_path / "nowhere")])
    model_frame().to_csv(tmp_path / "model.csv", index=False)
    assert "was not measured" in one_line_error(["report", str(tmp_path / "model.csv"),
                                                 "--size", "3M"])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One real run: the figures and report.md `run` leaves behind."""
    out = tmp_path_factory.mktemp("quick") / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--quick",
                           "--world-sizes", "2,4", "--algos", "native,ring,naive", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_leaves_figures_and_report(quick_run):
    plots_dir = quick_run / "plots"
    for name in ("bandwidth", "latency", "scaling", "speedup", "ranks"):
        assert (plots_dir / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert f"![{name}]({name}.png)" in (plots_dir / "report.md").read_text()
    text = (plots_dir / "report.md").read_text()
    assert "## Peak bus bandwidth" in text and "## Naive baseline: rank-0 penalty" in text
    assert "## Ranks: who starts last" in text

    frame = load_results(quick_run)
    fig = plots.bandwidth_figure(frame, report.footnote(frame))
    assert [ax.get_ylabel() for ax in visible_axes(fig)] == ["busbw (GB/s)"] * 2
    note = " ".join(t.get_text() for t in fig.texts)
    assert "backend gloo" in note and "hosts" in note
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_plot_and_report_commands_merge_tagged_runs(quick_run, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    rows = pd.read_csv(quick_run / "results.csv")
    rows.assign(tag="second", run_id="another").to_csv(other / "results.csv", index=False)
    result = CliRunner().invoke(main, ["plot", str(quick_run), str(other / "results.csv"),
                                       "--format", "svg", "--out-dir", str(tmp_path / "figs"),
                                       "--size", "4K"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "bandwidth.svg", "latency.svg", "ranks.svg", "scaling.svg", "speedup.svg"]  # ranks: samples kept

    before = {p: p.stat().st_mtime_ns for p in quick_run.rglob("*")}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, ["report", str(quick_run), str(other)])
    assert result.exit_code == 0, result.output
    assert "Peak bus bandwidth" in result.output and "second" in result.output
    # default: plots/<first run>+<more runs> here, never into the runs read
    text = (cwd / "plots" / "run+1" / "report.md").read_text()
    assert "| second |" in text
    assert {p: p.stat().st_mtime_ns for p in quick_run.rglob("*")} == before


def test_terminal_summary_from_a_synthetic_frame():
    from allreduce_bench.core.analysis.report import terminal_summary
    text = terminal_summary(model_frame())
    assert "Peak busbw (GB/s) per algorithm and world size:" in text
    assert "ring vs native (busbw ratio at the largest size both measured" in text
    assert "#wrong in total: 0" in text


def test_world_size_1_has_no_peak_of_0_and_says_what_it_measured():
    """One rank moves nothing: busbw is 0 by definition, so N=1 is neither a column of the
    peaks nor an "Is this normal?" line (issue 54: "peak 0 GB/s" for every algorithm), and the
    summary says what it measured."""
    from allreduce_bench.core.analysis.report import terminal_summary
    from allreduce_bench.expect.verdict import verdicts

    one = model_frame(world_sizes=(1,)).query("algorithm == 'native'").assign(time_us_median=80.0, busbw_GBps=0.0)
    text = terminal_summary(one)
    assert "Peak busbw" not in text and "World size 1 (not in the peaks: busbw is 0 by definition" in text
    assert "measures the backend's own call with no peer, per call over the sizes: native 80-80 us" in text
    assert verdicts(one) == []
    both = terminal_summary(pd.concat([one, model_frame(world_sizes=(2,))]))
    assert "Peak busbw" in both and "World size 1" in both
    assert [v["world_size"] for v in verdicts(pd.concat([one, model_frame(world_sizes=(2,))]))] == [2]


def test_report_names_the_rule_that_flagged_each_unstable_row():
    """The table's text states the rule, and each row says which part of it caught the row: its
    median's interval, its rounds, or (a run from before the rule) its samples' spread."""
    frame = model_frame(world_sizes=(2,)).head(3).assign(
        unstable=True, time_cv=[0.08, 0.30, 0.05], round_spread=[0.40, 0.02, 0.01])
    median = frame["time_us_median"].to_numpy()
    frame = frame.assign(time_us_ci_low=median, time_us_ci_high=median * [1.0, 1.5, 1.0])
    [(title, text, table)] = report._unstable_table(frame, 4 * K)
    assert title == "Unstable measurements" and "cannot be trusted to +-10%" in text
    assert list(table["why"]) == ["rounds", "interval", "samples' spread (an older run)"]


def test_a_long_footnote_is_wrapped_to_the_figure_not_cut():
    line = "emulated-2x2 (411e91cd): backend gloo, device AMD EPYC, hosts node0, node1, 2026-12-01 21:34:06 UTC"
    fig = plots.finish_figure(plt.figure(figsize=(5, 4)), f"{line}\n{line}")
    [note] = [t.get_text() for t in fig.texts]
    assert len(note.splitlines()) == 4 and max(map(len, note.splitlines())) <= 85
EXAMPLES = sorted(p.parent for p in (REPO / "results").glob("example-*/results.csv"))


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_a_committed_example_is_what_report_makes_of_it_and_report_leaves_it_alone(example, tmp_path):
    """scripts/regenerate_figures.sh keeps each example's report.md current (its model.json
    included), and `report` on it with the default output writes nothing into it."""
    before = {p: p.read_bytes() for p in example.rglob("*") if p.is_file()}
    result = CliRunner().invoke(main, ["report", str(example)])  # from tmp_path (conftest)
    assert result.exit_code == 0, result.output
    elsewhere = tmp_path / "plots" / example.name / "report.md"
    assert {p: p.read_bytes() for p in example.rglob("*") if p.is_file()} == before
    if (example / "model.json").exists():  # found in the run read, its figure linked there
        text = elsewhere.read_text()
        link = text.split("![fastest algorithm](", 1)[1].split(")", 1)[0]
        assert "## Which algorithm wins where" in text and (elsewhere.parent / link).exists()
    copy = shutil.copytree(example, tmp_path / "copy")  # redrawn where the script redraws it
    result = CliRunner().invoke(main, ["report", str(copy), "--out-dir", str(copy / "plots"), "--force"])
    assert result.exit_code == 0, result.output
    made = (copy / "plots" / "report.md").read_text()
    assert made == (example / "plots" / "report.md").read_text(), "run scripts/regenerate_figures.sh"


def test_a_merged_runs_series_keep_their_own_style_when_its_links_rows_have_another_run_id():
    # the README's merged plot: the emulated example's AllReduce rows are one run, its links
    # rows another; the local run's lines and the emulated run's took one colour and style
    frame = load_results([REPO / "results" / "example-cpu-gloo", REPO / "results" / "example-emulated-2x2"])
    fig = plots.bandwidth_figure(frame)
    # the local example is N=2 (a 2-core machine), the emulated one N=4: a series keeps one
    # style across the panels, so the labels are gathered from all of them
    style = {line.get_label(): (line.get_color(), line.get_linestyle())
             for ax in visible_axes(fig) for line in ax.get_lines()}
    assert style["native"] != style["native [emulated-2x2]"]
    assert style["native [emulated-2x2]"][1] == "--"
    plt.close(fig)


def empty_runs(folder):
    """What an interrupted run (meta.json alone) and a refused `emulate` (nothing) leave behind."""
    interrupted, refused = folder / "20261207T153319Z", folder / "20261207T160000Z-emulated-2x2"
    interrupted.mkdir(parents=True)
    (interrupted / "meta.json").write_text('{"run_id": "20261207T153319Z"}')
    refused.mkdir()
    return interrupted, refused


def test_report_over_the_readmes_two_examples_and_an_interrupted_run_is_written_whole(tmp_path):
    examples = [REPO / "results" / "example-cpu-gloo", REPO / "results" / "example-emulated-2x2"]
    interrupted, refused = empty_runs(tmp_path / "runs")
    result = CliRunner().invoke(main, ["report", *map(str, examples), str(interrupted), str(refused),
                                       "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output[-2000:]
    assert f"note: skipped {interrupted}: meta.json alone" in result.output
    assert f"note: skipped {refused}: an empty folder" in result.output
    text = (tmp_path / "out" / "report.md").read_text()
    assert (tmp_path / "out" / "report.html").exists() and "## Which algorithm wins where" in text
    # the local example's model has no inter-node link for the emulated 2 x 2: left out, said once
    assert text.count("Left out: no inter-node link parameters for native at world size 4") == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_report_over_a_folder_of_runs_with_empty_ones_among_them(tmp_path):
    runs = shutil.copytree(REPO / "results", tmp_path / "results")
    empty_runs(runs)
    result = CliRunner().invoke(main, ["report", str(runs), "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.count("note: skipped") == 2
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "report.html").exists()


@pytest.mark.parametrize("command", [["plot"], ["model", "fit"], ["export", "--out", "json"]])
def test_every_reader_skips_a_run_without_rows_with_a_line(command, tmp_path):
    interrupted, _ = empty_runs(tmp_path / "runs")
    result = CliRunner().invoke(main, [*command, str(REPO / "results" / "example-cpu-gloo"), str(interrupted)])
    assert result.exit_code == 0, result.output[-2000:]
    assert result.output.count(f"note: skipped {interrupted}: meta.json alone") == 1
    alone = CliRunner().invoke(main, [*command, str(interrupted)])  # nothing else: one line, exit 2
    assert alone.exit_code == 2 and "no rows to read" in alone.output, alone.output


def test_a_folder_of_many_runs_draws_without_a_matplotlib_warning(tmp_path):
    frame = pd.concat([model_frame(tag=f"a-rather-long-tag-name-number-{i}", run_id=f"run{i}", world_sizes=(2,))
                       for i in range(8)], ignore_index=True)  # legends too tall for tight_layout
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.draw_all(frame, tmp_path)
    assert [str(w.message) for w in caught] == []


def test_report_writes_over_an_earlier_report_only_with_force(tmp_path):
    run = synthetic_runs.write_run(tmp_path / "run", synthetic_runs.rows(synthetic_runs.default_states()))
    plots_dir = run / "plots"
    assert CliRunner().invoke(main, ["report", str(run), "--out-dir", str(plots_dir)]).exit_code == 0
    made = (plots_dir / "report.md").read_text()
    (plots_dir / "notes.txt").write_text("mine")
    (plots_dir / "scaling.png").write_bytes(PNG_MAGIC)  # a figure of an earlier report, not this one's
    (plots_dir / "report.md").write_text((plots_dir / "report.md").read_text() + "![scaling](scaling.png)\n")
    before = {p.name: p.stat().st_mtime_ns for p in plots_dir.iterdir()}
    assert "is not empty" in one_line_error(["report", str(run), "--out-dir", str(plots_dir)])
    assert {p.name: p.stat().st_mtime_ns for p in plots_dir.iterdir()} == before
    result = CliRunner().invoke(main, ["report", str(run), "--out-dir", str(plots_dir), "--force"])
    assert result.exit_code == 0, result.output
    assert not (plots_dir / "scaling.png").exists() and (plots_dir / "notes.txt").read_text() == "mine"
    assert (plots_dir / "report.md").read_text() == made
