"""`--flight-recorder`: PyTorch's Flight Recorder on every rank, dumped to OUT/flight-recorder/rank<R> on a
failure and at the end, for `allreduce-bench hang`; a frozen or dead rank leaves no dump (doc/hang.md)."""
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
# rank 0 under a launcher waits this long without a new dump (survivors dump within ms)
WAIT_S = 0.5


def folder(launch: LaunchConfig) -> Path:
    """OUT/flight-recorder where OUT is here, else a scratch folder on this host."""
    out = Path(launch.out_dir)
    if out.is_dir():
        return out / DUMP_DIR
    return Path(tempfile.gettempdir()) / f"allreduce-bench-{DUMP_DIR}-{os.getuid()}"


def buffer_variable(version: str | None = None) -> str:
    """The buffer's variable this torch reads: TORCH_FR_BUFFER_SIZE from 2.9, the older name before."""
    if version is None:
        import torch
        version = torch.__version__
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return "TORCH_FR_BUFFER_SIZE"
    return "TORCH_FR_BUFFER_SIZE" if (major, minor) >= (2, 9) else "TORCH_NCCL_TRACE_BUFFER_SIZE"


def recording_environment(where: Path, backend: str) -> dict[str, str]:
    size = user_setting("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE") or str(ENTRIES)
    variables = {buffer_variable(): size}
    if backend == "nccl":  # the watchdog's own dump on a timeout, where our ranks cannot run
        prefix = str(where.resolve() / PREFIX)
        variables.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", TORCH_FR_DUMP_TEMP_FILE=prefix,
                         TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix)
    return variables


def enable(launch: LaunchConfig) -> None:
    if not launch.flight_recorder:
        return
    where = folder(launch)
    where.mkdir(parents=True, exist_ok=True)
    os.environ.update(recording_environment(where, launch.backend))


def described(ranks) -> dict:
    """new_group's `group_desc` naming the members (gloo's dumps list none); {} for a torch without it."""
    import inspect

    import torch.distributed as dist

    if "group_desc" not in inspect.signature(dist.new_group).parameters:
        return {}
    return {"group_desc": members_desc(ranks)}


def members_desc(ranks) -> str:
    """A group's description naming its members ('ranks 0,3'); hang/verdict.py reads it back."""
    return "ranks " + ",".join(str(r) for r in sorted(ranks))


def _dump_api():
    """torch's dump call (`_dump_fr_trace`, else the older NCCL-only `_dump_nccl_trace`), or None."""
    from torch._C import _distributed_c10d as c10d

    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        if hasattr(c10d, name):
            return getattr(c10d, name)
    return None


def dump(launch: LaunchConfig, rank: int) -> Path | None:
    """This rank's buffer to OUT/flight-recorder/rank<R>, written whole; a failure is one line, never an error."""
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
    """The number of dumps in `where` once every rank's is there or `wait_s` passed without a new one."""
    seen, last_change = -1, time.monotonic()
    while True:
        count = sum(1 for r in range(world_size) if (where / f"{PREFIX}{r}").exists())
        if count != seen:
            seen, last_change = count, time.monotonic()
        if count >= world_size or time.monotonic() - last_change >= wait_s:
            return count
        time.sleep(0.1)


def after_failure(run: Run, rank: int, world_size: int, local: bool) -> str:
    """Dump; under a launcher rank 0 waits for the survivors' dumps and adds the hooks' verdict."""
    path = dump(run.launch, rank)
    if path is None or local or rank != 0:
        return f"; flight recorder dump {path}" if path is not None and not local else ""
    wait_for_dumps(path.parent, world_size, wait_s=WAIT_S)
    line = run.hooks.call.dump_verdict(folder=path.parent, world_size=world_size)
    return f"; {line}" if line else ""


def stopped_line(run: Run) -> str | None:
    """A stopped local run's last line: who hung, on what (None without --flight-recorder, or a verdict)."""
    if not run.launch.flight_recorder:
        return None
    line = run.hooks.call.dump_verdict(folder=folder(run.launch), world_size=max(run.launch.world_sizes))
    return f"allreduce-bench: {line}" if line else None


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
