"""What each command prints fits a 120-column terminal: notes and summaries wrapped, a table too
wide for it printed row by row (the full table is in the report's file). Every test's commands
are held to it (tests/support/console_lines.py); these run each command that reads stored
results, and `run` and `ddp`, on their own."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic_runs
from click.testing import CliRunner
from console_lines import too_wide

from allreduce_bench.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "results"


def test_an_nccl_tests_table_may_be_as_wide_as_its_header():
    table = "#       size  count" + " " * 120 + "\n" + "        4096 " + "x" * 120 + "\n\n"
    assert too_wide(table) == []
    assert len(too_wide(table.replace("x" * 120, "x" * 140))) == 1  # a note past its columns
    assert len(too_wide(table + "y" * 121)) == 1
    assert too_wide("allreduce-bench: error: " + "y" * 121) == []  # one line, whatever it names
    assert too_wide("note: skipped /" + "p" * 200 + ": no rows") == []  # a path counts as one column
    assert len(too_wide("note: skipped /p/q " + "w" * 120)) == 1


def in_process(tmp_path) -> dict[str, list[str]]:
    """Every command that reads stored results, on the committed examples and synthetic runs."""
    run = tmp_path / "cpu"
    shutil.copytree(EXAMPLES / "example-cpu-gloo", run)  # `model fit` writes model.json beside it
    other = synthetic_runs.write_run(tmp_path / "new", synthetic_runs.rows(synthetic_runs.default_states())
                                     .assign(run_id="synthetic02"))
    base = synthetic_runs.write_run(tmp_path / "base", synthetic_runs.rows(synthetic_runs.default_states()))
    commands = {
        "report": ["report", str(run), "--out-dir", str(tmp_path / "r1")],
        "report emulated": ["report", str(EXAMPLES / "example-emulated-2x2"), "--out-dir", str(tmp_path / "r2")],
        "report ddp": ["report", str(EXAMPLES / "example-emulated-ddp"), "--out-dir", str(tmp_path / "r3")],
        "plot": ["plot", str(run), str(EXAMPLES / "example-emulated-2x2"), "--out-dir", str(tmp_path / "p")],
        "compare": ["compare", str(base), str(other)],
        "model fit": ["model", "fit", str(run)],
        "model predict": ["model", "predict", "--algo", "all", "--world-size", "512", "--ranks-per-node",
                          "8", "--size", "64K,1G", "--intra-bw", "900GB/s", "--inter-bw", "25GB/s",
                          "--intra-latency", "5us", "--inter-latency", "10us"],
        "model ddp": ["model", "ddp", "--params", "7B", "--dtype", "bfloat16", "--compute", "0.5s",
                      "--bandwidth", "900GB/s", "--bandwidth", "25GB/s"],
        "export": ["export", str(run), "--out", str(tmp_path / "exported")],
        "expect": ["expect", "--gpu", "H100", "--gpus-per-node", "8", "--nodes", "2", "--nics", "8x400"],
    }
    outputs = {}
    for name, args in commands.items():
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (name, result.output)
        outputs[name] = result.output
    imported = CliRunner().invoke(main, ["import", *map(str, sorted((tmp_path / "exported").iterdir())),
                                         "--out", str(tmp_path / "imported")])
    assert imported.exit_code == 0, imported.output
    return {**outputs, "import": imported.output}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_commands_reading_results_print_within_120_columns(tmp_path):
    wide = {name: lines for name, lines in
            ((name, too_wide(output)) for name, output in in_process(tmp_path).items()) if lines}
    assert wide == {}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_and_ddp_print_within_120_columns(tmp_path):
    env = {**os.environ, "COLUMNS": "120"}
    cli = [sys.executable, "-m", "allreduce_bench"]
    wide = {}
    for name, args in {"run": ["run", "--quick", "--out", str(tmp_path / "run")],
                       "ddp": ["ddp", "--world-sizes", "2", "--params", "40K", "--layers", "4",
                               "--bucket-mb", "0.0625,25", "--accum", "2", "--iters", "2",
                               "--warmup", "0", "--out", str(tmp_path / "ddp")]}.items():
        done = subprocess.run(cli + args, capture_output=True, text=True, timeout=240, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = too_wide(done.stdout) + too_wide(done.stderr)
        if lines:
            wide[name] = lines
    assert wide == {}
