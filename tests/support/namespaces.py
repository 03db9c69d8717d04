"""Whether this process may build the emulated cluster's network namespaces (root, iproute2):
the tests of emulate, health and links that need them skip with the reason elsewhere."""
from __future__ import annotations

import os
import subprocess

import pytest

from allreduce_bench.core.errors import UsageError
from allreduce_bench.emulate import cluster as em


def _namespaces_permitted() -> str | None:
    """None if this process can make network namespaces, else why not."""
    try:
        em.check_can_emulate()
    except UsageError as error:
        return str(error)
    name = f"{em.PREFIX}{os.getpid()}-0-h0"
    done = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None if done.returncode == 0 else f"ip netns add failed: {done.stderr.strip()}"


WHY_NOT = _namespaces_permitted()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None,
                                      reason=f"network namespaces not permitted here: {WHY_NOT}")
