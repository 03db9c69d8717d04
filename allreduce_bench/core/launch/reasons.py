"""Why a rank stopped, in one line (out of memory, disk full, a bad environment, a bug): a local rank leaves
it for its driver, a rank under a launcher prints it."""
from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from allreduce_bench.core.environment import RankEnv, launcher_env
from allreduce_bench.core.errors import UsageError, is_out_of_memory
from allreduce_bench.core.measure.context import LocalRun

FAILED_EXIT = 1
T = TypeVar("T")


def reason(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    if is_out_of_memory(error):
        return (f"out of memory ({first}); choose a smaller --max-bytes/--params or fewer ranks")
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        if error.filename is None:
            return ("no space left writing output (standard output to a full device such as "
                    "/dev/full, or a full disk)")
        if error.filename:
            return f"disk full writing {error.filename} ({error.strerror})"
        return f"disk full: {first}"
    if isinstance(error, OSError):
        return f"{first}" + (f" ({error.filename})" if error.filename and
                             str(error.filename) not in first else "")
    if isinstance(error, (UsageError, UnicodeError)):
        return first
    return f"{type(error).__name__}: {first} (a bug; please report it with the command line)"


def _die_with_driver(local: LocalRun | None) -> None:
    """A local rank dies with its driver, even one interrupted while starting ranks."""
    if local is None:
        return
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG = 1, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != local.driver_pid:
        os._exit(130)


def guarded(local: LocalRun | None, entry: Callable[[Any, RankEnv | None, LocalRun | None], T],
            run: Any, env: RankEnv | None = None) -> T:
    """Run one rank's `entry(run, env, local)`; an exception ends it with one line."""
    _die_with_driver(local)
    try:
        returned = entry(run, env, local)
        _leave_mark(local, f"returned-{os.getpid()}", "")
        return returned
    except Exception as error:  # noqa: BLE001  (the whole point: nothing escapes as a traceback)
        env = launcher_env()
        rank = env.rank if env else 0
        line = reason(error)
        if not (is_out_of_memory(error) or isinstance(error, (OSError, UsageError))):
            line += f"; traceback in {_save_traceback(rank)}"
        if not _leave_mark(local, f"rank-{rank}", line):
            _write_stderr(f"allreduce-bench: rank {rank}: {line}")
        os._exit(FAILED_EXIT)


def _leave_mark(local: LocalRun | None, name: str, text: str) -> bool:
    """A file for the local driver (`rank-R`: why; `returned-PID`); False where none can be left."""
    if local is None:
        return False
    try:
        (Path(local.reasons) / name).write_text(text)
    except OSError:
        return False
    return True


def _save_traceback(rank: int) -> str:
    import tempfile
    path = Path(tempfile.gettempdir()) / f"allreduce-bench-rank{rank}-{os.getpid()}.txt"
    try:
        path.write_text(traceback.format_exc())
    except OSError:
        return "(not saved: the temporary directory is not writable)"
    return str(path)


def _write_stderr(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def first_reason(reason_dir: str | Path) -> tuple[int, str] | None:
    """(rank, line) of the lowest rank that left a reason, or None."""
    found = []
    for path in Path(reason_dir).glob("rank-*"):
        try:
            found.append((int(path.name.split("-")[1]), path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def flush_or_exit() -> None:
    """stdout to /dev/full or a closed pipe: one line instead of Python's 'Exception ignored'."""
    try:
        sys.stdout.flush()
    except OSError as error:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (so the exit flush is quiet)
        except OSError:
            pass
        _write_stderr(f"allreduce-bench: error: cannot write to standard output "
                      f"({error.strerror}); results are in the output directory")
        os._exit(1)
