"""One run read from another tool's output, before it becomes rows of the project's schema."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class ImportedRun:
    """One table (or JSON document): `rows` its measurements, `meta` what it says of the run."""

    source_tool: str
    collective: str | None
    rows: list[dict]
    meta: dict
    first_line: int
    last_line: int
    world_size: int | None = None
    why: str = ""  # how the collective and world size were told (when no line names them)
    algorithm: str = "native"  # the tool's own collective, unless the file names another
    samples: pd.DataFrame | None = field(default=None, repr=False)  # per-iteration times
    notes: list[str] = field(default_factory=list)  # what the reader found (interleaved runs, ...)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, why) of result-like
    # lines it could not import: every such line is imported or listed here, never dropped


def nccl_version_of_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch' (x10000 + x100 from 2.9 on, x1000 + x100 before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
