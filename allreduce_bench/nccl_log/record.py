"""`--nccl-debug`'s files read into meta.json's `nccl` block once every rank has ended (the ranks
only collect them: core/measure/nccl_debug.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from allreduce_bench.core.measure.nccl_debug import DEBUG_DIR
from allreduce_bench.core.results.store import read_meta, write_meta
from allreduce_bench.core.text import wrapped
from allreduce_bench.nccl_log import parse as nccl_log


def record(out_dir: Path | str) -> dict | None:
    """Read OUT/nccl-debug into meta.json's `nccl` (and a note when NCCL wrote nothing)."""
    files = nccl_log.debug_files(Path(out_dir) / DEBUG_DIR)
    block = nccl_log.read_files(files) if files else None
    if block is None or not nccl_log.said_anything(block):
        print(wrapped(f"allreduce-bench: --nccl-debug: NCCL wrote no debug lines in {Path(out_dir) / DEBUG_DIR} "
                      "(a gloo run uses no NCCL)"), file=sys.stderr)
        return None
    meta = read_meta(out_dir)
    meta["nccl"] = block
    write_meta(out_dir, meta)
    return block
