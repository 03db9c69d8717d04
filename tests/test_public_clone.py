"""What a public clone lacks: ../shared/data (other people's published logs) is never committed.
The tests that read it go through tests/support/shared_data.py, skip naming the missing folder,
and doc/testing.md lists them."""
from __future__ import annotations

import re
from pathlib import Path

from shared_data import needs

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "tests" / "support" / "shared_data.py"


def test_a_missing_folder_is_named_in_the_skip_reason(tmp_path):
    mark = needs(tmp_path / "published-logs")
    assert mark.args == (True,)
    assert mark.kwargs["reason"].startswith("needs ../shared/data/published-logs (")
    assert needs(tmp_path).args == (False,)


def test_only_the_helper_finds_the_shared_folder_and_the_page_lists_who_needs_it():
    tests = [p for p in (ROOT / "tests").rglob("*.py") if p not in (HELPER, Path(__file__))]
    built = re.compile(r"""/ *["']shared["']|["'](/work|\.\.)/shared""")  # a path to ../shared in code
    finding = [str(p.relative_to(ROOT)) for p in tests if built.search(p.read_text())]
    assert not finding, f"find ../shared through tests/support/shared_data.py: {finding}"
    using = {str(p.relative_to(ROOT)) for p in tests if "from shared_data import" in p.read_text()}
    page = (ROOT / "doc" / "testing.md").read_text().split("## What a public clone skips", 1)[1].split("\n## ")[0]
    assert set(re.findall(r"^\| `(tests/[\w/]+\.py)`", page, re.M)) == using  # the table's rows
