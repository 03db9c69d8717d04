"""One run per directory: its writer holds a flock on <dir>/.lock, which the kernel drops however
it exits, so a stale lock never blocks a resume; a finished run removes the file."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from allreduce_bench.core.errors import UsageError

LOCK_FILE = ".lock"


class DirectoryLock:
    """`with DirectoryLock(dir):` the directory is this process's until the block ends."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise UsageError(f"{self.path.parent} is in use by pid {holder} (another run writes "
                                 "there); wait for it to finish or choose another --out") from None
            if self._still_at_path(fd):
                break
            os.close(fd)  # its holder removed it as it finished, after we opened it: again
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def _still_at_path(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.path)  # while still held: a later locker of the old inode sees it gone
            except FileNotFoundError:
                pass
            os.close(self._fd)  # the kernel drops the lock
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *_exc) -> None:
        self.release()
