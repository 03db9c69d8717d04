"""The cost model of every built-in algorithm and collective: the reduction term, fits that
recover known links and name the winners, `model` without torch, and the refusal to pool
rows timed by different methods."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core import algorithms
from allreduce_bench.core.results.load import load_results
from allreduce_bench.model.cost import Link, Links, allreduce_time

S = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "results" / "example-cpu-gloo"


def test_gamma_term_adds_reduction_time():
    links = Links(Link(0.0, 1e9), None)
    no_gamma = allreduce_time("ring", 4 * S, 4, 4, links)
    with_gamma = allreduce_time("ring", 4 * S, 4, 4, Links(links.intra, None, reduce_Bps=1e9))
    assert with_gamma - no_gamma == pytest.approx(3 * S / 1e9)  # (N-1) S/N added, at 1 GB/s


def test_fit_of_every_builtin_recovers_its_links_and_names_the_winners():
    from test_model import TRUE, synthetic

    from allreduce_bench.model.cost import best_table, compare, crossovers, fit, median_abs_error

    names = [n for n in algorithms.names_for("gloo") if n != "native"]
    truth = Links(TRUE.intra, TRUE.inter, reduce_Bps=4e9)
    data = synthetic(truth, layouts=((2, 2), (4, 4), (4, 2), (8, 2)), noise=0.02, algorithms=names)
    model = fit(data)
    assert set(model.algorithms) == set(names)
    comparison = compare(data, model)
    assert (median_abs_error(comparison)["all"] < 5).all()
    best = best_table(comparison)
    assert (best["predicted_best_slower_pct"] <= 10).mean() >= 0.9
    cross = crossovers(model, comparison)
    assert len(cross) and set(cross.columns) == {"world_size", "size_bytes", "below", "above"}


BLOCK_TORCH = """
import sys
class Block:
    def find_spec(self, name, *args):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test: " + name)
sys.meta_path.insert(0, Block())
from allreduce_bench.cli import main
sys.argv = ["allreduce-bench"] + sys.argv[1:]
main()
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_model_fit_and_predict_all_run_without_torch(tmp_path):
    from test_model import TRUE, synthetic

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    names = algorithms.names_for("gloo")
    synthetic(TRUE, algorithms=names).to_csv(run_dir / "results.csv", index=False)
    script = tmp_path / "no_torch.py"
    script.write_text(BLOCK_TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

    def blocked(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                              env=env, timeout=100)

    fitted = blocked("model", "fit", str(run_dir), "--no-plot", "--out", str(run_dir))
    assert fitted.returncode == 0, fitted.stderr
    best = pd.read_csv(run_dir / "model_best.csv")
    assert list(best.columns[:4]) == ["world_size", "size_bytes", "measured", "predicted"]
    ranked = blocked("model", "predict", "--algo", "all", "--world-size", "512", "--ranks-per-node", "8",
                     "--size", "64K,1G", "--intra-bw", "900GB/s", "--inter-bw", "25GB/s",
                     "--intra-latency", "5us", "--inter-latency", "10us")
    assert ranked.returncode == 0, ranked.stderr
    assert "# ranking at 64K" in ranked.stdout and all(n in ranked.stdout for n in names)
    assert blocked("model", "predict", "--algo", "all", "--world-size", "8",
                   "--model", str(run_dir)).returncode == 0


def test_collective_model_recovers_links_and_names_the_best():
    import pandas as pd

    from allreduce_bench.model import collectives as collective_model
    from allreduce_bench.model.cost import critical_path

    alpha, bandwidth = 20e-6, 2e9
    rows = []
    for collective in ("all_gather", "reduce_scatter", "alltoall", "broadcast"):
        for name in algorithms.names_for("gloo", collective):
            for n in (2, 4, 8):
                for size in (1 << 12, 1 << 16, 1 << 20, 1 << 24):
                    runs_as = "all_reduce" if (collective, name) == ("reduce_scatter", "native") else ""
                    found = collective_model.steps(collective, name, runs_as or collective, size, n, n)
                    m_intra, b_intra, m_inter, b_inter, _ = critical_path(found)
                    messages, size_on_path = m_intra + m_inter, b_intra + b_inter
                    rows.append({"collective": collective, "algorithm": name, "world_size": n,
                                 "ranks_per_node": n, "size_bytes": size, "runs_as": runs_as,
                                 "time_us_median": (messages * alpha + size_on_path / bandwidth) * 1e6})
    frame = pd.DataFrame(rows)
    fits = collective_model.fit(frame)
    assert len(fits) == len(frame.groupby(["collective", "algorithm"]))
    assert fits["alpha_us"].to_numpy() == pytest.approx(20.0, rel=1e-3)
    assert fits["bandwidth_GBps"].to_numpy() == pytest.approx(2.0, rel=1e-3)
    comparison = collective_model.compare(frame, fits)
    assert comparison["error_pct"].abs().max() < 0.1
    table = collective_model.best(comparison)
    big = table[(table["collective"] == "broadcast") & (table["size_bytes"] == 1 << 24) & (table["world_size"] == 8)]
    # 16 MiB over 8 ranks: the chain moves 22/16 S, scatter + AllGather 14/8 S, the tree 3 S
    assert big["measured"].tolist() == ["chain"] == big["predicted"].tolist()
    small = table[(table["collective"] == "all_gather") & (table["size_bytes"] == 1 << 12) & (table["world_size"] == 8)]
    assert small["predicted"].iloc[0] in ("recursive-doubling", "direct")
    # gloo's ReduceScatter row is modelled as the AllReduce it ran: twice the ring's steps
    native_rs = collective_model.steps("reduce_scatter", "native", "all_reduce", S, 4, 4)
    assert sum(st.repeat for st in native_rs) == 6


def test_model_fit_refuses_to_pool_timing_methods(tmp_path):
    frame = load_results(EXAMPLE)
    other = frame.copy()
    frame["timing"] = "samples"
    other["timing"], other["run_id"] = "per-iteration", "other"
    both = pd.concat([frame, other]).drop(columns=["source"])
    both.to_csv(tmp_path / "results.csv", index=False)
    result = CliRunner().invoke(main, ["model", "fit", str(tmp_path), "--no-plot", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "timing methods per-iteration, samples" in result.output
    result = CliRunner().invoke(main, ["model", "fit", str(tmp_path), "--no-plot", "--pool",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
