"""Link peaks: parsing what NVML-less hosts print, the world's peak per link class, the row
columns (the report's "is this normal?" against published figures: tests/expect/)."""
import os
from types import SimpleNamespace

import pandas as pd
import pytest
from distributed import run_world
from rank_functions import link_probe

from allreduce_bench.core.host.gpus import parse_nvlink_status
from allreduce_bench.core.measure import link_peaks as peaks
from allreduce_bench.core.measure.rank import Session
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.store import write_meta, write_parquet

NVLINK_S = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)
\t Link 0: 26.562 GB/s
"""


def test_parsers():
    assert peaks.parse_rate_file("400 Gb/sec (4X NDR)\n") == 50.0
    assert peaks.parse_rate_file("100 Gb/sec (4X EDR)") == 12.5
    assert peaks.parse_rate_file("garbage") is None
    assert parse_nvlink_status(NVLINK_S) == {0: [26.562, 26.562], 1: [26.562]}


def test_nic_rates_from_sysfs(tmp_path):
    for dev, state, rate in (("mlx5_0", "4: ACTIVE", "400 Gb/sec (4X NDR)"),
                             ("mlx5_1", "1: DOWN", "400 Gb/sec (4X NDR)")):
        port = tmp_path / "infiniband" / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state)
        (port / "rate").write_text(rate)
    found = peaks.nic_peaks(tmp_path)
    assert [(n["name"], n["rate_GBps"]) for n in found] == [("mlx5_0", 50.0)]


def test_the_probe_is_sized_to_the_link_so_nobody_waits_seconds_for_it():
    # 8 MiB at an emulated 200 Mbit/s held the other ranks 4.8 s in a gather timed by --timeout 8
    assert peaks.probe_size(64 << 10, (64 << 10) / 25e6, 8 << 20) == 1_250_000  # 0.05 s at 25 MB/s
    assert peaks.probe_size(64 << 10, 30e-6, 8 << 20) == 8 << 20  # loopback: the largest
    assert peaks.probe_size(64 << 10, 10.0, 8 << 20) == 64 << 10  # never below the small one
    assert peaks.probe_size(64 << 10, 0.0, 8 << 20) == 8 << 20
    assert peaks.probe_size(1000, 1e-3, 10 ** 9) % 4 == 0


def test_the_probe_runs_the_same_transfers_on_ranks_0_and_1():
    first, second, third = run_world(3, link_probe, 1 << 20)
    assert first[1] == second[1] and 64 << 10 <= first[1] <= 1 << 20, (first, second)
    assert first[0] > 0 and second[0] > 0 and third is None


def test_world_peaks_per_link_class():
    gpu = {"nvlink_GBps": 450.0, "nvlink_links": 18, "how": "nvml"}
    nics = [{"rate_GBps": 50.0}] * 8
    per_rank = [{"host": f"n{r // 8}", "gpu": gpu, "nics": nics} for r in range(16)]
    world = peaks.world_peaks(per_rank)
    assert world["intra_GBps"] == 450.0 and world["inter_GBps"] == 400.0
    cpu = [{"host": "laptop", "nics": []}] * 4
    world = peaks.world_peaks(cpu, probe_GBps=3.0)
    assert world["intra_GBps"] == world["inter_GBps"] == 3.0


def _session(peak_values, launcher_knows=()):
    session = Session.__new__(Session)
    session.peaks = peak_values
    session.launch = SimpleNamespace(link_peaks=launcher_knows)
    return session


def test_rows_get_the_peak_of_the_link_bounding_their_world():
    session = _session({"intra_GBps": 400.0, "inter_GBps": 50.0})
    one_node = session.with_peak({"busbw_GBps": 300.0, "nodes": 1})
    assert one_node["link_peak_GBps"] == 400.0 and one_node["busbw_pct_of_peak"] == 75.0
    two_nodes = session.with_peak({"busbw_GBps": 40.0, "nodes": 2})
    assert two_nodes["link_peak_GBps"] == 50.0 and two_nodes["busbw_pct_of_peak"] == 80.0
    # a link rate the launcher knows (emulate's shaped 350 Mbit/s) wins over a measured one
    emulated = _session({"inter_GBps": 50.0}, (("inter_GBps", 0.04375),)).with_peak(
        {"busbw_GBps": 0.0175, "nodes": 2, "emulation": "2x2@350Mbit"})
    assert emulated["link_peak_GBps"] == pytest.approx(0.04375, abs=1e-3)
    assert "link_peak_GBps" not in _session({}).with_peak({"busbw_GBps": 1.0, "nodes": 1})
    assert _session({"intra_GBps": 1.0}).with_peak({"measure": "step"}) == {"measure": "step"}


def _run(tmp_path, name, device_names, world_size, nodes, busbw):
    rows = pd.DataFrame([{"run_id": name, "tag": name, "benchmark": "allreduce", "algorithm": "native",
                          "world_size": world_size, "nodes": nodes, "size_bytes": s,
                          "time_us_median": 10.0, "busbw_GBps": busbw * s / 2**30, "wrong": 0}
                         for s in (2**20, 2**30)])
    run = tmp_path / name
    run.mkdir()
    write_parquet(run, rows)  # a run with Parquet only is read too
    write_meta(run, {"run_id": name, "device_names": device_names})
    return run


def test_load_results_reads_folders_of_runs_and_prefers_fresh_parquet(tmp_path):
    _run(tmp_path, "x", ["cpu"], 2, 1, 1.0)
    _run(tmp_path, "y", ["cpu"], 2, 1, 1.0)
    frame = load_results(tmp_path, explain_skips=False)
    assert sorted(frame["run_id"].unique()) == ["x", "y"]
    stale = pd.read_parquet(tmp_path / "x" / "results.parquet").iloc[:1]
    csv_path = tmp_path / "x" / "results.csv"
    stale.to_csv(csv_path, index=False)  # written after the Parquet file: the CSV is newer
    later = (tmp_path / "x" / "results.parquet").stat().st_mtime + 10
    os.utime(csv_path, (later, later))
    assert len(load_results(tmp_path / "x", explain_skips=False)) == 1
