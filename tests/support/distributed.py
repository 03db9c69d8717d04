"""Run a function on every rank of a real gloo world on loopback, failing fast on a hang."""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import traceback
from datetime import timedelta

RANK_TIMEOUT_S = 30.0  # every collective's, the default group's and the sub-worlds' (make_world)


def _rank(rank: int, world_size: int, store_file: str, fn, args, queue) -> None:
    import torch.distributed as dist
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))
    try:
        dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=RANK_TIMEOUT_S))
        result = fn(*args)
        # torch < 2.8 frees a group holding the GIL, which deadlocks while a gloo worker still drops
        # a tensor of the last collective (pytorch#154976): let the workers finish first
        time.sleep(0.1)
        dist.destroy_process_group()
        queue.put((rank, "ok", result))
    except BaseException:  # report everything, including assertion errors, to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_world(world_size: int, fn, *args, timeout: float = 90.0) -> list:
    """fn(*args) on ranks 0..world_size-1; returns their results in rank order.

    fn must be importable by name (a module-level function). Any rank failing, or the world not
    finishing within `timeout` seconds, raises AssertionError with the ranks' tracebacks.
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank, args=(r, world_size, store, fn, args, queue), daemon=True)
                 for r in range(world_size)]
        for p in procs:
            p.start()
        results, errors = {}, []
        try:
            for _ in range(world_size):
                try:
                    rank, status, value = queue.get(timeout=timeout)
                except Exception:
                    raise AssertionError(f"world of {world_size} did not finish within {timeout}s; "
                                         f"finished: {sorted(results)}") from None
                if status == "ok":
                    results[rank] = value
                else:
                    errors.append(f"rank {rank}:\n{value}")
                    break
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
        if errors:
            raise AssertionError("\n".join(errors))
        return [results[r] for r in range(world_size)]
