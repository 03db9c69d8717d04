"""`--nccl-debug` on CPU: the variables every rank runs with, the files ranks would write
gathered and read into meta.json, versions and `nvidia-smi topo -m` beside the run, the report."""
# ruff: noqa: E501  (log lines at their own width)
import json
import os
import stat
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from distributed import run_world
from nccl_debug_ranks import write_like_nccl_then_collect
from shared_data import PUBLISHED_LOGS, needs

from allreduce_bench.cli import main
from allreduce_bench.core.host.gpus import smi
from allreduce_bench.core.measure import meta, nccl_debug
from allreduce_bench.nccl_log import hooks as nccl_hooks
from allreduce_bench.nccl_log import record as nccl_record

# the lines of one rank, in the formats of NVIDIA/nccl#1412's 2.2x log (see test_nccl_log.py)
RANK_LINES = [
    "{host}:{pid}:{pid} [0] NCCL INFO NCCL_IB_HCA set by environment to ^mlx5_3,mlx5_4",
    "{host}:{pid}:{pid} [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ibp26s0:10.0.0.4<0>",
    "{host}:{pid}:{pid} [0] NCCL INFO Using network IB",
    "{host}:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm 0x8d57d40 rank {rank} nranks 2 cudaDev 0 nvmlDev 0 busId 7000 commId 0x49bbd7790311d5eb - Init COMPLETE",
    "{host}:{pid}:{pid} [0] NCCL INFO Channel 00/0 : {rank}[0] -> 1[0] [send] via NET/IB/1/GDRDMA",
]


def test_every_rank_gets_the_variables_nccl_reads(monkeypatch, tmp_path):
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        monkeypatch.delenv(name, raising=False)
    nccl_debug.enable(SimpleNamespace(out_dir=tmp_path, nccl_debug=False))
    assert "NCCL_DEBUG" not in os.environ
    nccl_debug.enable(SimpleNamespace(out_dir=tmp_path, nccl_debug=True))
    assert os.environ["NCCL_DEBUG"] == "INFO" and os.environ["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH,ENV,TUNING"
    assert os.environ["NCCL_DEBUG_FILE"] == str(tmp_path.resolve() / "nccl-debug" / "%h.%p.log")
    assert (tmp_path / "nccl-debug").is_dir()
    # a rank whose OUT is not here (another host's default results/<stamp>): a scratch folder
    nccl_debug.enable(SimpleNamespace(out_dir=tmp_path / "not-here", nccl_debug=True))
    assert not (tmp_path / "not-here").exists() and "allreduce-bench-nccl-debug" in os.environ["NCCL_DEBUG_FILE"]


@pytest.mark.slow
@pytest.mark.parametrize("made", [True, False])
def test_the_files_ranks_write_reach_rank_0_and_meta_json(tmp_path, made):
    """Rank 1's file is in a folder rank 0 cannot see (its own OUT on a host that shares no file
    system, or a scratch folder): it is sent; a scratch copy is removed once sent."""
    dirs = [str(tmp_path / "host-0"), str(tmp_path / "host-1")]
    held, left = run_world(2, write_like_nccl_then_collect, dirs, RANK_LINES, [True, made])
    assert held == ["node-0", "node-1"] and len(left) == (1 if made else 0)
    nccl_hooks.after_ranks(SimpleNamespace(launch=SimpleNamespace(out_dir=dirs[0], nccl_debug=True)))  # the writer
    block = json.loads((tmp_path / "host-0" / "meta.json").read_text())["nccl"]
    assert sorted(block["hosts"]) == ["node-0", "node-1"] and block["world_size"] == 2
    assert {h["network"] for h in block["hosts"].values()} == {"IB"}
    assert block["environment"] == {"NCCL_IB_HCA": {"^mlx5_3,mlx5_4": ["node-0", "node-1"]}}


@pytest.mark.slow
def test_a_gloo_run_with_nccl_debug_records_what_is_there_and_says_so(tmp_path, capfd):
    out = tmp_path / "run"
    args = ["run", "--world-sizes", "2", "--algos", "native", "--sizes", "4K", "--samples", "3",
            "--no-plot", "--nccl-debug", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    # the writer says it once the ranks have ended (CliRunner mixes its stderr into output)
    assert "NCCL wrote no debug lines" in result.output + capfd.readouterr().err
    assert "nccl" not in json.loads((out / "meta.json").read_text())
    # a file from a rank of another host on a shared file system is read into the run
    (out / "nccl-debug" / "node-9.4242.log").write_text(
        "".join(line.format(host="node-9", pid=4242, rank=1) + "\n" for line in RANK_LINES))
    assert nccl_record.record(out)["hosts"]["node-9"]["nics"] == ["mlx5_0:1/IB", "mlx5_1:1/IB"]
    assert json.loads((out / "meta.json").read_text())["nccl"]["lines"]["info"] == len(RANK_LINES)


def test_driver_version_and_topology_beside_the_run(monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 3))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-smi's answers, not this host's NVML
    monkeypatch.setenv("PATH", str(tmp_path))
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *driver_version*) echo 550.54.15;; *) echo 'GPU0 X NV18';; esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    found = meta.versions()
    assert found["nccl"] == "2.27.3" and found["nvidia_driver"] == "550.54.15" and "cuda" in found
    written = meta.save_topologies(tmp_path, {"gpu-a": smi("topo", "-m"), "gpu-b": "nvidia-smi topo -m failed: x"})
    assert [p.name for p in written] == ["nvidia-smi-topo.gpu-a.txt"]
    assert written[0].read_text() == "GPU0 X NV18\n"


LOGS = PUBLISHED_LOGS


@pytest.mark.slow
@needs(LOGS)
@pytest.mark.wide_console("the readers' in-place note (core/results/load.py skipped_note)")
def test_report_says_what_nccl_set_up(tmp_path):
    out = tmp_path / "o"
    assert CliRunner().invoke(main, ["import", str(next(LOGS.glob("02-*.txt"))), "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(main, ["report", str(out), "--out-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r" / "report.md").read_text()
    assert "## What NCCL set up" in text and "NCCL 2.4.7+cuda10.1: 16 host(s), 16 ranks" in text
    assert "No host differs from the others" in text
