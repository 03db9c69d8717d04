"""NCCL Inspector's records of a job as a run of benchmark=job, and the job held against a
benchmark run size by size."""
from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from click.testing import CliRunner
from inspector_records import coll_perf, job_from_run, line, p2p_perf
from per_rank_runs import write_run

from allreduce_bench.cli import main
from allreduce_bench.core.metrics import busbw_GBps
from allreduce_bench.core.results.load import load_results, load_samples
from allreduce_bench.interop import job_vs_benchmark


def _job(folder, layout="v4", verbose=False, algo=None):
    """Two processes (ranks 0, 1 of a 2-rank communicator) on two hosts: 3 AllReduce calls of
    1 MiB and 2 of 64 MiB, rank 1 slower in each."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, host in ((0, "gpu-a"), (1, "gpu-b")):
        lines = [line("0x5f3e9a1c7b2d4e", rank, 2, host, coll_perf("all_reduce", sn, size, 2, time + 5 * rank,
                                                                     verbose, algo), layout)
                 for sn, (size, time) in enumerate([(1 << 20, 13), (1 << 20, 15), (1 << 20, 14),
                                                    (1 << 26, 262), (1 << 26, 270)])]
        (folder / f"{host}-pid{4000 + rank}.log").write_text("\n".join(lines) + "\n")
    return folder


def _import(tmp_path, *paths):
    result = CliRunner().invoke(main, ["import", *map(str, paths), "--out", str(tmp_path / "out")])
    return result, tmp_path / "out" / (paths[0].name if paths[0].is_dir() else paths[0].name.split(".")[0])


def test_v4_records_become_one_row_per_collective_size_and_communicator_size(tmp_path):
    result, run = _import(tmp_path, _job(tmp_path / "nccl-inspector-1234"))
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # lines wrapped to the terminal
    assert "10 records of 2 communicator rank(s) on 2 host(s)" in said and "5 calls in 2 rows" in said
    rows = load_results(run, explain_skips=False).sort_values("size_bytes")
    assert list(rows["benchmark"]) == ["job", "job"] and list(rows["samples"]) == [3, 2]
    small = rows.iloc[0]
    assert small["time_us_median"] == 19.0  # each call lasts as long as its slowest rank: 18, 20, 19
    assert small["busbw_GBps"] == pytest.approx(busbw_GBps(1 << 20, 19.0, 2, "all_reduce"))
    assert (small["hosts"], small["ranks"], small["world_size"], small["operation"]) == ("gpu-a,gpu-b", "0-1", 2,
                                                                                          "all_reduce")
    assert rows.iloc[1]["time_us_p99"] == pytest.approx(274.92)  # calls 267, 275
    samples = load_samples(run)
    assert len(samples) == 10 and set(samples["rank"]) == {0, 1} and set(samples["operation"]) == {"all_reduce"}


@pytest.mark.parametrize("layout", ["older", "flat"])
def test_the_older_and_the_flat_layout_read_the_same(tmp_path, layout):
    _, v4 = _import(tmp_path / "a", _job(tmp_path / "a" / "v4"))
    result, other = _import(tmp_path / "b", _job(tmp_path / "b" / layout, layout=layout))
    assert result.exit_code == 0, result.output
    columns = ["size_bytes", "samples", "time_us_median", "busbw_GBps", "hosts", "ranks"]
    pd.testing.assert_frame_equal(load_results(v4, explain_skips=False)[columns],
                                  load_results(other, explain_skips=False)[columns])


def test_verbose_records_say_how_nccl_ran_them(tmp_path):
    result, run = _import(tmp_path, _job(tmp_path / "verbose", verbose=True, algo="RING"))
    assert result.exit_code == 0, result.output
    choices = json.loads((run / "meta.json").read_text())["nccl_choices"]
    assert choices[f"all_reduce {1 << 26} B N=2"] == {"RING/SIMPLE 2 channels": 4}
    assert len(load_results(run, explain_skips=False)) == 2


def test_a_file_cut_mid_line_skips_and_counts_the_torn_line(tmp_path):
    folder = _job(tmp_path / "cut")
    log = folder / "gpu-b-pid4001.log"
    log.write_bytes(log.read_bytes()[:-40])  # NCCL was writing the last record
    result, run = _import(tmp_path, folder)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # lines wrapped to the terminal
    assert "skipped 1 line(s)" in said and "gpu-b-pid4001.log:5: not a whole JSON record" in said
    meta = json.loads((run / "meta.json").read_text())
    assert meta["imported"]["skipped"] == [{"file": str(log), "line": 5, "why": "not a whole JSON record (a line "
                                                                                "cut short?)"}]
    assert meta["imported"]["records"] == 9 and len(load_samples(run)) == 9


def test_a_mixture_of_communicators(tmp_path):
    """One process per rank of a 4-rank data-parallel communicator, each also in a 2-rank
    tensor-parallel one, their records interleaved in each process's file as dumps write them."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    for rank in range(4):
        lines = []
        for sn in range(3):
            lines.append(line("0x1a2b3c4d5e6f70" if rank < 2 else "0x1a2b3c4d5e6f71", rank % 2, 2, "gpu-a",
                              coll_perf("all_gather", sn, 1 << 22, 2, 22 + sn)))
            lines.append(line("0x5f3e9a1c7b2d4e", rank, 4, "gpu-a", coll_perf("all_reduce", sn, 1 << 26, 4, 300)))
        (folder / f"gpu-a-pid{4000 + rank}.log").write_text("\n".join(lines) + "\n")
    result, run = _import(tmp_path, folder)
    assert result.exit_code == 0, result.output
    rows = load_results(run, explain_skips=False).set_index("collective")
    assert rows.loc["all_gather", "world_size"] == 2 and rows.loc["all_gather", "samples"] == 6  # 2 comms x 3
    assert rows.loc["all_gather", "size_bytes"] == 1 << 22  # 2 ranks x their 2 MiB parts
    assert rows.loc["all_reduce", "world_size"] == 4 and rows.loc["all_reduce", "samples"] == 3
    comms = json.loads((run / "meta.json").read_text())["communicators"]
    assert [(c["n_ranks"], c["ranks"], c["calls"]) for c in comms] == [
        (2, "0-1", {"all_gather": 3}), (2, "0-1", {"all_gather": 3}), (4, "0-3", {"all_reduce": 3})]


def test_payload_only_lines_and_gz(tmp_path):
    """v4.3: a dump_stats line carries header and metadata for the payload-only lines after it."""
    header = {"id": "0x5f3e9a1c7b2d4e", "rank": 0, "n_ranks": 2, "nnodes": 1}
    metadata = {"inspector_output_format_version": "v4.3", "hostname": "gpu-a", "pid": 1}
    lines = [json.dumps({"header": header, "metadata": metadata, "dump_stats": {"coll_records": 2}})]
    lines += [json.dumps({"coll_perf": coll_perf("all_reduce", sn, 1 << 20, 2, 13)}) for sn in range(2)]
    lines.append(json.dumps({"header": header, "metadata": metadata, "proxy_trace": {}}))
    path = tmp_path / "gpu-a-pid1.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    result, run = _import(tmp_path, path)
    assert result.exit_code == 0, result.output
    assert "not read: 1 dump_stats records, 1 proxy_trace records" in result.output
    assert load_results(run, explain_skips=False)["samples"].tolist() == [2]


def test_send_recv_records_are_the_jobs_sendrecv_rows(tmp_path):
    """A pipeline-parallel job's Send/Recv (p2p_perf): rows of sendrecv, busbw = algbw, a call as
    long as its slowest rank; a file of P2P records only is a job, not "no records"."""
    folder = tmp_path / "pp"
    folder.mkdir()
    for rank, host in ((0, "gpu-a"), (1, "gpu-b")):
        records = [p2p_perf("Send" if rank == 0 else "Recv", sn, 1 - rank, 1 << 24, time + 10 * rank)
                   for sn, time in enumerate([400, 420, 410])]
        (folder / f"{host}-pid{rank}.log").write_text("\n".join(
            line("0x77", rank, 2, host, perf) for perf in records) + "\n")
    result, run = _import(tmp_path, folder)
    assert result.exit_code == 0, result.output
    rows = load_results(run, explain_skips=False)
    assert list(rows["collective"]) == ["sendrecv"] and rows["samples"].tolist() == [3]
    assert rows["time_us_median"].tolist() == [420.0]  # the calls: 410, 430, 420
    assert rows["busbw_GBps"].iloc[0] == pytest.approx((1 << 24) / 420e3)


def test_bad_input_is_one_line_naming_what(tmp_path):
    folder = _job(tmp_path / "v5")
    log = folder / "gpu-a-pid4000.log"
    log.write_text(log.read_text().replace('"v4.0"', '"v5.0"'))
    result, _ = _import(tmp_path, folder)
    assert result.exit_code == 2 and "output format version 'v5.0'" in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    (tmp_path / "empty").mkdir()
    result, _ = _import(tmp_path, tmp_path / "empty")
    assert result.exit_code == 2 and "folder without NCCL Inspector files" in result.output
    prom = tmp_path / "nccl_inspector_metrics_GPU-1.prom"  # as inspector_prom.cc of NCCL 2.30 writes it
    prom.write_text('nccl_bus_bandwidth_gbs{version="v6.1",node="a",nranks="8",collective="AllReduce",'
                    'message_size="2-3MB",algo_proto="RING_LL128"} 120.5\n')
    result, _ = _import(tmp_path, prom)
    assert result.exit_code == 2 and "per message-size range" in result.output and result.output.count("\n") == 1
    torn = tmp_path / "torn.log"
    torn.write_text(line("0x1", 0, 2, "h", coll_perf("all_reduce", 0, 1 << 20, 2, 13))[:50])
    result, _ = _import(tmp_path, torn)
    assert result.exit_code == 2 and result.output.count("\n") == 1  # no record at all: not a job


@pytest.mark.parametrize("slower, share", [(2.0, 0.5), (1.0, 1.0)])
def test_the_job_as_a_share_of_the_benchmark(tmp_path, slower, share):
    bench = write_run(tmp_path / "bench", [(c, "native", False) for c in ("all_reduce", "all_gather", "broadcast")],
                      sizes=(4096, 65536, 1 << 20))
    folder = job_from_run(bench, tmp_path / "job", slower)
    result, job = _import(tmp_path, folder)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["compare", str(bench), str(job), "--out-dir", str(tmp_path / "view")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "view" / "job_vs_benchmark.csv")
    assert len(table) == 3 * 2 * 3 and set(table["bench_how"]) == {"measured"}
    assert table["share"].between(share - 0.02, share + 0.02).all(), result.output
    assert f"{share:.0%} of the benchmark's" in result.output
    assert (tmp_path / "view" / "job_vs_benchmark.png").stat().st_size > 0


def test_sizes_between_measured_ones_are_interpolated_and_others_not_extrapolated():
    bench = pd.DataFrame({"benchmark": "allreduce", "collective": "all_reduce", "algorithm": ["native", "native",
                          "ring"], "world_size": 4, "size_bytes": [1 << 20, 1 << 24, 1 << 22],
                          "time_us_median": [100.0, 1600.0, 1.0], "busbw_GBps": [1.0, 1.0, 100.0]})
    job = pd.DataFrame({"benchmark": "job", "collective": ["all_reduce"] * 3 + ["all_gather"],
                        "world_size": 4, "size_bytes": [1 << 22, 1 << 26, 1 << 20, 1 << 20], "samples": 5,
                        "time_us_median": 800.0, "busbw_GBps": 1.0})
    table = job_vs_benchmark.compare_job(bench, job).set_index(["collective", "size_bytes"])
    middle = table.loc[("all_reduce", 1 << 22)]
    assert middle["bench_how"] == "interpolated" and middle["bench_us"] == pytest.approx(400.0)  # log-log
    assert middle["bench_algorithm"] == "native" and middle["share"] == pytest.approx(
        1.0 / busbw_GBps(1 << 22, 400.0, 4, "all_reduce"))
    assert table.loc[("all_reduce", 1 << 26), "bench_how"].startswith("outside the measured 1M-16M")
    assert table.loc[("all_gather", 1 << 20), "bench_how"] == "not measured"
    text = job_vs_benchmark.format_table(table.reset_index())
    assert "allreduce-bench run --collectives all_gather --world-sizes 4" in text
