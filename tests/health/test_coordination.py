"""measure/coordination.py: members meet on the board before a group is made, and a gloo group
is created with a short timeout (gloo retries a connect to a frozen member five times) but runs
its collectives with the whole one. Behaviour only: the deadlines below are far from any time
a slow machine takes."""
from __future__ import annotations

import pytest

from allreduce_bench.health.coordination import Absent, assemble


class Board:
    def __init__(self, keys=()):
        self.keys = set(keys)

    def put(self, key, value):
        self.keys.add(key)

    def has(self, key):
        return key in self.keys


class Liveness:
    def __init__(self, silent=()):
        self.silent_ranks = set(silent)

    def silent(self, rank):
        return rank in self.silent_ranks


def test_members_all_here_meet_at_once():
    board = Board({"here/7/1", "here/7/2"})
    assemble(board, Liveness(), 7, (0, 1, 2), 0, deadline_s=60)
    assert "here/7/0" in board.keys  # this member said it came


def test_a_member_that_stopped_beating_is_absent_not_waited_for():
    with pytest.raises(Absent, match=r"\[2\] stopped beating before group slot 3"):
        assemble(Board({"here/3/1"}), Liveness(silent={2}), 3, (0, 1, 2), 0, deadline_s=60)


def test_a_live_member_that_never_comes_is_absent_at_the_deadline():
    with pytest.raises(Absent, match=r"\[1\] did not come to group slot 0 in 0.3 s"):
        assemble(Board(), Liveness(), 0, (0, 1), 0, deadline_s=0.3)


@pytest.mark.slow
def test_a_gloo_group_is_made_quickly_but_waits_the_whole_timeout_for_a_late_member():
    from distributed import run_world
    from rank_functions import late_member_of_a_group

    # made with 2 s (a fifth of 10, at least 2); rank 1 comes 3 s late and is still waited for
    results = run_world(2, late_member_of_a_group, 10.0, 3.0)
    assert results == [(2.0, 2.0), (2.0, 2.0)]
