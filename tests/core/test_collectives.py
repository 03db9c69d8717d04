"""Collectives beside AllReduce: nccl-tests' byte counts and busbw factors, hand-counted costs,
the per-collective registry, exact results of every (collective, algorithm) on sub-worlds of one
real world, and `run --collectives` end to end (their published logs: tests/interop/; their
model: tests/model/; `links --collective`: tests/links/)."""
from __future__ import annotations

import pytest
from collective_ranks import OTHERS, exact_at_counts, exact_every_world_size, measured_wrong, pipelined_ring_exact
from distributed import run_world
from hypothesis import given, settings
from hypothesis import strategies as st

from allreduce_bench.core import algorithms, metrics
from allreduce_bench.core.algorithms.base import INTER, INTRA
from allreduce_bench.core.errors import UsageError

S = 1 << 20


# ---- nccl-tests' definitions ---------------------------------------------------------------

def nccl_tests_bytes(collective, size_bytes, elt, n):
    """src/<coll>.cu GetCollByteCount, then GetBw's byte count, written out as the C does it."""
    count = size_bytes // elt
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // n) & ~(16 // elt - 1)
        return base, base * elt * n
    return count, count * elt


@pytest.mark.parametrize("collective", metrics.COLLECTIVES)
def test_counts_and_sizes_are_nccl_tests(collective):
    for size in (0, 4, 32, 100, 4096, 1000003, 1 << 24):
        for elt in (1, 2, 4, 8):
            for n in (1, 2, 3, 7, 8):
                assert metrics.collective_counts(collective, size, elt, n) == \
                    nccl_tests_bytes(collective, size, elt, n)


def test_busbw_factors_are_the_ones_of_performance_md():
    for n in (1, 2, 3, 8, 64):
        assert metrics.busbw_factor(n, "all_reduce") == 2 * (n - 1) / n
        for c in ("reduce_scatter", "all_gather", "alltoall"):
            assert metrics.busbw_factor(n, c) == (n - 1) / n
        for c in ("broadcast", "reduce", "sendrecv"):
            assert metrics.busbw_factor(n, c) == 1.0
    assert metrics.busbw_GBps(8e9, 1e6, 8, "all_gather") == pytest.approx(8 * 7 / 8)


# ---- costs, counted by hand ----------------------------------------------------------------

def totals(collective, name, n, per_node, s=S):
    """(latency steps, bytes on the busiest intra link, bytes through the busiest uplink, reduced)."""
    steps = algorithms.lookup(name, collective).cost(float(s), n, per_node)
    return (sum(st.repeat for st in steps),
            sum(st.repeat * st.paths.get(INTRA, (0, 0))[1] for st in steps),
            sum(st.repeat * st.paths.get(INTER, (0, 0))[1] for st in steps),
            sum(st.repeat * st.reduced for st in steps))


def test_ring_allreduce_costs_its_reducescatter_plus_its_allgather():
    for n, per_node in ((2, 2), (4, 4), (8, 2), (6, 3)):
        rs = algorithms.lookup("ring", "reduce_scatter").cost(S, n, per_node)
        ag = algorithms.lookup("ring", "all_gather").cost(S, n, per_node)
        assert algorithms.lookup("ring").cost(S, n, per_node) == rs + ag
    assert totals("reduce_scatter", "ring", 4, 4) == (3, 3 * S / 4, 0, 3 * S / 4)
    assert totals("all_gather", "ring", 8, 4) == (7, 7 * S / 8, 7 * S / 8, 0)


def test_direct_and_recursive_gather_and_scatter_by_hand():
    # direct, 2 nodes x 2: one step, 1 intra peer (S/4), 2 ranks x 2 peers across -> S/4 x 4 = S
    assert totals("all_gather", "direct", 4, 2) == (1, S / 4, S, 0)
    assert totals("reduce_scatter", "direct", 4, 4) == (1, 3 * S / 4, 0, 3 * S / 4)
    # recursive halving N=8: halves of 4, 2, 1 chunks of S/8 sent; kept halves added
    assert totals("reduce_scatter", "recursive-halving", 8, 8) == (3, 7 * S / 8, 0, 7 * S / 8)
    # recursive doubling N=8: windows of 1, 2, 4 chunks sent
    assert totals("all_gather", "recursive-doubling", 8, 8) == (3, 7 * S / 8, 0, 0)
    # N=6 (p=4, 2 pairs folded): fold-in S/6; doubling windows: virtual 0 and 1 hold 2 chunks,
    # so the busiest rank sends 2 then 4 chunks of S/6; fold-out the whole S
    assert totals("all_gather", "recursive-doubling", 6, 6) == (4, S / 6 + 2 * S / 6 + 4 * S / 6 + S, 0, 0)
    # N=6 halving: fold-in S (added), give 4 then 2 chunks of S/6, keep 2 then 2... fold-out S/6
    assert totals("reduce_scatter", "recursive-halving", 6, 6) == (4, S + 4 * S / 6 + 2 * S / 6 + S / 6, 0,
                                                                   S + 4 * S / 6 + 2 * S / 6)


def test_alltoall_broadcast_reduce_sendrecv_by_hand():
    # pairwise: N-1 steps of S/N per rank; 2 nodes x 2: step 1 and 3 cross the nodes (ranks 1->2, 3->0)
    assert totals("alltoall", "pairwise", 4, 4) == (3, 3 * S / 4, 0, 0)
    assert totals("alltoall", "pairwise", 4, 2)[2] == S / 4 + 2 * S / 4 + S / 4
    assert totals("alltoall", "direct", 4, 4) == (1, 3 * S / 4, 0, 0)
    # binomial over 5 ranks: 3 rounds of S
    assert totals("broadcast", "binomial", 5, 5) == (3, 3 * S, 0, 0)
    assert totals("reduce", "binomial", 5, 5) == (3, 3 * S, 0, 3 * S)
    # chain of 4 over 1 MiB: one chunk, 1 + 4 - 2 = 3 ticks; 4 MiB: 4 chunks, 6 ticks of S/4
    assert totals("broadcast", "chain", 4, 4) == (3, 3 * S, 0, 0)
    assert totals("reduce", "chain", 4, 4, s=4 * S) == (6, 6 * S, 0, 6 * S)
    # scatter + ring AllGather, N=4: root sends 3 x S/4 at once, then 3 steps of S/4
    assert totals("broadcast", "scatter-allgather", 4, 4) == (4, 3 * S / 4 + 3 * S / 4, 0, 0)
    assert totals("reduce", "reducescatter-gather", 4, 4) == (4, 3 * S / 4 + 3 * S / 4, 0, 3 * S / 4)
    assert totals("sendrecv", "native", 4, 2) == (1, S, S, 0)


def test_every_collective_cost_is_defined_for_odd_layouts():
    for collective in OTHERS:
        for name, algorithm in algorithms.BUILT_IN_BY_COLLECTIVE[collective].items():
            for n, per_node in ((1, 1), (3, 3), (6, 2), (7, 1), (12, 4)):
                steps = algorithm.cost(float(S), n, per_node)
                assert all(st.repeat >= 0 for st in steps), (collective, name)
                assert (n == 1) == (steps == []), (collective, name, n)


# ---- the registry per collective -----------------------------------------------------------

def test_registry_per_collective_and_refusals():
    assert algorithms.names_for("gloo", "alltoall") == ["native", "pairwise", "direct"]
    assert set(algorithms.names_for("gloo", "all_gather")) == {"native", "ring", "recursive-doubling", "direct"}
    with pytest.raises(UsageError, match="unknown algorithm 'ring' for alltoall .ring exists for all_reduce"):
        algorithms.parse("ring", "gloo", "alltoall")
    assert algorithms.parse_collectives("all") == metrics.COLLECTIVES
    assert algorithms.parse_collectives("all_gather, all_reduce") == ("all_gather", "all_reduce")
    with pytest.raises(UsageError, match="unknown collective unknown"):
        algorithms.parse_collectives("all_gather,unknown")


def test_gloo_reducescatter_says_it_is_an_allreduce():
    native = algorithms.lookup("native", "reduce_scatter")
    assert native.ran_as("gloo") == "all_reduce" and native.ran_as("nccl") == "reduce_scatter"
    assert algorithms.lookup("ring", "reduce_scatter").ran_as("gloo") == "reduce_scatter"


def test_a_plugin_declares_its_collective(monkeypatch):
    class Plugin:
        COLLECTIVE = "all_gather"
        DESCRIPTION = "a plug-in AllGather"

        @staticmethod
        def build(send, recv, world):
            return lambda: None

    class Point:
        name, value = "mine", "x:y"

        def load(self):
            return Plugin

    monkeypatch.delenv(algorithms.NO_PLUGINS_ENV, raising=False)
    monkeypatch.setattr(algorithms, "_entry_points", lambda: [Point()])
    algorithms._loaded.cache_clear()
    assert algorithms.lookup("mine", "all_gather").collective == "all_gather"
    assert "mine" not in algorithms.registry()
    algorithms._loaded.cache_clear()


# ---- exact results on real worlds ----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(900)
def test_exact_results_of_every_collective_and_algorithm_at_n_1_to_8():
    """One world of 8 ranks; the sub-world of its first k ranks for k = 1..8; counts 1, N-1,
    N+1, 97, 3001; float32, bfloat16, int32; in place and out of place where both exist."""
    failures = run_world(8, exact_every_world_size, list(range(1, 9)), timeout=800)
    assert [f for rank in failures for f in rank] == []


@pytest.mark.slow
@pytest.mark.timeout(300)
@settings(max_examples=2, deadline=None, derandomize=True)
@given(world_size=st.sampled_from([3, 5, 6]),
       counts=st.lists(st.integers(min_value=1, max_value=2000), min_size=2, max_size=4))
def test_exact_results_over_random_counts(world_size, counts):
    failures = run_world(world_size, exact_at_counts, world_size, counts, timeout=250)
    assert [f for rank in failures for f in rank] == []


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_measure_counts_wrong_like_nccl_tests():
    wrong = run_world(3, measured_wrong, 3, timeout=150)[0]
    assert wrong.pop("all_gather/broken") == 3 * (3 * 40)  # every rank misses all N parts
    assert wrong and set(wrong.values()) == {0}


# ---- the command line ----------------------------------------------------------------------

def cli(*args, timeout=300):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "allreduce_bench", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_decomposition_prefers_the_in_place_halves():
    import pandas as pd

    from allreduce_bench.core.analysis.collective_tables import decomposition, peak_table

    def row(benchmark, algorithm, time_us, size=16 << 20):
        return {"benchmark": benchmark, "algorithm": algorithm, "world_size": 2, "size_bytes": size,
                "time_us_median": time_us, "busbw_GBps": size / time_us / 2e3, "runs_as": None}

    out_of_place = [row("allreduce", "ring", 13553), row("reduce_scatter", "ring", 8221),
                    row("all_gather", "ring", 7578), row("allreduce", "native", 9000),
                    row("reduce_scatter", "native", 5000), row("all_gather", "native", 4000)]
    in_place = [row("reduce_scatter-in-place", "ring", 7198), row("all_gather-in-place", "ring", 6627),
                row("all_gather-in-place", "native", 3000)]  # native lacks an in-place RS
    table = decomposition(pd.DataFrame(out_of_place + in_place)).set_index("algorithm")
    ring, native = table.loc["ring"], table.loc["native"]
    assert ring["halves"] == "in place" and ring["sum_us"] == 7198 + 6627
    assert ring["ratio"] == pytest.approx(13553 / (7198 + 6627))
    assert ring["ratio_out_of_place"] == pytest.approx(13553 / (8221 + 7578))
    assert native["halves"] == "out of place" and native["ratio"] == pytest.approx(9000 / 9000)
    before = decomposition(pd.DataFrame(out_of_place)).set_index("algorithm")  # as before --in-place
    assert set(before["halves"]) == {"out of place"} and before.loc["ring", "sum_us"] == 8221 + 7578
    peaks = peak_table(pd.DataFrame(out_of_place + in_place))
    assert ("all_gather", "ring (in place)") in peaks.index and ("all_gather", "ring") in peaks.index
    assert ("all_reduce", "ring") not in peaks.index  # AllReduce has its own table


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (["--collectives", "unknown"], "unknown collective unknown"),
    (["--collectives", "all_gather,alltoall", "--algos", "ring"], "unknown algorithm 'ring' for alltoall"),
    (["--collectives", "all_reduce,alltoall", "--in-place"], "--in-place measures the in-place half"),
])
def test_bad_collectives_are_one_line_and_exit_2(args, says):
    result = cli("run", *args, "--quick", "--no-plot", timeout=60)
    assert result.returncode == 2 and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_collectives_writes_rows_report_and_figures_and_resumes(tmp_path):
    import pandas as pd

    out = tmp_path / "run"
    args = ["run", "--collectives", "all_reduce,all_gather,reduce_scatter,alltoall,broadcast,reduce,sendrecv",
            "--algos", "native", "--world-sizes", "2", "--sizes", "4K,64K", "--samples", "2", "--loops", "1",
            "--warmup", "0", "--in-place", "--rounds", "2", "--out", str(out)]
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    rows = pd.read_csv(out / "results.csv")
    assert list(dict.fromkeys(rows["collective"])) == list(metrics.COLLECTIVES)
    # every collective once, AllGather and ReduceScatter also in place (--in-place), all checked
    assert (rows["wrong"] == 0).all() and len(rows) == 2 * (7 + 2)
    assert (rows["rounds"] == 2).all() and (rows["samples"] == 2).all()  # every collective in rounds
    assert set(rows["benchmark"]) == {"allreduce", *metrics.COLLECTIVES, "all_gather-in-place",
                                      "reduce_scatter-in-place"} - {"all_reduce"}
    halves = rows[rows["benchmark"].str.endswith("-in-place")]
    assert sorted(set(halves["collective"])) == ["all_gather", "reduce_scatter"] and len(halves) == 4
    assert "all_gather-in-place/native: world size 2" in result.stderr + result.stdout
    rs = rows[rows["collective"] == "reduce_scatter"]
    assert set(rs["runs_as"]) == {"all_reduce"} and rows[rows["collective"] != "reduce_scatter"]["runs_as"].isna().all()
    ag = rows[rows["collective"] == "all_gather"].iloc[0]
    assert ag["count"] == 512 and ag["size_bytes"] == 4096  # one rank's part of the whole buffer
    assert ag["busbw_GBps"] == pytest.approx(ag["algbw_GBps"] / 2)
    assert "Peak busbw (GB/s) per collective" in result.stdout and "in disguise" in result.stdout
    report = (out / "plots" / "report.md").read_text()
    assert "## Other collectives" in report and "## Cost model per collective" in report
    assert "| all_gather | native (in place) |" in report
    assert (out / "plots" / "collectives_peak.png").exists() and (out / "plots" / "bandwidth_alltoall.png").exists()
    again = cli(*args[:-2], "--resume", str(out))
    assert again.returncode == 0, again.stderr
    assert len(pd.read_csv(out / "results.csv")) == len(rows)  # every row was done already




def test_the_pipelined_ring_receives_a_window_ahead_into_slice_buffers(monkeypatch):
    """At most `window` receives are posted at a time, across steps, and the ReduceScatter's
    land in `window` slice buffers: the AllReduce holds no chunk-sized scratch (it received a
    64M AllReduce's steps into a 32M one). The schedule only: sends and receives are fakes."""
    import torch
    import torch.distributed as dist

    from allreduce_bench.core.algorithms import ring
    from allreduce_bench.core.measure.world import CommGroup

    posted, most, storages = set(), [0], set()

    class Request:
        def wait(self):
            posted.discard(self)

    def irecv(view, peer, group=None):
        request = Request()
        posted.add(request)
        most[0] = max(most[0], len(posted))
        storages.add((view.untyped_storage().data_ptr(), view.untyped_storage().nbytes()))
        return request

    monkeypatch.setattr(dist, "irecv", irecv)
    monkeypatch.setattr(dist, "isend", lambda view, peer, group=None: Request())
    tensor = torch.zeros(1 << 16)  # 256 KiB: two chunks of 32 slices of 4 KiB
    ring.PipelinedRing(tensor, CommGroup(None, (0, 1), 0), slice_bytes=4096, window=4).all_reduce()
    assert most[0] == 4
    buffers = storages - {(tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())}
    assert len(buffers) == 4 and {size for _, size in buffers} == {4096}


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_pipelined_ring_is_exact_at_awkward_sizes_and_slices():
    # N + 1-4 + count elements: slices of one float32 (a bfloat16 slice of 2, as 4 // 2), of
    # 12 bytes (uneven last slices, some empty), and of 1 KiB over a few thousand elements
    cases = [(4, [-3, 1, 40]), (12, [-2, 93]), (1024, [3001])]
    failures = run_world(5, pipelined_ring_exact, [2, 3, 4, 5], cases, timeout=190)
    assert [f for rank in failures for f in rank] == []
