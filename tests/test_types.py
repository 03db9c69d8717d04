"""Type-checked where it cannot run: mypy over the whole package with setup.cfg's [mypy]
settings (`follow_imports = normal`), so the GPU path no CI machine runs (device and timers, the
NCCL algorithms, the Flight Recorder's switch, the DDP trainer's CUDA branch) is checked with
everything it calls (doc/testing.md)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_finds_nothing():
    # from the checkout: setup.cfg's `files` are relative to it; its cache makes a rerun quick
    found = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=590)
    assert found.returncode == 0, found.stdout + found.stderr
