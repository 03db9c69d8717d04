"""Real Flight Recorder dumps of a gloo world where one rank hangs it, one fault at a time
(used by tests/hang/test_hang.py and scripts/perf_hang.py).

Every rank calls two AllReduces that agree, then the third is the fault's, on `culprit`:
  sleep    sleeps past the timeout, then calls it (late: the others gave up)
  skip     never calls it (dumps and waits)
  size     calls it with another size (an empty tensor: gloo aborts the receiving process on a
           non-empty mismatch, which then leaves no dump)
  no_dump  dies before it without a dump (a crashed or killed rank)
Every other rank's call fails (timeout or closed connection) and dumps; so does the culprit,
except for no_dump. The dumps are torch's own, as `_dump_fr_trace()` returns them (pickle) in
`<folder>/rank<R>`, and as `_dump_fr_trace_json()` returns them in `<folder>-json/rank<R>.json`.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from datetime import timedelta
from pathlib import Path

KINDS = ("sleep", "skip", "size", "no_dump")
SEQ = 3  # the fault's collective: the third AllReduce of the default group
COUNT = 256


def _rank(rank: int, world_size: int, store: str, kind: str, culprit: int, folder: str,
          timeout_s: float) -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "200"  # before the group exists: torch reads it then
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    # connecting a world of 8 on a loaded machine can take longer than the collectives' timeout
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=60))
    dist.distributed_c10d._get_default_group().set_timeout(timedelta(seconds=timeout_s))
    data = torch.ones(COUNT)
    for _ in range(SEQ - 1):
        dist.all_reduce(data)
    me = rank == culprit
    try:
        if me and kind == "no_dump":
            os._exit(9)  # dead before the collective: no dump
        if me and kind == "sleep":
            time.sleep(timeout_s * 1.5 + 0.5)
        if me and kind == "size":
            dist.all_reduce(torch.ones(0))
        elif not (me and kind == "skip"):
            dist.all_reduce(data)
    except RuntimeError:
        pass  # the hang's timeout, or a peer's closed connection: what --flight-recorder dumps on
    Path(folder, f"rank{rank}").write_bytes(c10d._dump_fr_trace(True, True, False))
    json_dump = c10d._dump_fr_trace_json(True, True)  # collectives, only active: no (all of them)
    Path(f"{folder}-json", f"rank{rank}.json").write_bytes(
        json_dump if isinstance(json_dump, bytes) else json_dump.encode())
    if me and kind in ("skip", "size"):
        time.sleep(timeout_s + 0.5)  # alive: the others time out rather than lose the connection
    os._exit(0)


def make_dumps(kind: str, world_size: int, culprit: int, folder: Path, timeout_s: float = 1.0,
               limit_s: float = 90.0) -> list[int | None]:
    """Run one world with fault `kind` on rank `culprit`; dumps land in `folder`. Returns the
    ranks' exit codes (a rank still running after `limit_s` is killed: None)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    Path(f"{folder}-json").mkdir(exist_ok=True)
    store = folder / ".store"
    store.unlink(missing_ok=True)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, world_size, str(store), kind, culprit, str(folder),
                                             timeout_s), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit_s
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    codes = []
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
            codes.append(None)
        else:
            codes.append(p.exitcode)
    store.unlink(missing_ok=True)
    return codes


EXPECTED_REASON = {"sleep": "never_entered", "skip": "never_entered", "size": "mismatch",
                   "no_dump": "no_dump"}


def named_correctly(verdict, kind: str, culprit: int) -> tuple[bool, bool]:
    """(the culprit rank and its collective named with the kind's reason, no other rank named)."""
    mine = [c for c in verdict.culprits if c.rank == culprit]
    right = bool(mine) and mine[0].collective == "all_reduce" and mine[0].seq == SEQ \
        and mine[0].reason == EXPECTED_REASON[kind]
    return right, all(c.rank == culprit for c in verdict.culprits)
