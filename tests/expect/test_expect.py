"""The catalogue of published figures (every row sourced, sane units), the link limit, the
`expect` command, and the verdict after a run or an import with its checks tied to evidence."""
from __future__ import annotations

import re
import stat
import sys

import pandas as pd
import pytest
from click.testing import CliRunner
from shared_data import PUBLISHED_LOGS, needs

from allreduce_bench.cli import main
from allreduce_bench.core.metrics import COLLECTIVES
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.store import write_meta, write_parquet
from allreduce_bench.expect import catalogue as cat
from allreduce_bench.expect import verdict
from allreduce_bench.expect.system import System, detect, link_limit

LOGS = PUBLISHED_LOGS


def test_every_row_has_a_source_a_date_and_sane_units():
    rows = cat.catalogue()
    assert len(rows) >= 25
    sources = rows["source"].str.replace(r"(/issues|/pull)/\d+.*| .*", "", regex=True)
    assert sources.nunique() >= 8, sorted(set(sources))
    assert {"H100", "H200", "B200", "GB200", "A100", "MI300X"} <= set(rows["gpu"])
    assert rows["fabric"].str.contains("RoCE").any()
    for _, row in rows.iterrows():
        where = f"{row['gpu']} {row['busbw_GBps']} {row['source']}"
        assert re.fullmatch(r"https://\S+|[\w.-]+/[\w.-]+ \S+ @ [0-9a-f]{7}", row["source"]), where
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", row["date"]) and row["where"], where
        assert row["kind"] in cat.KINDS and row["collective"] in COLLECTIVES, where
        assert row["size_bytes"] != row["size_bytes"] or row["size_bytes"] > 0, where
        assert row["nic_Gbps"] != row["nic_Gbps"] or 10 <= row["nic_Gbps"] <= 1600, where
        if row["gpu"] == cat.ANY:  # one NIC's figure: below its line rate
            assert 0 < row["busbw_GBps"] <= row["nic_Gbps"] / 8, where
            continue
        limit = link_limit(System(row["gpu"], int(row["gpus_per_node"]), int(row["nodes"]),
                                  None if row["nics_per_node"] != row["nics_per_node"] else int(row["nics_per_node"]),
                                  None if row["nic_Gbps"] != row["nic_Gbps"] else row["nic_Gbps"]))
        # GB/s, not Gb/s: within the links' rate (NVLS and 2-node trees read up to ~1.3x above it)
        assert 0 < row["busbw_GBps"] <= 1.3 * (limit.GBps or 1e9), where
    assert set(cat.settings()["applies"]) <= {"one node", "several nodes"}
    assert cat.links()["source"].str.contains("@").all()


@pytest.mark.parametrize("name, model", [
    ("NVIDIA GH200 120GB", "GH200"), ("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"),
    ("Tesla V100-SXM2-32GB", "V100"), ("A100-SXM4-40GB", "A100"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("AMD Instinct MI300X", "MI300X"), ("Intel(R) Xeon(R) Processor", None), (None, None)])
def test_the_model_a_device_name_is(name, model):
    assert cat.model_of(name) == model


def test_the_link_limit_and_which_bound_applies():
    one = link_limit(System("NVIDIA H100 80GB HBM3", 8, 1))
    assert one.GBps == 450 and one.bound.startswith("intra-node: NVLink 4")
    across = link_limit(System("H100", 8, 2, 8, 400))  # 8 x 50 GB/s leave each node
    assert across.GBps == 400 and across.bound.startswith("across nodes")
    assert link_limit(System("A100", 8, 2, 8, 200)).GBps == 200  # the NICs, below NVLink 3's 300
    assert link_limit(System("B200", 8, 4, 8, 400)).GBps == 400
    assert link_limit(System("A100", 8, 2, 8, 400)).GBps == 300  # NVLink below the NICs
    assert link_limit(System("RTX 2080 Ti", 1, 16, 1, 100)).GBps == 12.5
    assert link_limit(System("MI300X", 2, 1)).GBps == 64  # a mesh: one 64 GB/s link to the peer
    unknown = link_limit(System("V100", 8, 2))
    assert unknown.GBps == 150 and "upper bound" in unknown.bound
    assert link_limit(System("cpu", 2, 1)).GBps is None


def test_matching_prefers_the_layout_and_the_ring_where_nccl_keeps_it():
    four = cat.matching("H100", 4, 1)
    assert four.iloc[0]["gpus_per_node"] == 4  # published log 13's own row first
    assert not four["setting"].str.startswith("NVLS").any()  # NVLS needs more than 4 GPUs
    assert "Ring" in four.iloc[1]["setting"] or "NVLS_ENABLE=0" in four.iloc[1]["setting"]
    eight = cat.matching("H200", 8, 1)
    assert eight.iloc[0]["setting"] in cat.DEFAULT_SETTINGS and eight.iloc[0]["gpus_per_node"] == 8
    gather = cat.matching("B200", 8, 1, "all_gather")  # none of its own: AllReduce's ring
    assert list(gather["collective"].unique()) == ["all_reduce"] and gather["busbw_GBps"].max() == 682.2
    assert cat.matching("H100", 8, 2)["nodes"].min() > 1 and cat.matching(None, 8, 1).empty


def _run(tmp_path, name, busbw_by_size, meta, world_size=16, nodes=2):
    rows = pd.DataFrame([{"run_id": name, "tag": name, "benchmark": "allreduce", "collective": "all_reduce",
                          "algorithm": "native", "world_size": world_size, "nodes": nodes, "size_bytes": size,
                          "time_us_median": 10.0, "busbw_GBps": busbw, "wrong": 0}
                         for size, busbw in busbw_by_size.items()])
    run = tmp_path / name
    run.mkdir()
    write_parquet(run, rows)
    write_meta(run, {"run_id": name, "backend": "nccl", **meta})
    return run


def test_a_short_run_gets_the_checks_its_own_records_point_to(tmp_path):
    nccl = {"hosts": {f"gpu{i}": {"ranks": list(range(8 * i, 8 * i + 8)), "network": "Socket", "nic_count": 1,
                                  "transports": {"P2P/IPC": 8, "NET/Socket": 2}} for i in (1, 2)},
            "environment": {"NCCL_ALGO": {"Tree": ["gpu1", "gpu2"]}, "NCCL_DEBUG": {"INFO": ["gpu1"]}}}
    nics = [{"name": f"mlx5_{i}", "port": "1", "rate_GBps": 50.0, "layer": "InfiniBand"} for i in range(8)]
    slow = _run(tmp_path, "slow", {1 << 26: 20.0, 1 << 28: 40.0},
                {"device_names": ["NVIDIA H100 80GB HBM3"] * 16, "nccl": nccl,
                 "peaks": {"16": {"per_rank": [{"rank": 0, "host": "gpu1", "nics": nics}]}}})
    good = _run(tmp_path, "good", {1 << 30: 380.0, 1 << 32: 398.0, 1 << 33: 401.0},
                {"device_names": ["NVIDIA H100 80GB HBM3"] * 16, "system": {"nics_per_node": 8, "nic_Gbps": 400}})
    found = {v["run"]: v for v in verdict.verdicts(load_results([slow, good], explain_skips=False))}
    short = found["slow"]
    assert short["limit_GBps"] == 400 and short["system"].nics_per_node == 8 and short["figure"]["nodes"] == 2
    text = "\n".join(short["checks"])
    assert "still rises at its largest size (256M" in text
    assert "2 of 2 host(s) (gpu1, gpu2) cross nodes over sockets" in text
    assert "used 1 NIC(s) of the 8 a node has" in text and "NCCL_ALGO set by environment to Tree" in text
    assert "NCCL_DEBUG" not in text
    assert found["good"]["checks"] == [] and not found["good"]["short"]
    line = verdict.line(found["good"])
    assert "peak 401 GB/s at 8G = 93% of 430 GB/s (measurement: 2 x 8 H100" in line
    assert "100% of the link limit 400 GB/s (across nodes" in line
    table = verdict.table(load_results(slow, explain_skips=False))
    assert table.loc[0, "of limit"] == "10%" and "sockets" in table.loc[0, "checks (where it falls short)"]


def test_a_run_without_nccl_says_what_it_lacks_and_a_gloo_run_needs_no_nccl_log(tmp_path):
    bare = _run(tmp_path, "bare", {1 << 20: 5.0, 1 << 22: 5.1}, {"device_names": ["NVIDIA B200"] * 8}, 8, 1)
    (v,) = verdict.verdicts(load_results(bare, explain_skips=False))
    assert v["limit_GBps"] == 900 and any("NCCL's log: none in meta.json" in c for c in v["checks"])
    assert any("flattens from 1M" in c for c in v["checks"])
    gloo = _run(tmp_path, "gloo", {1 << 20: 0.5, 1 << 22: 1.0}, {"backend": "gloo", "device_name": "cpu"}, 2, 1)
    (v,) = verdict.verdicts(load_results(gloo, explain_skips=False))
    assert v["figure"] is None and not any("NCCL" in c for c in v["checks"])


def test_expect_describes_a_system_and_refuses_without_one(tmp_path, monkeypatch):
    result = CliRunner().invoke(main, ["expect", "--gpu", "H200", "--gpus-per-node", "8"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("expect: all_reduce on 1 node(s) x 8 H200") and "link limit 450 GB/s" in first
    assert "482.26 GB/s" in result.output and "NCCL_NVLS_ENABLE" in result.output
    result = CliRunner().invoke(main, ["expect", "--gpu", "B200", "--gpus-per-node", "8", "--nodes", "4",
                                       "--nics", "8x400"])
    assert "381.8 GB/s" in result.output and "x 8 NICs = 368 GB/s" in result.output  # 46 GB/s per NIC
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))  # no NVML, no nvidia-smi
    for args in (["expect"], ["expect", "--gpu", "H100"], ["expect", "--gpu", "H100", "--gpus-per-node", "8",
                                                           "--nics", "eight"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and result.output.count("\n") == 1 and "Traceback" not in result.output


def _eight_h100s(tmp_path, monkeypatch) -> None:
    """nvidia-smi on PATH that lists eight H100s as core/host/gpus.py asks it, and no NVML."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6 7; do echo \"$i, GPU-$i, 81000, NVIDIA H100 80GB HBM3\"; done\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))


def test_detect_reads_nvidia_smi_and_the_rdma_ports(tmp_path, monkeypatch):
    _eight_h100s(tmp_path, monkeypatch)
    for i in range(8):
        port = tmp_path / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text("4: ACTIVE\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    found = detect(2, sys_class=tmp_path / "class")
    assert (found.model, found.gpus_per_node, found.nics_per_node, found.nic_Gbps) == ("H100", 8, 8, 400.0)
    assert link_limit(found).GBps == 400
    (tmp_path / "nvidia-smi").unlink()
    assert detect() is None


def _paragraph(output: str, start: str) -> str:
    """From the one line holding `start` to the end, the console's wrapping (core/text.py) undone:
    a wrapped line's continuation is indented like any other line, so only the start is sure."""
    (i,) = [n for n, x in enumerate(output.splitlines()) if start in x]
    return " ".join(" ".join(output.splitlines()[i:]).split())


@needs(LOGS)
def test_every_published_log_naming_a_gpu_gets_shares_of_a_figure_and_of_its_link_limit(tmp_path):
    """What the logs do not say is stated as the published-logs README says it (13: one node;
    02: 100G IB, one NIC per host in its NCCL lines; 04: 8 HDR per node) or as Alps' GH200 nodes
    are documented (4 Slingshot NICs: cscs-docs docs/alps/hardware.md; 200 Gb/s a link:
    ml-engineering network/README.md)."""
    stated = {"02-": ["--nics", "1x100"], "04-": ["--nics", "8x200"], "09-": ["--nics", "4x200"],
              "10-": ["--nics", "4x200"], "13-": ["--nodes", "1"]}
    for log in sorted(LOGS.glob("*.txt")):
        extra = next((v for k, v in stated.items() if log.name.startswith(k)), [])
        result = CliRunner().invoke(main, ["import", str(log), "--out", str(tmp_path / "out"), *extra])
        assert result.exit_code == 0, result.output
        line = _paragraph(result.output, "Is this normal?")
        if log.name.startswith(("04-", "14-")):  # no GPU named in the log
            assert "no published figure" in line
            continue
        assert re.search(r"= \d+% of [\d.]+ GB/s \(", line) and re.search(r"; \d+% of the link limit", line), line


def test_run_expect_line_on_cpu_and_on_a_gpu_host(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from allreduce_bench.expect.cli import run_headline

    assert run_headline(SimpleNamespace(launch=SimpleNamespace(device="cpu"))).startswith(
        "expect: a gloo run on CPU")
    _eight_h100s(tmp_path, monkeypatch)
    line = run_headline(SimpleNamespace(launch=SimpleNamespace(device="cuda", world_sizes=(16,), ranks_per_node=8)))
    assert line.startswith("expect: all_reduce on 2 node(s) x 8 H100") and "closest published figure" in line


@pytest.mark.slow
def test_run_expect_prints_its_line_first_and_the_summary_says_if_it_is_normal(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--quick", "--expect", "--world-sizes",
                           "2", "--algos", "native", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0].startswith("expect: a gloo run on CPU")
    assert "Is this normal? all_reduce N=2" in done.stdout and "of the link limit" in done.stdout
    assert "## Is this normal?" in (tmp_path / "run" / "plots" / "report.md").read_text()


def test_expect_says_what_the_catalogue_does_not_know_and_headings_count_their_rows():
    def expect(*args):
        return CliRunner().invoke(main, ["expect", "--gpus-per-node", "8", *args])

    for args, named in ((["--gpu", "H999"], "H999 is not a GPU the catalogue knows (A100, "),
                        (["--gpu", "H100", "--collective", "all_foo"], "all_gather, all_reduce, reduce_scatter")):
        result = expect(*args)
        assert result.exit_code == 2 and result.output.count("\n") == 1 and named in result.output, result.output
    result = expect("--gpu", "H999", "--nodes", "2", "--nics", "8x400")  # the NICs' limit holds for any GPU
    assert result.exit_code == 0 and "H999 is not a GPU the catalogue knows" in result.output
    assert "closest first" not in result.output and "per 400 Gb/s NIC, for any GPU (2):" in result.output
    result = CliRunner().invoke(main, ["expect", "--gpu", "H100", "--gpus-per-node", "3"])
    assert "none at 1 x 3 H100 (its layouts: 1 x 4, 1 x 8, 2 x 8, 4 x 8)" in _paragraph(result.output, "closest first")
    lines = expect("--gpu", "H100", "--nodes", "2", "--nics", "8x400").output.splitlines()
    counted = {}  # each heading's count, and the figures below it up to the blank line
    for i, heading in enumerate(lines):
        if heading.startswith("Published") and (count := re.search(r"\((\d+)\):$", heading)):
            rows = [x for x in lines[i + 1:lines.index("", i)] if re.match(r"  (per NIC|\s+[\d.]+ GB/s)", x)]
            counted[heading] = (int(count.group(1)), len(rows))
    assert list(counted.values()) == [(3, 3), (2, 2)], counted
    assert "answer: none in the catalogue for this system" in expect("--gpu", "A100").output  # no NVLS on A100
