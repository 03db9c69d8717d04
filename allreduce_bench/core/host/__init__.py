"""This host as the ranks and checks see it: GPUs, cgroup and processes, each read in one module. No torch."""
from __future__ import annotations

from pathlib import Path


def read_stripped(path: Path) -> str | None:
    """A /proc or /sys file's text, stripped; None where it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
