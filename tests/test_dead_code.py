"""No dead code: vulture over the package and the scripts (which use some of the package's
functions) finds nothing at confidence 80 or more: unused imports, variables and arguments,
unreachable code. The tests are not scanned: a function only they call is dead, unless it is
an API (doc/testing.md#static-checks)."""
from __future__ import annotations

from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parents[1]
MIN_CONFIDENCE = 80


def dead_code(*paths: Path) -> list[str]:
    vulture = Vulture()
    vulture.scavenge([str(p) for p in paths])
    return [item.get_report().replace(str(ROOT) + "/", "")
            for item in vulture.get_unused_code(min_confidence=MIN_CONFIDENCE)]


def test_no_dead_code():
    dead = dead_code(ROOT / "allreduce_bench", ROOT / "scripts")
    assert not dead, "dead code (vulture):\n" + "\n".join(dead)


def test_planted_dead_code_is_found(tmp_path):
    (tmp_path / "module.py").write_text("import os\n\n\ndef f(x):\n    return x\n    x += 1\n")
    assert [line.split(": ", 1)[1] for line in dead_code(tmp_path)] == [
        "unused import 'os' (90% confidence)", "unreachable code after 'return' (100% confidence)"]
