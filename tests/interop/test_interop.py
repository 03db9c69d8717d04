"""Importing other tools' output: the ten published logs (read from the shared folder, never
copied here) and synthetic edge cases of every format; the import command end to end."""
# ruff: noqa: E501  (fixtures are the tools' output at its own width)
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from shared_data import NCCL_INFO, PUBLISHED_LOGS, needs

from allreduce_bench import interop
from allreduce_bench.cli import main
from allreduce_bench.core.results.load import load_results, load_samples
from allreduce_bench.interop.lines import ParseError

LOGS = PUBLISHED_LOGS
needs_logs = needs(LOGS)
ALLREDUCE_TEXT = ["01-", "02-", "03-", "04-", "09-", "10-"]
ALLREDUCE_PYBENCH = ["13-", "14-"]
ROW = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<stdout>:\s?)?\s*(\d+)\s+(\d+)\s+\w+\s")


def _log(prefix: str) -> Path:
    return next(LOGS.glob(f"{prefix}*.txt"))


def _read(path: Path):
    return [interop.settle(run, str(path)) for run in interop.read_file(path)]


@needs_logs
@pytest.mark.parametrize("prefix", ALLREDUCE_TEXT)
def test_every_nccl_tests_allreduce_row_with_its_printed_busbw(prefix):
    path = _log(prefix)
    lines = path.read_text().splitlines()
    header = next(line for line in lines if re.search(r"#\s+size\s+count", line))
    busbw_at = header.replace("#", " ").split().index("busbw")  # the out-of-place busbw column
    expected = [i + 1 for i, line in enumerate(lines) if ROW.match(line)]
    (run,) = _read(path)
    assert run.collective == "all_reduce"
    out_of_place = [r for r in run.rows if not r["in_place"]]
    assert [r["source_line"] for r in out_of_place] == expected
    for row in out_of_place:
        printed = lines[row["source_line"] - 1].split()[busbw_at]
        assert row["busbw_printed"] == printed
        assert row["busbw_GBps"] == pytest.approx(float(printed), abs=0.005)
    assert len(run.rows) == 2 * len(expected)


@needs_logs
@pytest.mark.parametrize("prefix,world_size,hosts", [("01-", 16, 2), ("02-", 16, 16), ("03-", 8, 1),
                                                      ("04-", 16, None), ("09-", 8, 2), ("10-", 2, 2)])
def test_ranks_hosts_and_versions_into_meta(prefix, world_size, hosts):
    (run,) = _read(_log(prefix))
    assert run.world_size == world_size
    assert (len(set(run.meta["hostnames"])) if "hostnames" in run.meta else None) == hosts
    if prefix == "01-":
        assert run.meta["versions"]["nccl"] == "2.4.6" and run.meta["settings"]["iters"] == 100
    if prefix == "10-":
        assert run.meta["versions"]["nccl"] == "2.30.7" and run.meta["nccl_tests_version"] == "2.18.2"


@needs_logs
@pytest.mark.parametrize("prefix,world_size", [("13-", 4), ("14-", 32)])
def test_all_reduce_bench_tables(prefix, world_size):
    path = _log(prefix)
    (run,) = _read(path)
    table = [line for line in path.read_text().splitlines() if re.match(r"\|\s+\d", line)]
    assert run.collective == "all_reduce" and run.world_size == world_size
    assert len(run.rows) == len(table) == 20
    first = table[0].split("|")
    assert run.rows[0]["busbw_printed"] == first[2].strip()  # busbw before algbw
    assert run.rows[0]["size_bytes"] == 32 * 1024
    assert run.rows[-1]["size_bytes"] == 16 * 2**30


@needs_logs
@pytest.mark.parametrize("prefix,collective", [("11-", "all_gather"), ("12-", "reduce_scatter")])
def test_other_collectives_are_imported_as_what_they_are(prefix, collective):
    (run,) = _read(_log(prefix))
    assert run.collective == collective and run.world_size == 8
    frame = interop.run_frame(run, "r", "t", "f")
    assert set(frame["benchmark"]) == {collective, f"{collective}-in-place"}


@needs_logs
def test_reduce_scatter_told_from_all_reduce_with_the_header_alone():
    """A gen1 reduce_scatter table has all_reduce's header: count and busbw/algbw decide."""
    text = _log("12-").read_text()
    (run,) = interop.read_text(text, "rs.txt")
    assert run.collective == "reduce_scatter" and "one rank's share" in run.why


# ---- synthetic edge cases ---------------------------------------------------------------------

GEN3 = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  1001 on     node-a device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  1002 on     node-a device  1 [0x2b] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  2001 on     node-b device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  2002 on     node-b device  1 [0x2b] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           0             0     float     sum      -1     1.50    0.00    0.00      0     0.30    0.00    0.00      0
node-a:1001:1001 [0] NCCL INFO comm 0x55 rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE
           8             2     float     sum      -1    20.10    0.00    0.00      0    19.90    0.00    0.00      0
        1024           256     float     sum      -1    21.00    0.05    0.07      0    20.50    0.05    0.07      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0233
#
"""


def _prefixed(text: str, prefix: str, crlf: bool = False) -> str:
    end = "\r\n" if crlf else "\n"
    return end.join(prefix + line for line in text.splitlines()) + end


@pytest.mark.parametrize("prefix,crlf", [("", False), ("0: ", True), ("[1,0]<stdout>:", False),
                                         ("    ", True), ("12: ", False)])
def test_prefixes_crlf_and_indentation_do_not_matter(prefix, crlf):
    (run,) = interop.read_text(_prefixed(GEN3, prefix, crlf), "x.log")
    assert run.world_size == 4 and run.meta["hostnames"].count("node-b") == 2
    assert [r["size_bytes"] for r in run.rows] == [0, 0, 8, 8, 1024, 1024]
    assert [r["wrong"] for r in run.rows] == [0] * 6
    assert run.rows[4]["busbw_printed"] == "0.07" and run.rows[5]["time_printed"] == "20.50"
    assert run.meta["settings"]["iters"] == 20 and run.meta["settings"]["warmup_iters"] == 5


def test_several_runs_pasted_in_one_file_are_several_runs():
    text = "$ mpirun -np 4 ./all_reduce_perf\n" + GEN3 + "some shell noise\n" + GEN3.replace("20.10", "30.10")
    runs = interop.read_text(text, "two.log")
    assert len(runs) == 2
    assert runs[1].rows[2]["time_us_median"] == 30.10 and runs[0].rows[2]["time_us_median"] == 20.10
    assert runs[1].first_line > runs[0].last_line


GEN_I = """\
# nccl-tests version 2.19.2 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 iters: 10 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows
#
#  Rank  0 Group  0 Pid  1 on h device  0 [0000:1b:00] NVIDIA H100
#  Rank  1 Group  0 Pid  1 on h device  1 [0000:2b:00] NVIDIA H100
#
#                                           out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)
        1024           256     float     sum      -1    10.00    0.10    0.10       0     9.00    12.00    11.90     5.00    11.00    0.09    0.09       0     9.50    13.00    12.90     4.00
        2048           512     float     sum      -1    10.50    0.20    0.20       0     9.10    12.10    12.00     5.10    11.50    0.18    0.18       0     9.60    13.10    13.00     4.10
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.1425
#
# Collective test concluded: all_reduce_perf
"""


def test_per_iteration_columns_and_version_lines():
    (run,) = interop.read_text(GEN_I, "i.log")
    assert run.collective == "all_reduce" and run.why == "named by 'all_reduce_perf'"
    assert run.meta["versions"]["nccl"] == "2.27.3" and run.meta["nccl_tests_version"] == "2.19.2"
    first = run.rows[0]
    assert (first["time_us_min"], first["time_us_max"], first["time_us_p99"], first["time_cv_pct"]) == \
        (9.0, 12.0, 11.9, 5.0)
    assert run.rows[3]["time_us_median"] == 11.5 and run.rows[3]["in_place"] is True


def test_gen1_error_column_and_validation_off():
    text = """# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 0
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
           8             2   float     sum    10.00    0.00    0.00    N/A    10.00    0.00    0.00  5e-07
          16             4   float     sum    10.00    0.00    0.00    N/A    10.00    0.00    0.00  5e-07
"""
    (run,) = interop.read_text(text, "g1.log")
    assert run.rows[0]["wrong_printed"] == "N/A" and run.rows[0].get("wrong") is None
    assert run.rows[1]["max_error"] == 5e-07 and run.rows[1]["wrong"] is None  # a max error, not #wrong


def test_a_broken_row_names_file_and_line():
    broken = GEN3.replace("1024           256     float     sum      -1    21.00    0.05    0.07      0",
                          "1024           256     float     sum      -1    21.00")
    with pytest.raises(ParseError, match=r"^bad\.log:15: a table row with"):
        interop.read_text(broken, "bad.log")
    with pytest.raises(ParseError, match=r"^bad\.log:15: .*not a number"):
        interop.read_text(GEN3.replace("21.00    0.05", "21.00    x.05"), "bad.log")
    with pytest.raises(ParseError, match=r"^empty\.txt:2: no nccl-tests"):
        interop.read_text("\nhello\n", "empty.txt")


def _json(version=1, misspelt=True, per_iter=False, program="./build/all_reduce_perf"):
    def half(time):
        body = {"time": time, "alg_bw": 0.5, "bus_bw": 0.75, "nwrong": 0.0}
        return body
    results = []
    for size, time in ((1024, 20.0), (2048, 21.0)):
        result = {"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": "    -1",
                  "out_of_place": half(time), "in_place": half(time + 1)}
        if per_iter:
            result["out_of_place_per_iter"] = {"min_us": 19.0, "max_us": 30.0, "avg_us": 21.0,
                                               "p50_us": 20.0, "p95_us": 25.0, "p99_us": 29.0,
                                               "stdev_us": 1.0, "cv_pct": 4.0,
                                               "times_us": [time + i % 3 for i in range(10)]}
        result["actual_iterations"] = 10
        result["experiment_name"] = ""
        results.append(result)
    document = {"version": version, "start_time": "2025-06-01 10:00:00", "args": [program, "-b", "1K"],
                "env": ["NCCL_DEBUG=INFO"], "nccl_version": 22703,
                "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1024, "maximum_bytes": 2048,
                           "step_factor": 2, "warmup_iters": 5, "iterations": 10,
                           "blocking_collectives": "false", "parallel_init": "false",
                           "devices": [{"rank": r, "group": 0, "pid": 1, "hostname": f"n{r // 2}",
                                        "device": r % 2, "device_hex": "0000:1b:00",
                                        "device_info": "NVIDIA H100"} for r in range(4)]},
                "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
                ("average_bus_bandwidith" if misspelt else "average_bus_bandwidth"):
                    {"bandwidth": 0.75, "okay": "unchecked"}}
    return json.dumps(document, indent=1)


@pytest.mark.parametrize("version,misspelt", [(1, True), (2, False), (3, False)])
def test_nccl_tests_json(version, misspelt):
    (run,) = interop.read_text(_json(version, misspelt, per_iter=version >= 2), "r.json")
    interop.settle(run, "r.json")
    assert run.collective == "all_reduce" and run.world_size == 4
    assert run.meta["avg_busbw_GBps"] == 0.75 and run.meta["versions"]["nccl"] == "2.27.3"
    assert run.meta["settings"]["blocking_collectives"] is False
    assert run.meta["command"].startswith("./build/all_reduce_perf")
    assert [r["root"] for r in run.rows] == [-1] * 4
    if version >= 2:
        samples = interop.samples_frame(run, "id")
        assert len(samples) == 20 and set(samples["benchmark"]) == {"allreduce"}
        assert run.rows[0]["time_us_min"] == 19.0
    else:
        assert run.samples is None


def test_json_unknown_version_and_broken_json():
    with pytest.raises(ParseError, match="version 9"):
        interop.read_text(_json().replace('"version": 1', '"version": 9'), "v.json")
    with pytest.raises(ParseError, match=r"^t\.json:\d+: not valid JSON"):
        interop.read_text(_json()[:-30], "t.json")


PARAM = """\
[Rank   0] allSizes: [1024, 2048] local_rank: 0 element_size: 4
\t collective=all_reduce, src_ranks=[], dst_ranks=[]

\tCOMMS-RES       size (B)  nElementsPerRank   Latency(us):p50         p75         p95         Min         Max    AlgBW(GB/s)   BusBW(GB/s)
\tCOMMS-RES-all_reduce           1024               256              30.1        31.0        35.2        29.0        40.0          0.034         0.060
\tCOMMS-RES-all_reduce           2048               512              31.0        32.0        36.0        30.0        41.0          0.066         0.116
"""


def test_param_comms_lines():
    (run,) = interop.read_text(PARAM, "param.log")
    interop.settle(run, "param.log")
    assert run.source_tool == "param-comms" and run.collective == "all_reduce"
    assert run.world_size == 8  # 0.116 / 0.066 = 1.76 ~ 2 x 7 / 8
    assert run.rows[0]["time_us_median"] == 30.1 and run.rows[0]["time_us_p95"] == 35.2
    with pytest.raises(ParseError, match=r"param\.log:5: a COMMS-RES line with 3 values"):
        interop.read_text(PARAM.replace("1024               256              30.1        31.0        35.2        29.0        40.0          0.034", "1024 256"), "param.log")


@pytest.mark.slow
@pytest.mark.wide_console("the readers' in-place note (core/results/load.py skipped_note)")
def test_import_command_writes_runs_every_command_reads(tmp_path):
    log = tmp_path / "two.log"
    log.write_text(GEN3 + GEN3)
    out = tmp_path / "imported"
    result = CliRunner().invoke(main, ["import", str(log), "--out", str(out), "--tag", "h100"])
    assert result.exit_code == 0, result.output
    runs = sorted(p.name for p in out.iterdir())
    assert runs == ["two-1", "two-2"]
    meta = json.loads((out / "two-1" / "meta.json").read_text())
    assert meta["world_size"] == 4 and meta["imported"]["tool"] == "nccl-tests"
    assert meta["imported"]["lines"][0] == 1
    frame = load_results(out, explain_skips=False)
    assert len(frame) == 12 and set(frame["tag"]) == {"h100"}
    assert frame["run_id"].nunique() == 2
    assert (out / "two-1" / "results.parquet").exists()
    assert load_samples(out).empty
    parquet = pd.read_parquet(out / "two-1" / "results.parquet")
    assert list(parquet["busbw_printed"]) == ["0.00", "0.00", "0.00", "0.00", "0.07", "0.07"]
    report = CliRunner().invoke(main, ["report", str(out / "two-1"), "--out-dir", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "r" / "report.md").exists()


def test_import_of_unreadable_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text(GEN3.replace("21.00    0.05", "21.00    zz"))
    result = CliRunner().invoke(main, ["import", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{bad}:15:" in lines[0], result.output
    assert not (tmp_path / "o" / "bad").exists()


def test_report_shows_another_collective_in_its_own_section(tmp_path):
    text = GEN3.replace("float     sum      -1", "float     sum       0").replace(
        "Rank  3 Group", "Rank  3 Group")
    log = tmp_path / "rs.log"
    log.write_text("# Collective test starting: reduce_scatter_perf\n" + text)
    out = tmp_path / "o"
    assert CliRunner().invoke(main, ["import", str(log), "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(main, ["report", str(out), "--out-dir", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "in-place rows" not in result.output  # both halves are lines of the collectives' table
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## Other collectives" in report and "| reduce_scatter | native |" in report
    assert "| reduce_scatter | native (in place) |" in report


def test_imported_json_with_per_iteration_times_compares_with_significance(tmp_path):
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    fast.write_text(_json(2, False, per_iter=True))
    document = json.loads(_json(2, False, per_iter=True))
    for result in document["results"]:
        result["out_of_place_per_iter"]["times_us"] = [2 * t for t in result["out_of_place_per_iter"]["times_us"]]
    slow.write_text(json.dumps(document))
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["import", str(fast), str(slow), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "with per-iteration samples" in result.output
    assert len(load_samples(out / "fast")) == 20
    result = CliRunner().invoke(main, ["compare", str(out / "fast"), str(out / "slow"),
                                       "--out-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "c" / "compare.csv")
    out_of_place = table[table["benchmark"] == "allreduce"]
    assert out_of_place["base_samples"].tolist() == [10, 10] and out_of_place["significant"].all()
    assert table[table["benchmark"] == "allreduce-in-place"]["significant"].isna().all()  # no samples


# ---- several runs in one stream, torn rows, nothing lost ----------------------------------------

def _interleave(first: list[str], second: list[str], seed: int | None) -> str:
    """Two outputs mixed line by line (seed None: alternately), each in its own order."""
    import random
    pick = random.Random(seed)
    out, a, b = [], list(first), list(second)
    while a or b:
        take_a = a and (not b or (pick.random() < 0.5 if seed is not None else len(a) >= len(b)))
        out.append((a if take_a else b).pop(0))
    return "\n".join(out) + "\n"


def _other_host(lines: list[str], host: str, new: str) -> list[str]:
    return [line.replace(host, new) for line in lines]


@needs_logs
@pytest.mark.parametrize("seed", [None, 1, 7])
def test_two_single_host_runs_printed_into_one_stream_are_two_runs(seed, tmp_path):
    """nccl-tests without MPI on two hosts (nccl-tests#213): 03's real output from two hosts."""
    lines = _log("03-").read_text().splitlines()
    other = _other_host(lines, "localhost", "node-b")
    text = _interleave(lines, other, seed)
    runs = [interop.settle(r, "mixed.log") for r in interop.read_text(text, "mixed.log")]
    assert [len(r.rows) for r in runs] == [68, 68] and [r.world_size for r in runs] == [8, 8]
    assert [set(r.meta["hostnames"]) for r in runs] == [{"localhost"}, {"node-b"}]
    printed = [i + 1 for i, line in enumerate(text.splitlines()) if ROW.match(line)]
    assert sorted(r["source_line"] for run in runs for r in run.rows[::2]) == printed  # every row, once
    for run in runs:
        sizes = [r["size_bytes"] for r in run.rows[::2]]
        assert sizes == sorted(sizes) and sizes.count(0) == 2 and not run.skipped
        assert "2 independent runs of 8 ranks, one per host (localhost, node-b)" in run.notes[0]
    log = tmp_path / "mixed.log"
    log.write_text(text)
    result = CliRunner().invoke(main, ["import", str(log), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0 and result.output.count("34 rows") == 2, result.output
    assert "a build without MPI started on several hosts?" in " ".join(result.output.split())  # wrapped


def test_two_runs_printed_at_once_without_the_shared_logs():
    other = GEN3.replace("node-a", "node-c").replace("node-b", "node-d").replace("20.10", "40.10")
    runs = interop.read_text(_interleave(GEN3.splitlines(), other.splitlines(), None), "m.log")
    assert [len(r.rows) for r in runs] == [6, 6] and [r.rows[2]["time_us_median"] for r in runs] == [20.10, 40.10]
    assert "2 runs of 4 ranks printed into one stream at once" in runs[0].notes[0]


def test_rows_that_fit_no_run_are_refused_in_one_line(tmp_path):
    other = GEN3.replace("node-a", "node-c")
    text = _interleave(GEN3.splitlines(), other.splitlines(), None)
    stray = "           8             2     float     sum      -1    20.10    0.00    0.00      0    19.90    0.00    0.00      0"
    text = text.replace("# Out of bounds values : 0 OK\n", stray + "\n# Out of bounds values : 0 OK\n", 1)
    log = tmp_path / "bad.log"
    log.write_text(text)
    result = CliRunner().invoke(main, ["import", str(log), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "fits none of them" in result.output and f"{log}:" in result.output


def test_rows_outside_a_table_are_reported_with_file_and_line(tmp_path):
    stray = "        2048           512     float     sum      -1    22.00    0.09    0.14      0    21.50    0.09    0.14      0"
    log = tmp_path / "stray.log"
    log.write_text(stray + "\n" + GEN3 + stray + "\n")
    (run,) = interop.read_file(log)
    last = len(GEN3.splitlines()) + 2
    assert run.skipped == [(1, "a result row before any table header"),
                           (last, "a result row after its table ended (# Avg bus bandwidth)")]
    result = CliRunner().invoke(main, ["import", str(log), "--out", str(tmp_path / "o")])
    assert f"{log}:1: skipped: a result row before any table header" in " ".join(result.output.split())
    meta = json.loads((tmp_path / "o" / "stray" / "meta.json").read_text())
    assert [s["line"] for s in meta["imported"]["skipped"]] == [1, last]


# nccl-info/02 (Timez-zx/nccl-tests nccl-fault.log): NCCL_DEBUG_SUBSYS=ALL writes between the
# pieces nccl-tests prints a row in; these are its lines 333-334 and the shape of what follows
TORN = """\
mew0:65704:65704 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}
        1024           256     float     sum      -1mew0:65704:65704 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x720000000 recvbuff 0x920000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d5f5ac09e0 [nranks=2] stream 0x55d5f4d50b60
mew0:65704:65704 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}
    21.00    0.05    0.07      0mew0:65704:65704 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x920000000 recvbuff 0x920000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d5f5ac09e0 [nranks=2] stream 0x55d5f4d50b60
    20.50    0.05    0.07      0
"""


def test_a_row_torn_by_nccl_lines_is_put_back_together():
    whole = "        1024           256     float     sum      -1    21.00    0.05    0.07      0    20.50    0.05    0.07      0\n"
    (run,) = interop.read_text(GEN3.replace(whole, TORN), "torn.log")
    (plain,) = interop.read_text(GEN3, "plain.log")
    assert [r["busbw_printed"] for r in run.rows] == [r["busbw_printed"] for r in plain.rows]
    assert run.rows[4]["source_line"] == 16 and not run.skipped
    assert set(run.meta["nccl"]["hosts"]) == {"node-a", "mew0"}  # `-1mew0`, `0mew0` repaired
    assert run.meta["nccl"]["hosts"]["mew0"]["lines"] == 4 and run.meta["nccl"]["lines"]["torn"] == 2
    cut = GEN3.replace(whole, "\n".join(TORN.splitlines()[:2]) + "\n").split("# Out of bounds")[0]
    (run,) = interop.read_text(cut, "cut.log")
    assert run.skipped == [(16, "a result row cut off at the end of the file (5 of 13 fields)")]


@needs_logs
def test_no_published_log_loses_a_row_and_nccl_lines_go_into_meta(tmp_path):
    for path in sorted(LOGS.glob("[01]*.txt")):
        for run in interop.read_file(path):
            assert run.skipped == [] and run.notes == [], path
    out = tmp_path / "o"
    assert CliRunner().invoke(main, ["import", str(_log("02-")), "--out", str(out)]).exit_code == 0
    meta = json.loads(next(out.glob("*/meta.json")).read_text())
    assert meta["nccl"]["lines"]["info"] == 207 and len(meta["nccl"]["hosts"]) == 16
    assert meta["environment"] == {"NCCL_TREE_THRESHOLD": "600000000"}


@needs_logs
def test_an_nccl_banner_alone_is_not_said_as_zero_hosts(tmp_path):
    result = CliRunner().invoke(main, ["import", str(_log("01-")), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0 and "16 ranks" in result.output
    assert "NCCL 2.4.6+cuda10.0: the version banner only" in result.output
    assert "0 host(s)" not in result.output and "? ranks" not in result.output
    result = CliRunner().invoke(main, ["import", str(_log("03-")), "--out", str(tmp_path / "p")])
    assert "1 host(s) (its lines do not give the world size)" in result.output


@needs(NCCL_INFO)
def test_a_log_whose_only_row_is_cut_off_is_refused_naming_it(tmp_path):
    path = next(NCCL_INFO.glob("02-*.txt"))
    result = CliRunner().invoke(main, ["import", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and f"{path}:334: no row could be imported: a result row cut off" in result.output


def test_a_torn_row_before_any_header_is_reported():
    (run,) = interop.read_text(TORN.splitlines()[1] + "\n" + GEN3, "early.log")
    assert run.skipped == [(1, "a result row before any table header")] and len(run.rows) == 6


# ---- every shared log through every reading command ------------------------------------------

def _fails(result) -> str:
    """'' when a command either succeeded or refused in one line (exit 2); else what went wrong."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"raised {type(result.exception).__name__}: {result.exception}"
    if "Traceback" in result.output:
        return "printed a traceback"
    if result.exit_code == 0:
        return ""
    if result.exit_code == 2 and len(result.output.strip().splitlines()) == 1:
        return ""
    return f"exit {result.exit_code}: {result.output.strip()[-300:]}"


@pytest.mark.slow
@needs_logs
@pytest.mark.wide_console("the readers' in-place note (core/results/load.py skipped_note); model fit's links table (model/fitting.py)")
def test_no_shared_file_gives_a_traceback_in_any_command(tmp_path):
    """`import`, `model fit` (with its figures), `plot`, `report` and `compare` (a log against
    itself) on EVERY file of the shared folder, README included: each exits 0 or refuses in one
    line. (03 has a zero-byte row: model fit's figure raised on it.)"""
    failures = []
    for path in sorted(p for p in LOGS.iterdir() if p.is_file()):
        out = tmp_path / path.stem[:2]
        steps = [["import", str(path), "--out", str(out)], ["model", "fit", str(out)],
                 ["plot", str(out), "--out-dir", str(out / "plots")],
                 ["report", str(out), "--out-dir", str(out / "plots")],
                 ["compare", str(out), str(out), "--out-dir", str(tmp_path / f"c{path.stem[:2]}")]]
        for args in steps:
            result = CliRunner().invoke(main, args)
            if _fails(result):
                failures.append(f"{path.name}: {' '.join(args[:2])}: {_fails(result)}")
            elif args[:2] == ["model", "fit"] and path.name[:3] in ("11-", "12-"):
                assert "not AllReduce" in result.output, result.output  # not AllReduce: one line
            elif args[:2] == ["model", "fit"] and path.suffix == ".txt":
                assert "against predicted time" in result.output, (path, result.output)
    assert not failures, "\n".join(failures)
