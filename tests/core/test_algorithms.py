"""Every algorithm against the exact expected sum, on real gloo worlds over loopback."""
import pytest
from distributed import run_world
from rank_functions import check_every_world_size, measure_counts_wrong, repeated_calls_stay_exact, sub_worlds

# world size -> node layouts (ranks per node) to check the hierarchical scheme (and all) under
LAYOUTS = {1: [1], 2: [2, 1], 3: [3, 1], 4: [2, 4, 1], 5: [5], 6: [2, 3], 7: [7, 1], 8: [2, 4]}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_exact_sum_every_algorithm_dtype_and_count_at_every_world_size_up_to_8():
    # one world of 8 ranks; each world size is the sub-world of its first ranks
    failures = run_world(8, check_every_world_size, LAYOUTS, timeout=380)
    assert [f for rank in failures for f in rank] == []


ZOO = ["ring", "naive", "hierarchical", "native", "recursive-doubling", "halving-doubling", "tree",
       "direct"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_built_call_can_be_repeated():
    assert run_world(4, repeated_calls_stay_exact, ZOO, 1001) == [dict.fromkeys(ZOO, 0)] * 4


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_segmented_steps_of_large_uneven_chunks():
    # 12M+ bytes: chunks of ~3M are cut into ~1M segments, unevenly (the tree: 12 chunks of ~1M)
    names = ["ring", "hierarchical", "halving-doubling", "tree", "direct"]
    assert run_world(4, repeated_calls_stay_exact, names, (3 << 20) + 7, timeout=170) == \
        [dict.fromkeys(names, 0)] * 4


@pytest.mark.timeout(120)
def test_measure_reports_wrong_results():
    good, bad, iters = run_world(2, measure_counts_wrong, 101)[0]
    assert good == 0
    assert bad > 0  # the broken algorithm's mismatches, summed over ranks
    assert iters == 3


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sub_worlds_are_the_first_ranks_in_whole_nodes():
    seen = run_world(4, sub_worlds, [2, 4])
    assert seen[0] == [(2, 1, 2), (4, 2, 2)]
    assert seen[1] == [(2, 1, 2), (4, 2, 2)]
    assert seen[2] == [None, (4, 2, 2)]
