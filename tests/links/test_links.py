"""`links`: its rows inside and across nodes for AllReduce, p2p and any other collective, and
its one line when there is a single node."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from namespaces import WHY_NOT

CLI = [sys.executable, "-m", "allreduce_bench"]


def cli(*args, timeout=300):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_links_on_a_single_node_says_how_to_get_nodes():
    done = subprocess.run(CLI + ["links", "--quick"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "needs >= 2 nodes" in line and "emulate" in line and "--ranks-per-node" in line
    assert "\n" not in line


@pytest.mark.slow
@pytest.mark.skipif(WHY_NOT is None, reason="the emulated 2x2 test checks the same rows here")
@pytest.mark.timeout(120)
def test_links_rows_on_nodes_simulated_on_loopback(tmp_path):
    out = tmp_path / "links"
    done = subprocess.run(CLI + ["links", "--ranks-per-node", "2", "--sizes", "4K", "--iters", "1",
                                 "--warmup", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    frame = pd.read_csv(out / "results.csv")
    assert set(map(tuple, frame[["link", "operation"]].values)) == {
        ("intra", "allreduce"), ("inter", "allreduce"), ("intra", "p2p"), ("inter", "p2p")}
    assert (frame["wrong"] == 0).all() and (frame["nodes"] == 2).all()
    assert (out / "plots" / "links.png").exists() and "sizes 4096 B" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_links_measures_any_collective_inside_and_across_nodes(tmp_path):
    import pandas as pd

    out = tmp_path / "links"
    result = cli("links", "--collective", "all_gather", "--world-sizes", "4", "--ranks-per-node", "2",
                 "--sizes", "64K", "--samples", "2", "--loops", "1", "--warmup", "0", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(out / "results.csv")
    groups = rows[rows["operation"] == "all_gather"]
    assert sorted(groups["link"]) == ["inter", "intra"] and (rows["wrong"] == 0).all()
    assert set(groups["collective"]) == {"all_gather"} and set(groups["count"]) == {65536 // 4 // 2}
    assert groups["busbw_GBps"].to_numpy() == pytest.approx(groups["algbw_GBps"].to_numpy() / 2)
    refused = cli("links", "--collective", "all_gather,alltoall", "--world-sizes", "4", timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1


def test_links_table_header_stands_over_its_columns():
    # the link and op names, and each of the core's columns, end where the row's values end
    # (before: `#  link        op` on a line of its own and `size` 16 columns left of the sizes)
    import re

    from allreduce_bench.links.benchmark import LINKS_HEADER, links_line

    row = links_line(dict(link="intra", operation="allreduce", size_bytes=16777216, count=4194304,
                          dtype="float32", time_us_median=1.5, time_us_p95=2.5, time_us_p99=3.5,
                          time_us_rank_mean=1.5, time_cv=0.1, samples=5, loops=3, algbw_GBps=1.0,
                          busbw_GBps=1.0, wrong=0))
    names, units = LINKS_HEADER.splitlines()
    ends = [m.end() for m in re.finditer(r"\S+", row)]
    assert [m.end() for m in re.finditer(r"[^\s#]+", names)] == ends
    assert {m.end() for m in re.finditer(r"[^\s#]+(?: \S+)?", units)} <= set(ends)


def test_links_says_why_its_rows_are_unstable_as_run_does():
    """Each row's group is 2 ranks, but all 4 of the world's run on the 2 CPUs: run's first cause."""
    from allreduce_bench.links.summary import links_summary

    rows = pd.DataFrame([dict(benchmark="links", link=link, operation=op, size_bytes=1 << 20, world_size=2,
                              nodes=2, ranks_per_node=2, busbw_GBps=1.0, wrong=0, unstable=link == "intra",
                              time_us_median=100.0, time_us_ci_low=70.0, time_us_ci_high=130.0, tag="", run_id="r")
                         for link in ("intra", "inter") for op in ("allreduce", "p2p")])
    said = links_summary(rows, {"machine": {"cpus_allowed": 2}})
    assert ("unstable: 2 of 4 rows' medians cannot be trusted to +-10% (2 by their 90% interval, 0 by rounds "
            "that disagree: > 20% apart, p < 0.05): N=4 ran more ranks than the 2 CPUs allowed") in said
