"""Other people's published logs (nccl-tests' output, NCCL's debug log) that the import and
NCCL-log tests read: ../shared/data beside the checkout, never committed. Where it is missing
(a public clone) those tests skip, naming the folder they miss (doc/testing.md lists them)."""
from __future__ import annotations

from pathlib import Path

import pytest

# Beside the checkout; a clone made elsewhere on the project's machine finds it at /work/shared.
_BESIDE = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SHARED_DATA = _BESIDE if _BESIDE.is_dir() else Path("/work/shared/data")
PUBLISHED_LOGS = SHARED_DATA / "published-logs"
NCCL_INFO = SHARED_DATA / "nccl-info"


def needs(folder: Path) -> pytest.MarkDecorator:
    """Skip unless `folder` of ../shared/data is there; the reason names the missing folder."""
    return pytest.mark.skipif(not folder.is_dir(), reason=f"needs ../shared/data/{folder.name} "
                              f"({folder} is missing; it is not part of a public clone)")
