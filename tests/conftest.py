import os
import sys
from pathlib import Path

# The helpers that tests of several folders share (tests/support/) are imported by name, and
# spawned ranks unpickle functions from them by that name: a spawned process starts with this
# process's sys.path. A folder's own helpers are importable as pytest puts each test file's
# folder on sys.path (its default "prepend" import mode, so every basename under tests/ is unique).
sys.path.insert(0, str(Path(__file__).parent / "support"))
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Tests of the built-in algorithms must not pick up plug-ins installed on the machine; the
# plug-in tests give their own environment without this.
os.environ["ALLREDUCE_BENCH_NO_PLUGINS"] = "1"
pytest_plugins = ["console_lines"]  # records what the tests' commands print (tests/support/)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _results_stay_out_of_the_repository(tmp_path, monkeypatch):
    """A command run in-process without --out claims results/<stamp>/ under the working
    directory: every test runs from its own temporary directory, so none lands in the checkout.
    Afterwards, every markdown table the test wrote there (report.md and the features'
    sections) has its header's cell count in every row (tests/support/markdown_tables.py)."""
    monkeypatch.chdir(tmp_path)
    yield
    from markdown_tables import mismatched_in

    broken = mismatched_in(tmp_path)
    assert not broken, f"markdown tables with rows of another cell count than their header: {broken}"


@pytest.fixture(autouse=True)
def _commands_print_within_120_columns(request):
    """Every line the test's commands printed fits a 120-column terminal (tests/support/console_lines.py)."""
    from console_lines import printed, too_wide

    printed.clear()
    yield
    wide = [line for output in printed for line in too_wide(output)]
    printed.clear()
    if not request.node.get_closest_marker("wide_console"):
        assert not wide, f"console lines wider than 120 columns: {wide}"
