"""The command line: bad input in one line with exit code 2, and a real --quick run end to end."""
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core.config.checks import Host
from allreduce_bench.core.config.run import resolve_backend
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.schema import COLUMNS


@pytest.mark.parametrize("args,message", [
    (["--min-bytes", "0"], "at least 1 byte"),
    (["--max-bytes", "12XB"], "is not a size"),
    (["--min-bytes", "1M", "--max-bytes", "4K"], "larger than --max-bytes"),
    (["--factor", "1"], "greater than 1"),
    (["--algos", "ring,bogus"], "unknown algorithm 'bogus'"),
    # on gloo the choices are gloo's: NCCL's native:* variants are counted, not offered
    (["--algos", "nosuch"], "choose from native, ring, ring-steps, naive, hierarchical, recursive-doubling, "
     "halving-doubling, tree, direct (or all); "),
    (["--dtype", "complex32"], "'complex32' is not one of"),
    (["--world-sizes", "6", "--ranks-per-node", "4"], "not a whole number of nodes"),
    (["--world-sizes", "two"], "comma-separated list of integers"),
    (["--backend", "nccl"], "needs a CUDA device"),
    (["--backend", "mpi"], "'mpi' is not one of"),
    (["--sizes", "1M", "--min-bytes", "4K"], "either --sizes or"),
    (["--iters", "0"], "--iters must be at least 1"),
    (["--dtype", "float64", "--sizes", "4"], "4 B is not a whole number of float64 elements"),
    (["--sizes", "1.3M"], "--sizes entry '1.3M' is 1,363,148.8 B, not a whole number of bytes"),
    (["--sizes", "6"], "--sizes entry 6 B is not a whole number of float32 elements (4 B each)"),
    (["--bogus-option"], "No such option"),
    (["--sizes", "1M", "4M", "16M"], "(4M 16M); a list is one word, comma-separated: --sizes 1M,4M,16M"),
    (["--quick", "4M"], "argument (4M) (see '"),  # after a flag: no list to join
])
def test_bad_input_is_one_line_exit_2(args, message, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    result = CliRunner().invoke(main, ["run", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert "native:" not in lines[0] or "--algos" not in args  # NCCL's variants are not gloo's choices
    assert "Traceback" not in result.output


def test_more_gpu_ranks_than_gpus():
    with pytest.raises(UsageError, match="only 2 GPUs"):
        resolve_backend("nccl", None, 4, 2)
    assert resolve_backend("auto", None, 4, 2) == ("gloo", "cpu")
    assert resolve_backend("auto", None, 2, 2) == ("nccl", "cuda")
    assert resolve_backend("auto", "cpu", 2, 2) == ("gloo", "cpu")


@pytest.mark.slow
def test_console_script_bad_input_exit_code():
    script = shutil.which("allreduce-bench")
    assert script, "the allreduce-bench console script is not installed (pip install -e .)"
    done = subprocess.run([script, "run", "--max-bytes", "12XB"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_help_explains():
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    for option in ("--algos", "--world-sizes", "--min-bytes", "--ranks-per-node", "--quick", "--tag"):
        assert option in result.output


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_run_end_to_end(tmp_path):
    script = shutil.which("allreduce-bench")
    assert script
    out = tmp_path / "run"
    done = subprocess.run([script, "run", "--quick", "--world-sizes", "2,4", "--out", str(out),
                           "--tag", "smoke"],
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns[:len(COLUMNS)]) == COLUMNS
    # 4 algorithms x world sizes 2 and 4 x 2 sizes, all correct
    assert len(frame) == 16 and (frame["wrong"] == 0).all()
    assert set(frame["algorithm"]) == {"native", "ring", "naive", "hierarchical"}
    assert set(frame["world_size"]) == {2, 4}
    assert set(frame[frame["world_size"] == 4]["nodes"]) == {2}
    assert (frame["tag"] == "smoke").all() and frame["run_id"].nunique() == 1
    assert (frame["busbw_GBps"] > 0).all()
    assert (frame["time_us_min"] <= frame["time_us_median"]).all()
    assert (frame["time_us_median"] <= frame["time_us_max"]).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["backend"] == "gloo" and len(meta["hostnames"]) == 4
    assert meta["versions"]["torch"] == torch.__version__
    assert (out / "plots" / "bandwidth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "# ring: world size 4" in done.stdout + done.stderr
    assert "#wrong in total: 0" in done.stdout


def test_python_dash_m_is_the_same_cli():
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "run" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_under_torchrun_sub_worlds_are_first_ranks(tmp_path):
    out = tmp_path / "torchrun"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         "-m", "allreduce_bench", "run", "--world-sizes", "2,4", "--ranks-per-node", "2", "--quick",
         "--algos", "ring,hierarchical", "--no-plot", "--out", str(out)],
        capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    frame = pd.read_csv(out / "results.csv")
    layouts = set(map(tuple, frame[["world_size", "nodes", "ranks_per_node"]].values.tolist()))
    assert layouts == {(2, 1, 2), (4, 2, 2)}
    assert len(frame) == 8 and (frame["wrong"] == 0).all()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_ranks_sitting_out_a_sub_world_outwait_the_timeout(tmp_path):
    # world size 2 takes seconds; rank 2 sits it out longer than --timeout, which bounds
    # collectives, not waiting for a phase
    out = tmp_path / "sit-out"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
         "-m", "allreduce_bench", "run", "--world-sizes", "2,3", "--ranks-per-node", "1",
         "--sizes", "4M", "--iters", "800", "--warmup", "1", "--algos", "native", "--timeout", "2",
         "--no-plot", "--out", str(out)],
        capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    frame = pd.read_csv(out / "results.csv")
    assert sorted(frame["world_size"]) == [2, 3]


def test_sizes_are_whole_elements(monkeypatch):
    """A size given by hand that is no whole number of elements is refused (above); a point of
    a sweep between the given ends is rounded down to whole elements."""
    from configs import run_config_of

    from allreduce_bench.core.environment import Started
    config = run_config_of(Started(), Host(cpus=2), algos="ring", world_sizes="2", min_bytes="4K",
                           max_bytes="400000", factor=1.5, backend="gloo", timeout_s=60.0, no_plot=True)
    assert 4096 * 1.5 ** 11 == 354294 and config.sizes[-1] == 354292
