"""`--flight-recorder`: PyTorch's Flight Recorder on every rank, dumped to OUT/flight-recorder.

Before the process group exists each rank sets TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE
before torch 2.9), which torch before 2.11 needs to record at all (its default was 0): torch
records every collective (group, sequence number, op, sizes, dtypes, state, Python stack) in a
ring buffer of that many entries, gloo's as well as NCCL's.
With NCCL the watchdog also dumps on a timeout (TORCH_NCCL_DUMP_ON_TIMEOUT, TORCH_FR_DUMP_TEMP_FILE).
Every rank dumps its buffer itself when a collective fails or times out and at its end, as
torch names the files (`rank<R>`, the prefix torch's own analyzer `torchfrtrace` reads);
`allreduce-bench hang OUT/flight-recorder` (hang/verdict.py) names the rank that hung and
the collective. A frozen or dead rank leaves no dump: that absence is the finding.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from allreduce_bench.core.config.launch import LaunchConfig
from allreduce_bench.core.environment import user_setting
from allreduce_bench.core.measure.context import Run

DUMP_DIR = "flight-recorder"
ENTRIES = 2000  # per rank: a few KB each in memory, torch's usual advice
PREFIX = "rank"
# rank 0 under a launcher waits this long without a new dump: the survivors of one failure dump
# within milliseconds of each other, and the launcher stops rank 0 once another rank has left
# (each lingers faults.MIN_LINGER_S)
WAIT_S = 0.5


def folder(launch: LaunchConfig) -> Path:
    """OUT/flight-recorder where OUT is here (a local run, rank 0, a shared file system), else
    a scratch folder on this host (said in the rank's failure line)."""
    out = Path(launch.out_dir)
    if out.is_dir():
        return out / DUMP_DIR
    return Path(tempfile.gettempdir()) / f"allreduce-bench-{DUMP_DIR}-{os.getuid()}"


def buffer_variable(version: str | None = None) -> str:
    """The buffer's variable this torch reads: TORCH_FR_BUFFER_SIZE from 2.9 (its older name
    TORCH_NCCL_TRACE_BUFFER_SIZE then still works but warns on every rank), the older before."""
    if version is None:
        import torch
        version = torch.__version__
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return "TORCH_FR_BUFFER_SIZE"
    return "TORCH_FR_BUFFER_SIZE" if (major, minor) >= (2, 9) else "TORCH_NCCL_TRACE_BUFFER_SIZE"


def recording_environment(where: Path, backend: str) -> dict[str, str]:
    """The variables torch reads when a process group is created."""
    size = user_setting("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE") or str(ENTRIES)
    variables = {buffer_variable(): size}
    if backend == "nccl":  # the watchdog's own dump on a timeout, where our ranks cannot run
        prefix = str(where.resolve() / PREFIX)
        variables.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", TORCH_FR_DUMP_TEMP_FILE=prefix,
                         TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix)
    return variables


def enable(launch: LaunchConfig) -> None:
    """Before this rank's process group is created, with --flight-recorder."""
    if not launch.flight_recorder:
        return
    where = folder(launch)
    where.mkdir(parents=True, exist_ok=True)
    os.environ.update(recording_environment(where, launch.backend))


def described(ranks) -> dict:
    """new_group's `group_desc` naming the group's members ('ranks 0,3'): torch records it in
    each of the group's Flight Recorder entries, where `hang` reads who belongs (gloo's dumps
    list no group's members). {} for a torch whose new_group has no group_desc."""
    import inspect

    import torch.distributed as dist

    if "group_desc" not in inspect.signature(dist.new_group).parameters:
        return {}
    return {"group_desc": members_desc(ranks)}


def members_desc(ranks) -> str:
    """A group's description naming its members ('ranks 0,3'), given to torch's new_group as
    group_desc: torch records it in every Flight Recorder entry of the group, and gloo's
    pg_config lists no members (hang/verdict.py reads it back)."""
    return "ranks " + ",".join(str(r) for r in sorted(ranks))


def _dump_api():
    """torch's dump call: `_dump_fr_trace`, else the older NCCL-only `_dump_nccl_trace`; None
    where this torch has neither."""
    from torch._C import _distributed_c10d as c10d

    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        if hasattr(c10d, name):
            return getattr(c10d, name)
    return None


def dump(launch: LaunchConfig, rank: int) -> Path | None:
    """This rank's Flight Recorder buffer to OUT/flight-recorder/rank<R> (written whole, then
    renamed: a reader never sees half a dump). None without --flight-recorder; a torch without
    the dump call, or a write that fails, is one line on stderr, never an error."""
    if not launch.flight_recorder:
        return None
    call = _dump_api()
    if call is None:
        import torch
        _say(f"allreduce-bench: rank {rank}: --flight-recorder: torch {torch.__version__} has no "
             "Flight Recorder dump call (_dump_fr_trace, or the older _dump_nccl_trace): nothing dumped")
        return None
    try:
        data = call(True, True, False)  # collectives, stack traces, every entry (not only active)
        where = folder(launch)
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{PREFIX}{rank}"
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        os.replace(scratch, path)
        return path
    except (OSError, RuntimeError, TypeError) as error:
        _say(f"allreduce-bench: rank {rank}: --flight-recorder: no dump ({error})")
        return None


def wait_for_dumps(where: Path, world_size: int, wait_s: float) -> int:
    """The number of dumps in `where` once every rank's is there or `wait_s` passed without a
    new one (the survivors of a failure dump within moments of each other)."""
    seen, last_change = -1, time.monotonic()
    while True:
        count = sum(1 for r in range(world_size) if (where / f"{PREFIX}{r}").exists())
        if count != seen:
            seen, last_change = count, time.monotonic()
        if count >= world_size or time.monotonic() - last_change >= wait_s:
            return count
        time.sleep(0.1)


def after_failure(run: Run, rank: int, world_size: int, local: bool) -> str:
    """On a rank whose collective failed or timed out: dump; under a launcher, rank 0 then
    waits WAIT_S for the other survivors' dumps and adds the hooks' verdict on them to its line
    (a local run's driver reads the dumps itself, once every rank has ended)."""
    path = dump(run.launch, rank)
    if path is None or local or rank != 0:
        return f"; flight recorder dump {path}" if path is not None and not local else ""
    wait_for_dumps(path.parent, world_size, wait_s=WAIT_S)
    line = run.hooks.call.dump_verdict(folder=path.parent, world_size=world_size)
    return f"; {line}" if line else ""


def stopped_line(run: Run) -> str | None:
    """A stopped local run's last line: who hung, on what, from the dumps (None without
    --flight-recorder, or a verdict)."""
    if not run.launch.flight_recorder:
        return None
    line = run.hooks.call.dump_verdict(folder=folder(run.launch), world_size=max(run.launch.world_sizes))
    return f"allreduce-bench: {line}" if line else None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
