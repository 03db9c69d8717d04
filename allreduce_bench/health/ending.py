"""The check's last step: every rank confirms over the store that it is still there, so a host cut off
after its last measurement is not left `ok` (doc/health.md). Not in a local run."""
from __future__ import annotations

import time

from allreduce_bench.core.measure.context import Run
from allreduce_bench.core.measure.progress import HEARTBEAT_S, Board, Liveness
from allreduce_bench.health.coordination import POLL_S

REQUEST = "confirm"
SILENT_S = 5 * HEARTBEAT_S  # heartbeats missed before a rank is not confirming (a cut stops them)
HELD = "health: confirming"  # the writer's board and hosts, in Run.kept from the rounds' end to finish_health


def answer(board: Board) -> None:
    """Every rank but the writer, once the rounds ended: confirm when the writer asks."""
    while not board.has(REQUEST):
        time.sleep(POLL_S)
    board.put(f"confirmed/{board.rank}", 1)


def hold(run: Run, board: Board, ranks_of: dict[str, list[int]]) -> None:
    """The writer, once the rounds ended: its board (and heartbeat) stays open for `confirmed`."""
    run.kept[HELD] = (board, ranks_of)


def release(run: Run) -> None:
    """The writer with no health.json to confirm: the waiting ranks may leave."""
    if HELD in run.kept:
        board, _ = run.kept.pop(HELD)
        board.put(REQUEST, 1)
        board.close()


def confirmed(run: Run, doc: dict) -> dict:
    """The writer, last: `doc` with the hosts that did not confirm named unreachable (the writer's own
    host when those outnumber the rest); `doc` itself when all did, or nothing was held."""
    if HELD not in run.kept:
        return doc
    board, ranks_of = run.kept.pop(HELD)
    named = {h["host"] for h in doc["hosts"] if h["verdict"] in ("unreachable", "dead")}
    asked = [h for h in ranks_of if h not in named]
    try:
        board.put(REQUEST, 1)
        silent = _silent(board, {r for h in asked for r in ranks_of[h] if r != board.rank}, run.launch.timeout_s)
    finally:
        board.close()
    quiet = [h for h in asked if set(ranks_of[h]) & silent]
    if not quiet:
        return doc
    writer = next(h for h, ranks in ranks_of.items() if board.rank in ranks)
    if writer not in quiet and len(quiet) > len(asked) - len(quiet):  # the writer's side is the smaller
        why = {writer: f"cut off after its last measurement: {len(quiet)} of the {len(asked) - 1} other "
                       "host(s) did not confirm to its writer at the end of the check"}
    else:
        why = {h: "did not confirm at the end of the check, after its last measurement (silent for "
                  f"{SILENT_S:g} s): its link cut, or frozen or dead since" for h in quiet}
    return _named(doc, why)


def _silent(board: Board, waiting: set[int], timeout_s: float) -> set[int]:
    """The ranks that had not confirmed once all those left stopped beating, or at `timeout_s`."""
    liveness, started = Liveness(board, SILENT_S), time.monotonic()
    while waiting := {r for r in waiting if not board.has(f"confirmed/{r}")}:
        if time.monotonic() - started > timeout_s or all([liveness.silent(r) for r in sorted(waiting)]):
            break  # (a list: every rank's heartbeat read, each from its first reading)
        time.sleep(POLL_S)
    return waiting


def _named(doc: dict, why: dict[str, str]) -> dict:
    from allreduce_bench.health.outputs import finish_document

    hosts = [{**h, "verdict": "unreachable", "why": why[h["host"]]} if h["host"] in why else h
             for h in doc["hosts"]]
    rails = [{**r, "verdict": "unreachable", "why": "host unreachable"} if r["host"] in why else r
             for r in doc.get("rails", [])]
    return finish_document({**doc, "hosts": hosts, "rails": rails})
