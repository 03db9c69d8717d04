"""`export --format nccl-tests-json`: every key nccl-tests' writer emits, with its meanings and
spelling, and `import` giving back the same sizes, times, busbw and samples."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from per_rank_runs import write_run

from allreduce_bench.cli import main
from allreduce_bench.core.metrics import COLLECTIVES, busbw_GBps
from allreduce_bench.core.results.load import load_results, load_samples
from allreduce_bench.interop import nccl_tests_format as fmt
from allreduce_bench.interop.export_nccl_tests import documents

# The keys nccl-tests 2.19.6's src/util.cu writes with -I 1 (JSON_FILE_VERSION 3), in its order:
# jsonOutputInit (356-378), writeDeviceReport (643-664, 702-724), jsonRankInfo (442-448),
# writeBenchmarkLinePreamble (461-465), writeBenchmarkLineBody (516-521), writePerIterReport
# (574-590), writeBenchmarkLineTerminator (473-474), writeResultFooter (783-791), writeErrors
# (846), jsonOutputFinalize (392).
TOP = ["version", "start_time", "args", "env", "nccl_version", "config", "results", "out_of_bounds",
       "average_bus_bandwidth", "errors", "end_time"]
CONFIG = ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "warmup_iters", "iterations",
          "aggregated_iterations", "validation", "graph", "blocking_collectives", "per_iter_timing",
          "per_iter_skip", "parallel_init", "devices"]
DEVICE = ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"]
RESULT = ["size", "count", "type", "redop", "root", "out_of_place", "out_of_place_per_iter", "in_place",
          "in_place_per_iter", "actual_iterations", "experiment_name"]
BODY = ["time", "alg_bw", "bus_bw", "nwrong"]
PER_ITER = ["skipped_iterations", "min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us",
            "cv_pct", "times_us", "per_process_max_times_us"]
FOOTER = {"out_of_bounds": ["count", "okay"], "average_bus_bandwidth": ["bandwidth", "okay"]}
EVERY = [(c, "native", c in ("all_gather", "reduce_scatter")) for c in COLLECTIVES]
HALF_UNIT = 0.5e-6 + 1e-9  # %lf keeps six decimals (and a float of 1e4 us is exact to ~2e-12)


def _exported(tmp_path, plan=EVERY, **kwargs):
    run = write_run(tmp_path / "run", plan, **kwargs)
    result = CliRunner().invoke(main, ["export", str(run), "--format", "nccl-tests-json", "--out",
                                       str(tmp_path / "json")])
    assert result.exit_code == 0, result.output
    return run, {p.name: p for p in (tmp_path / "json").glob("*.json")}


def test_every_key_the_writer_emits_in_its_order(tmp_path):
    run, files = _exported(tmp_path)
    assert len(files) == len(COLLECTIVES) * 2  # one per collective, algorithm, world size, dtype
    both = json.loads(files["all_gather_perf-native-n4-float32.json"].read_text())
    assert list(both) == TOP and list(both["config"]) == CONFIG
    assert [list(d) for d in both["config"]["devices"]] == [DEVICE] * 4
    for entry in both["results"]:
        assert list(entry) == RESULT
        assert list(entry["out_of_place"]) == list(entry["in_place"]) == BODY
        assert list(entry["out_of_place_per_iter"]) == list(entry["in_place_per_iter"]) == PER_ITER
        lists = entry["in_place_per_iter"]["per_process_max_times_us"]
        assert len(lists) == 4 and all(len(r) == entry["actual_iterations"] for r in lists)
        assert entry["in_place_per_iter"]["times_us"] == [max(c) for c in zip(*lists)]
    assert {k: list(both[k]) for k in FOOTER} == FOOTER
    assert both["errors"] == [""] and both["version"] == 3 and both["config"]["per_iter_timing"] == "true"


def test_a_half_not_measured_is_null_as_the_writer_writes_it(tmp_path):
    run, files = _exported(tmp_path)
    in_place = json.loads(files["all_reduce_perf-native-n2-float32.json"].read_text())["results"][0]
    assert in_place["out_of_place"] is None and "out_of_place_per_iter" not in in_place  # torch's is in place
    assert list(in_place) == [k for k in RESULT if k != "out_of_place_per_iter"]
    out = json.loads(files["alltoall_perf-native-n2-float32.json"].read_text())["results"][0]
    assert out["in_place"] is None and "in_place_per_iter" not in out
    rooted = json.loads(files["broadcast_perf-native-n2-float32.json"].read_text())["results"][0]
    assert (rooted["root"], rooted["redop"], in_place["root"], in_place["redop"]) == ("     0", "none", "    -1", "sum")


def test_spelt_as_the_writer_spells_it(tmp_path):
    run, files = _exported(tmp_path)
    text = files["reduce_scatter_perf-native-n4-float32.json"].read_text()
    assert not re.search(r"\s", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text))  # one line, no space outside strings
    assert re.search(r'"time":\d+\.\d{6},"alg_bw":\d+\.\d{6}', text) and '"nwrong":0.000000' in text
    assert '"okay":"true"' in text and '"okay":"unchecked"' in text and '"blocking_collectives":"true"' in text
    assert fmt.encode({"a/b": [1, 2.5, float("nan"), False, None]}) == '{"a\\/b":[1,2.500000,"nan","false",null]}'
    document = json.loads(text)
    assert document["args"][:7] == ["reduce_scatter_perf", "-b", "4096", "-e", "262144", "-f", "64"]
    assert "ALLREDUCE_BENCH_ALGORITHM=native" in document["env"] and "GLOO_SOCKET_IFNAME=lo" in document["env"]
    assert document["start_time"] == "2026-01-02 03:04:05" and document["config"]["devices"][3]["pid"] == 104


def test_times_bandwidths_and_average_have_nccl_tests_meanings(tmp_path):
    run, files = _exported(tmp_path)
    rows = load_results(run, explain_skips=False)
    row = rows[(rows["collective"] == "reduce_scatter") & (rows["world_size"] == 4)
               & (rows["benchmark"] == "reduce_scatter")].sort_values("size_bytes").iloc[-1]
    document = json.loads(files["reduce_scatter_perf-native-n4-float32.json"].read_text())
    body = document["results"][-1]["out_of_place"]
    assert body["time"] == pytest.approx(row["time_us_rank_mean"], abs=HALF_UNIT)  # -a 1: the rank mean
    assert body["bus_bw"] == pytest.approx(busbw_GBps(row["size_bytes"], row["time_us_rank_mean"], 4,
                                                      "reduce_scatter"), abs=HALF_UNIT)
    halves = [r[h]["bus_bw"] for r in document["results"] for h in ("out_of_place", "in_place")]
    assert document["average_bus_bandwidth"]["bandwidth"] == pytest.approx(sum(halves) / 4, abs=1e-6)


def test_per_iteration_statistics_are_compute_iter_stats():
    times = [float(t) for t in range(20, 0, -1)]  # 20..1
    stats = fmt.iter_stats(times)
    assert (stats["min_us"], stats["max_us"], stats["p50_us"]) == (1.0, 20.0, 11.0)  # sorted[n/2]
    assert (stats["p95_us"], stats["p99_us"]) == (19.0, 20.0)  # nearest rank: ceil(n*p/100)-1
    assert stats["avg_us"] == 10.5 and stats["stdev_us"] == pytest.approx((399 / 12) ** 0.5)  # divided by n
    assert stats["cv_pct"] == pytest.approx(stats["stdev_us"] / 10.5 * 100)
    assert fmt.iter_stats([5.0])["p95_us"] == 5.0


def test_one_process_has_no_per_process_lists():
    rows = pd.DataFrame([{"source": "s", "run_id": "r", "benchmark": "allreduce", "collective": "all_reduce",
                          "algorithm": "native", "world_size": 1, "dtype": "float32", "size_bytes": 8, "count": 2,
                          "samples": 2, "loops": 1, "warmup": 0, "wrong": 0, "time_us_rank_mean": 4.0,
                          "timestamp": "2026-01-02T03:04:05+00:00"}])
    samples = pd.DataFrame({"source": "s", "run_id": "r", "benchmark": "allreduce", "algorithm": "native",
                            "world_size": 1, "size_bytes": 8, "rank": 0, "sample": [0, 1], "host": "h",
                            "time_us": [3.0, 5.0]})
    (name, document), = documents(rows, samples, {})
    block = document["results"][0]["in_place_per_iter"]
    assert block["times_us"] == [3.0, 5.0] and "per_process_max_times_us" not in block


def round_trip_differences(run, imported) -> dict:
    """What `import` of the exported files gives back differently from the run, beyond the six
    decimals the files print: rows (sizes, counts, dtype, nccl-tests' time and busbw, the
    median, #wrong) and samples (every rank's time per call in every sample, its host)."""
    key = ["benchmark", "algorithm", "world_size", "size_bytes"]
    original, back = load_results(run, explain_skips=False), load_results(imported, explain_skips=False)
    rows = original.merge(back, on=key, how="outer", suffixes=("", "_back"), indicator=True)
    busbw = pd.Series([busbw_GBps(r.size_bytes, r.time_us_rank_mean, r.world_size, r.collective)
                       for r in rows.itertuples()])
    found = {"rows missing": int((rows["_merge"] != "both").sum()),
             "count": int((rows["count"] != rows["count_back"]).sum()),
             "dtype": int((rows["dtype"] != rows["dtype_back"]).sum()),
             "time": int(((rows["time_us_rank_mean"] - rows["time_us_rank_mean_back"]).abs() > HALF_UNIT).sum()),
             "busbw": int(((busbw - rows["busbw_GBps_back"]).abs() > HALF_UNIT).sum()),
             "median": int(((rows["time_us_median"] - rows["time_us_median_back"]).abs() > HALF_UNIT).sum()),
             "wrong": int((rows["wrong"] != rows["wrong_back"]).sum())}
    samples = load_samples(run).merge(load_samples(imported), on=key + ["rank", "sample"], how="outer",
                                      suffixes=("", "_back"), indicator=True)
    found["samples missing"] = int((samples["_merge"] != "both").sum())
    found["sample time"] = int(((samples["time_us"] - samples["time_us_back"]).abs() > HALF_UNIT).sum())
    found["sample host"] = int((samples["host"] != samples["host_back"]).sum())
    return found


def test_import_of_the_export_gives_back_every_collective(tmp_path):
    run, files = _exported(tmp_path)
    result = CliRunner().invoke(main, ["import", *map(str, files.values()), "--out", str(tmp_path / "back")])
    assert result.exit_code == 0, result.output
    back = load_results(tmp_path / "back", explain_skips=False)
    assert set(back["collective"]) == set(COLLECTIVES) and set(back["algorithm"]) == {"native"}
    differences = round_trip_differences(run, tmp_path / "back")
    assert differences == dict.fromkeys(differences, 0)


def test_import_of_the_export_folder_reads_every_file(tmp_path):
    run, files = _exported(tmp_path)
    folder = next(iter(files.values())).parent
    result = CliRunner().invoke(main, ["import", str(folder), "--out", str(tmp_path / "back")])
    assert result.exit_code == 0, result.output
    assert set(load_results(tmp_path / "back", explain_skips=False)["collective"]) == set(COLLECTIVES)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["import", str(empty), "--out", str(tmp_path / "none")])
    assert result.exit_code == 2 and "nccl-tests -J files (*.json)" in result.output


def test_nothing_to_export_is_one_line(tmp_path):
    run = write_run(tmp_path / "run", [("all_reduce", "native", False)])
    rows = pd.read_csv(run / "results.csv").assign(benchmark="links")
    rows.to_csv(run / "results.csv", index=False)
    (run / "results.parquet").unlink()
    result = CliRunner().invoke(main, ["export", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "no collective rows" in result.output


@pytest.mark.slow
def test_a_real_run_of_every_collective_and_algorithm_round_trips(tmp_path):
    """`run --collectives all --algos all --quick` on this machine: every file exported, read back
    with 0 differences; the floor fails above what it reached (a line per table) and passes
    below; the job view reads 50% and 100% of its own calls slowed 2x and as they are."""
    from inspector_records import job_from_run
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--collectives", "all", "--algos",
                           "all", "--quick", "--no-plot", "--out", str(out), "--min-busbw", "1000GB/s"],
                          capture_output=True, text=True, timeout=900)
    rows = load_results(out, explain_skips=False)
    tables = rows.groupby(["collective", "algorithm", "world_size"]).ngroups
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count("FAILED: ") == tables and done.stdout.count("# Avg bus bandwidth") == tables
    runner = CliRunner()
    assert runner.invoke(main, ["export", str(out), "--out", str(tmp_path / "json")]).exit_code == 0
    files = sorted((tmp_path / "json").glob("*.json"))
    assert len(files) == tables
    assert runner.invoke(main, ["import", *map(str, files), "--out", str(tmp_path / "back")]).exit_code == 0
    differences = round_trip_differences(out, tmp_path / "back")
    assert differences == dict.fromkeys(differences, 0)
    for slower, share in ((2.0, 0.5), (1.0, 1.0)):
        job_from_run(out, tmp_path / f"job{slower}", slower)
        result = runner.invoke(main, ["import", str(tmp_path / f"job{slower}"), "--out", str(tmp_path / "jobs")])
        assert result.exit_code == 0, result.output
        result = runner.invoke(main, ["compare", str(out), str(tmp_path / "jobs" / f"job{slower}"),
                                      "--out-dir", str(tmp_path / f"view{slower}")])
        table = pd.read_csv(tmp_path / f"view{slower}" / "job_vs_benchmark.csv")
        # the job's calls are whole µs (Inspector truncates): up to 1 µs faster, 2.5% of a 40 µs call
        truncated = share * (slower * table["bench_us"]) / (slower * table["bench_us"] - 1)
        assert len(table) > 0 and (table["share"] >= share - 0.02).all(), result.output
        assert (table["share"] <= truncated + 0.02).all(), result.output


def test_a_second_export_into_its_folder_refuses_and_force_replaces_only_the_exports(tmp_path):
    examples, out, runner = Path(__file__).resolve().parents[2] / "results", tmp_path / "json", CliRunner()
    assert runner.invoke(main, ["export", str(examples / "example-cpu-gloo"), "--out", str(out)]).exit_code == 0
    first = sorted(p.name for p in out.iterdir())
    (out / "notes.txt").write_text("mine")
    result = runner.invoke(main, ["export", str(examples / "example-emulated-2x2"), "--out", str(out)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "is not empty" in result.output and "--force" in result.output
    assert sorted(p.name for p in out.iterdir()) == sorted([*first, "notes.txt"])  # nothing written
    result = runner.invoke(main, ["export", str(examples / "example-emulated-2x2"), "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    second = {p.name for p in out.iterdir()} - {"notes.txt"}
    assert second and not second & set(first) and all("-n4-" in name for name in second)
    assert (out / "notes.txt").read_text() == "mine"  # a user's file is never an export's


def test_export_takes_several_runs(tmp_path):
    examples = Path(__file__).resolve().parents[2] / "results"
    result = CliRunner().invoke(main, ["export", str(examples / "example-cpu-gloo"),
                                       str(examples / "example-emulated-2x2"), "--out", str(tmp_path / "json")])
    assert result.exit_code == 0, result.output
    names = [p.name for p in (tmp_path / "json").iterdir()]
    assert {name.split("-")[1] for name in names} == {"cpu", "emulated"} and len(names) == 8
