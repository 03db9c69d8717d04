"""Pure parts: size parsing, sweeps, busbw factors, statistics, patterns, the CSV schema."""
import csv
import math

import pandas as pd
import pytest
import torch

from allreduce_bench import load_results
from allreduce_bench.core import metrics
from allreduce_bench.core.algorithms.ring import chunk_bounds
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.layout import node_layout
from allreduce_bench.core.measure import patterns
from allreduce_bench.core.results.schema import COLUMNS
from allreduce_bench.core.results.store import ResultsWriter
from allreduce_bench.core.units import format_size, parse_size, parse_size_list, size_sweep


@pytest.mark.parametrize("text,expected", [
    ("4K", 4096), ("64M", 64 << 20), ("1G", 1 << 30), ("1g", 1 << 30), ("512", 512),
    ("1.5K", 1536), ("2KiB", 2048), (" 3 M ", 3 << 20), (7, 7),
    # one reading per spelling: bare K/M/G and KiB/MiB binary, KB/MB/GB decimal (as GB/s)
    ("16M", 16 << 20), ("16MiB", 16 << 20), ("16mib", 16 << 20), ("16MB", 16_000_000),
    ("16mb", 16_000_000), ("4kB", 4000), ("1GB", 10 ** 9), ("1.5M", 1_572_864),
    ("1.5MB", 1_500_000), ("0.5K", 512)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["0", "12XB", "", "K", "-4K", "1.3", "4 K B", "1.3K", "0.1K",
                                  "1.0000001M", "1e6", "99999999T"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text, "--min-bytes")


def test_size_sweep_like_nccl_tests():
    assert size_sweep(4 << 10, 64 << 20, 4) == [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                               4 << 20, 16 << 20, 64 << 20]
    assert size_sweep(1000, 1000, 2) == [1000]
    assert size_sweep(8, 100, 3) == [8, 24, 72]
    with pytest.raises(UsageError, match="larger than"):
        size_sweep(2, 1, 2)
    with pytest.raises(UsageError, match="greater than 1"):
        size_sweep(1, 8, 1)


def test_a_fraction_of_a_byte_is_one_line_naming_the_bytes():
    with pytest.raises(UsageError, match=r"--sizes entry '1\.3K' is 1,331\.2 B, not a whole "
                       r"number of bytes; give whole bytes, e.g\. 1331"):
        parse_size("1.3K", "--sizes entry")


def test_a_size_given_must_be_whole_elements_of_the_dtype():
    from allreduce_bench.core.config import CPU_DEFAULTS, resolve_sizes

    assert resolve_sizes("16MB,1.5M", None, None, None, CPU_DEFAULTS, "float64") == (
        1_572_864, 16_000_000)
    with pytest.raises(UsageError, match=r"--sizes entry 6 B is not a whole number of float32 "
                       r"elements \(4 B each\); give a multiple of 4 B, e\.g\. 4 or 8"):
        resolve_sizes("6", None, None, None, CPU_DEFAULTS, "float32")
    with pytest.raises(UsageError, match="--max-bytes 1000002 B is not a whole number of float32"):
        resolve_sizes(None, "4K", "1000002", 2, CPU_DEFAULTS, "float32")
    # a sweep's own points between the given ends are rounded down by run_sizes, not refused
    assert resolve_sizes(None, "4K", "16K", 1.5, CPU_DEFAULTS, "float32")[1] == 6144


def test_byte_list_names_every_size_or_the_ends_of_a_long_sweep():
    from allreduce_bench.core.units import byte_list

    assert byte_list([4096, 16 << 20]) == "4096, 16777216 B"
    assert byte_list(size_sweep(1 << 10, 1 << 30, 2)) == (
        "1024, 2048, 4096, ..., 536870912, 1073741824 B (21 sizes)")


def test_size_list_and_format():
    assert parse_size_list("8M,1M,8M") == [1 << 20, 8 << 20]
    assert [format_size(s) for s in (512, 4096, 1536, 64 << 20, 1 << 30)] == ["512", "4K", "1.5K", "64M", "1G"]


def test_busbw_factor_and_bandwidths():
    assert metrics.busbw_factor(1) == 0
    assert metrics.busbw_factor(2) == 1
    assert metrics.busbw_factor(4) == 1.5
    assert metrics.busbw_factor(8) == 1.75
    # 1 GB in 1 s: algbw 1 GB/s (decimal), busbw 1.5 GB/s at N=4
    assert metrics.algbw_GBps(1e9, 1e6) == pytest.approx(1.0)
    assert metrics.busbw_GBps(1e9, 1e6, 4) == pytest.approx(1.5)


def test_time_stats():
    stats = metrics.sample_stats([[5.0, 1.0, 3.0, 2.0, 4.0]])  # one series: DDP's per-step times
    assert stats["time_us_median"] == 3.0
    assert stats["time_us_mean"] == 3.0
    assert stats["time_us_min"] == 1.0 and stats["time_us_max"] == 5.0
    assert stats["time_us_p95"] == pytest.approx(4.8)  # linear interpolation, as pandas/numpy


@pytest.mark.parametrize("numel,parts", [(1, 4), (3, 4), (5, 4), (97, 3), (8, 8), (0, 2)])
def test_chunk_bounds_cover_evenly(numel, parts):
    bounds = chunk_bounds(numel, parts)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == numel
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    lengths = [b - a for a, b in bounds]
    assert max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
@pytest.mark.parametrize("world_size", [1, 3, 8, 300])
def test_patterns_sum_exactly(dtype, world_size):
    numel = 50
    total = torch.zeros(numel, dtype=torch.int64)
    for rank in range(world_size):
        part = torch.empty(numel, dtype=dtype)
        patterns.fill(part, rank, world_size)
        total += part.to(torch.int64)
    limit = {torch.bfloat16: 256, torch.float16: 2048}.get(dtype, 1 << 24)
    assert int(total.max()) <= limit  # every partial sum is exact in the dtype
    assert torch.equal(patterns.expected_sum(numel, world_size, dtype).to(torch.int64), total)
    assert len(set(total.tolist())) > 1 or world_size == 1  # not a constant: misplacements show


def test_count_wrong():
    assert patterns.count_wrong(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 0.0, 3.0])) == 1


def test_node_layout():
    assert node_layout(4, 2) == 2
    assert node_layout(2, 4) == 2  # a sub-world smaller than a node is part of one node
    assert node_layout(6, 3) == 3
    with pytest.raises(UsageError, match="not a whole number of nodes"):
        node_layout(6, 4)


def test_results_writer_schema_and_load(tmp_path):
    writer = ResultsWriter(tmp_path)
    row = {c: 1 for c in COLUMNS} | {"algorithm": "ring", "tag": "nvlink"}
    writer.append(row)
    writer.append(row | {"algorithm": "naive"})
    with open(tmp_path / "results.csv") as f:
        lines = list(csv.reader(f))
    assert lines[0] == COLUMNS and len(lines) == 3
    frame = load_results(tmp_path)
    assert list(frame["algorithm"]) == ["ring", "naive"]
    assert set(COLUMNS) <= set(frame.columns)
    both = load_results([tmp_path, tmp_path / "results.csv"])
    assert len(both) == 4


def test_appending_to_a_file_with_an_older_header(tmp_path):
    old_columns = COLUMNS[:23]  # as written before the ddp/links columns existed
    ResultsWriter(tmp_path, old_columns).append({c: 1 for c in old_columns} | {"algorithm": "ring"})
    ResultsWriter(tmp_path).append({c: 2 for c in COLUMNS} | {"algorithm": "naive", "link": "intra"})
    frame = load_results(tmp_path)
    assert list(frame["algorithm"]) == ["ring", "naive"]
    assert frame["link"].isna().tolist() == [True, False]
    # a file with more columns than this version knows keeps its header
    ResultsWriter(tmp_path, old_columns).append({c: 3 for c in old_columns})
    assert len(load_results(tmp_path)) == 3


def test_a_half_written_last_row_is_not_done_and_is_dropped(tmp_path):
    from allreduce_bench.core.results import resume
    ResultsWriter(tmp_path).append({c: 1 for c in COLUMNS} | {
        "run_id": "r", "benchmark": "allreduce", "algorithm": "ring", "world_size": 2, "size_bytes": 4096})
    with open(tmp_path / "results.csv", "a") as f:
        f.write("r,2026-11-29,,allreduce,naive,gloo,cpu,float32,2,1,2,8192")  # killed mid-row
    assert resume.done_keys(tmp_path, "r") == {("ring", 2, 4096)}
    ResultsWriter(tmp_path).append({c: 1 for c in COLUMNS} | {"run_id": "r", "algorithm": "hierarchical"})
    frame = load_results(tmp_path)
    assert list(frame["algorithm"]) == ["ring", "hierarchical"]


def test_a_new_run_in_the_same_directory_keeps_the_earlier_meta(tmp_path):
    from allreduce_bench.core.results.store import read_meta, start_meta
    start_meta(tmp_path, {"run_id": "a", "tag": "nvlink"})
    start_meta(tmp_path, {"run_id": "b", "tag": "ib"})
    start_meta(tmp_path, {"run_id": "c"})
    meta = read_meta(tmp_path)
    assert meta["run_id"] == "c"
    assert [m["run_id"] for m in meta["earlier_runs"]] == ["a", "b"]


def test_load_results_errors(tmp_path):
    with pytest.raises(UsageError, match="no results"):
        load_results(tmp_path / "missing")
    (tmp_path / "results.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UsageError, match="missing columns"):
        load_results(tmp_path)
    pd.DataFrame(columns=COLUMNS).to_csv(tmp_path / "results.csv", index=False)
    with pytest.raises(UsageError, match="no rows"):
        load_results(tmp_path)
    assert not math.isnan(metrics.busbw_factor(3))
