"""The algorithm zoo: the registry, cost declarations against hand-counted steps, plug-ins,
NCCL variants' environment handling, and a property test of exact sums over random counts (the
model fitted to the zoo: tests/model/test_model_algorithms.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from distributed import run_world
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_functions import check_counts
from zoo_plugin import PLUGIN_MODULE

from allreduce_bench.core import algorithms
from allreduce_bench.core.algorithms import nccl
from allreduce_bench.core.algorithms.base import INTER, INTRA, traffic
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.measure.device import Device

S = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def cost(name, n, per_node, s=S):
    return algorithms.lookup(name).cost(float(s), n, per_node)


def totals(steps):
    """(latency steps, bytes on the busiest intra link, bytes through the busiest uplink, reduced)."""
    return (sum(st.repeat for st in steps),
            sum(st.repeat * st.paths.get(INTRA, (0, 0))[1] for st in steps),
            sum(st.repeat * st.paths.get(INTER, (0, 0))[1] for st in steps),
            sum(st.repeat * st.reduced for st in steps))


def test_recursive_doubling_steps_by_hand():
    # N=8 one node: 3 exchanges of the whole vector, each added
    assert totals(cost("recursive-doubling", 8, 8)) == (3, 3 * S, 0, 3 * S)
    # N=4 as 2x2: distance 1 inside the node, distance 2 across: both ranks of a node cross -> 2S
    assert totals(cost("recursive-doubling", 4, 2)) == (2, S, 2 * S, 2 * S)
    # N=6: 2 extra ranks fold in (S) and out (S) around log2(4) = 2 exchanges
    steps = cost("recursive-doubling", 6, 6)
    assert len(steps) == 4 and totals(steps) == (4, 4 * S, 0, 3 * S)


def test_halving_doubling_steps_by_hand():
    # N=8 one node: 3 halving steps of S/2, S/4, S/8 (added) and 3 doubling steps back
    assert totals(cost("halving-doubling", 8, 8)) == (6, 2 * 7 / 8 * S, 0, 7 / 8 * S)
    # N=5: fold in + 2 + 2 + fold out
    assert totals(cost("halving-doubling", 5, 5))[0] == 6


def test_direct_and_tree_steps_by_hand():
    # direct, 2 nodes x 2: per step 1 intra transfer of S/4; 2 ranks x 2 peers across -> S through the uplink
    steps = cost("direct", 4, 2)
    assert [st.paths for st in steps] == [{INTRA: (1.0, S / 4), INTER: (2.0, S)}] * 2
    assert steps[0].reduced == 3 * S / 4 and steps[1].reduced == 0
    # tree of 4 ranks (0 -> 1, 2; 1 -> 3), one chunk: height 2, depth 2 -> 1 + 2 + 2 - 1 = 4 ticks
    assert cost("tree", 4, 4, s=4096)[0].repeat == 4
    # 4 MiB -> 4 chunks of 1 MiB: 4 + 2 + 2 - 1 = 7 ticks
    (tick,) = cost("tree", 4, 4, s=4 * S)
    assert tick.repeat == 7 and tick.reduced == 2 * S


def test_traffic_counts_the_busiest_link_and_uplink():
    step = traffic([(0, 1, 10), (0, 2, 10), (1, 3, 10), (3, 0, 10)], ranks_per_node=2)
    assert step.paths[INTRA] == (1.0, 10.0)
    # rank 0 sends 1 message across and receives 1 (full duplex: 1); node 0 sends 20 B out
    assert step.paths[INTER] == (1.0, 20.0)


def test_every_builtin_cost_is_defined_for_odd_layouts():
    for name, algorithm in algorithms.BUILT_IN.items():
        if algorithm.cost is None:
            continue
        for n, per_node in ((1, 1), (3, 3), (6, 2), (7, 1), (12, 4)):
            steps = algorithm.cost(float(S), n, per_node)
            assert all(st.repeat >= 0 for st in steps), name
            assert (n == 1) == (steps == []), name


def test_registry_names_all_and_refusals():
    assert algorithms.parse("all", "gloo") == tuple(algorithms.names_for("gloo"))
    assert "native:ring" not in algorithms.parse("all", "gloo")
    assert "native:tree:LL" in algorithms.parse("all", "nccl")
    with pytest.raises(UsageError, match="unknown algorithm 'nope'"):
        algorithms.parse("ring,nope", "gloo")
    with pytest.raises(UsageError, match="does not apply to gloo"):
        algorithms.check_supported(["native:ring"], [2], 2, "gloo")
    algorithms.check_supported(["native:ring", "tree"], [2, 4], 2, "nccl")


@pytest.mark.slow
def test_unsupported_algorithms_are_refused_before_any_process_starts():
    result = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--algos", "native:nvls",
                             "--quick", "--no-plot"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("allreduce-bench: error:")]
    assert "native:nvls" in result.stderr and "gloo" in result.stderr


def test_nccl_variant_creates_its_communicator_with_the_variables_set(monkeypatch):
    import datetime as dt

    import torch.distributed as dist

    seen = []
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "new_group", lambda *a, **k: seen.append(
        ("new_group", os.environ.get("NCCL_ALGO"), os.environ.get("NCCL_PROTO"), k.get("backend"))) or "pg")
    monkeypatch.setattr(dist, "all_reduce", lambda t, group=None: seen.append(
        ("all_reduce", os.environ.get("NCCL_ALGO"), os.environ.get("NCCL_PROTO"), group)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda g: seen.append(("destroy", g)))
    pinned = nccl.create(["ring", "native:tree:LL"], 2, dt.timedelta(seconds=5))  # plain ring: no group
    world = SimpleNamespace(device=Device(), pinned=pinned)
    assert nccl.communicator(world, "tree", "LL") == "pg"
    assert nccl.communicator(world, "tree", "LL") == "pg"  # connected once
    assert seen == [("new_group", "Tree", "LL", "nccl"), ("all_reduce", "Tree", "LL", "pg")]
    assert os.environ["NCCL_PROTO"] == "Simple" and "NCCL_ALGO" not in os.environ  # restored
    pinned.close()  # at the end of its sub-world's phase
    nccl.create(["native:ring"], 2, dt.timedelta(seconds=5))
    assert seen[2] == ("destroy", "pg") and seen[3][1:3] == ("Ring", "Simple")


@pytest.mark.slow
@pytest.mark.timeout(200)
@settings(max_examples=2, deadline=None, derandomize=True)
@given(world_size=st.sampled_from([3, 5, 6]),
       counts=st.lists(st.integers(min_value=1, max_value=4000), min_size=3, max_size=6))
def test_exact_sums_over_random_counts(world_size, counts):
    failures = run_world(world_size, check_counts, algorithms.names_for("gloo"), counts, timeout=150)
    assert [f for rank in failures for f in rank] == []


# ---- a plug-in installed in a test environment -------------------------------------------------

@pytest.fixture()
def plugin_env(tmp_path):
    site = tmp_path / "site"
    (site / "zoo_plugin_pkg").mkdir(parents=True)
    (site / "zoo_plugin_pkg" / "__init__.py").write_text(PLUGIN_MODULE)
    info = site / "zoo_plugin_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoo-plugin-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[allreduce_bench.algorithms]\nsum-by-plugin = zoo_plugin_pkg\n")
    env = dict(os.environ)
    env.pop(algorithms.NO_PLUGINS_ENV, None)  # this test's plug-in is the point
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def cli(env, *args, timeout=240):
    return subprocess.run([sys.executable, "-m", "allreduce_bench", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_plugin_is_measured_reported_and_skipped_by_the_model(plugin_env, tmp_path):
    out = tmp_path / "run"
    result = cli(plugin_env, "run", "--algos", "sum-by-plugin,ring", "--world-sizes", "2",
                 "--sizes", "4K,64K", "--iters", "2", "--warmup", "0", "--out", str(out), "--no-plot")
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(out / "results.csv")
    assert set(rows["algorithm"]) == {"sum-by-plugin", "ring"} and (rows["wrong"] == 0).all()

    refused = cli(plugin_env, "run", "--algos", "sum-by-plugin", "--world-sizes", "3", "--quick")
    assert refused.returncode == 2 and "power-of-two world sizes only" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    fitted = cli(plugin_env, "model", "fit", str(out), "--min-size", "4K", "--out", str(out))
    assert fitted.returncode == 0, fitted.stderr
    assert "note: sum-by-plugin not fitted: declares no cost" in fitted.stdout
    assert (out / "model_best.csv").exists()

    report = cli(plugin_env, "report", str(out), "--out-dir", str(out / "plots"))
    assert report.returncode == 0, report.stderr
    text = (out / "plots" / "report.md").read_text()
    assert "sum-by-plugin" in text and "Which algorithm wins where" in text


def test_a_broken_or_clashing_plugin_is_left_out_with_a_reason(monkeypatch):
    class Point:
        def __init__(self, name, value, target):
            self.name, self.value, self._target = name, value, target

        def load(self):
            if isinstance(self._target, Exception):
                raise self._target
            return self._target

    good = algorithms.Algorithm("fine", "a plug-in given as an Algorithm", lambda t, w: (lambda: None))
    points = [Point("ring", "x:y", good), Point("broken", "needs.torch", ImportError("no torch")),
              Point("nobuild", "x:z", object()), Point("fine", "x:w", good)]
    monkeypatch.delenv(algorithms.NO_PLUGINS_ENV, raising=False)
    monkeypatch.setattr(algorithms, "_entry_points", lambda: points)
    algorithms._loaded.cache_clear()
    assert list(algorithms.plugins()) == ["fine"]
    assert algorithms.order()[-1] == "fine" and algorithms.lookup("fine").cost is None
    problems = "\n".join(algorithms.plugin_problems())
    algorithms._loaded.cache_clear()  # the next test's own plug-ins
    assert "ring = x:y: the name is taken" in problems and "ImportError: no torch" in problems
    assert "has no build" in problems
