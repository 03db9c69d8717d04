"""health/ending.py: at the end of the check every rank confirms it is still there; a host that
does not is `unreachable`, and when most do not, the writer's own host is the one cut off. A
fake board here; the link cut on the emulated cluster: test_fault_matrix.py's writing cases."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from allreduce_bench.health import ending

HOSTS = {f"node{i}": [i] for i in range(4)}


class Board:
    """The writer's board (rank 0): `confirmed` ranks answered, `beating` ranks' heartbeats move."""

    def __init__(self, confirmed=(), beating=()):
        self.rank, self.keys, self.beating, self.ticks, self.closed = 0, set(), set(beating), 0, False
        self.keys |= {f"confirmed/{r}" for r in confirmed}

    def put(self, key, value):
        self.keys.add(key)

    def has(self, key):
        return key in self.keys

    def beats(self, rank):
        self.ticks += 1
        return self.ticks if rank in self.beating else 0

    def close(self):
        self.closed = True


def _doc(named=()):
    return {"hosts": [{"host": h, "verdict": "unreachable" if h in named else "ok", "why": "fine"} for h in HOSTS],
            "rails": [], "pairs": [], "complete": True, "exit_code": 3 if named else 0}


@pytest.fixture(autouse=True)
def _short_silence(monkeypatch):
    monkeypatch.setattr(ending, "SILENT_S", 0.2)


def _run(timeout_s=30.0):
    return SimpleNamespace(kept={}, launch=SimpleNamespace(timeout_s=timeout_s))


def _confirmed(board, doc, timeout_s=30.0):
    run = _run(timeout_s)
    ending.hold(run, board, HOSTS)
    return ending.confirmed(run, doc)


def test_a_host_that_does_not_confirm_at_the_end_is_unreachable():
    # node1's link cut after its last measurement: before, every host `ok`, exit 0
    board = Board(confirmed={2, 3})
    doc = _confirmed(board, _doc())
    assert {h["host"]: h["verdict"] for h in doc["hosts"]} == {
        "node0": "ok", "node1": "unreachable", "node2": "ok", "node3": "ok"}
    assert doc["exit_code"] == 3 and doc["exclude"] == "node1" and "did not confirm" in doc["hosts"][1]["why"]
    assert board.has(ending.REQUEST) and board.closed


def test_when_most_hosts_do_not_confirm_the_writers_host_is_the_one_cut_off():
    doc = _confirmed(Board(), _doc())
    assert [h["host"] for h in doc["hosts"] if h["verdict"] != "ok"] == ["node0"]
    assert "3 of the 3 other host(s) did not confirm" in doc["hosts"][0]["why"]


def test_a_live_host_is_waited_for_and_hosts_named_before_are_not_asked():
    board = Board(confirmed={1, 2}, beating={3})  # node3 beats but is slow to confirm: the timeout
    assert _confirmed(board, _doc(), timeout_s=0.5)["hosts"][3]["verdict"] == "unreachable"
    doc = _doc(named={"node3"})
    assert _confirmed(Board(confirmed={1, 2}), doc) is doc  # node3 already named: not waited for
    assert ending.confirmed(_run(), doc) is doc  # nothing held: a local run's driver
    board, run = Board(), _run()
    ending.hold(run, board, HOSTS)
    ending.release(run)  # no verdict to confirm: the ranks waiting are let go at once
    assert board.has(ending.REQUEST) and board.closed
