"""Hostile input and faults: every bad input is one line and exit 2, nothing torn, nothing
shared by accident (issue 10). Validation runs in-process (click's CliRunner) with the measuring
replaced by a stub that records the config: nothing starts. A few real runs cover what only a
real process shows (Ctrl-C while ranks start, stdout to /dev/full, a rank's real reason)."""
from __future__ import annotations

import datetime as dt
import errno
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allreduce_bench.cli import main
from allreduce_bench.core import errors
from allreduce_bench.core.config import DTYPES, Sampling, default_out_dir
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.launch import driver, reasons  # noqa: F401
from allreduce_bench.core.results import resume
from allreduce_bench.core.results.load import load_results
from allreduce_bench.core.results.lock import DirectoryLock
from allreduce_bench.core.results.store import DiskFullError, ResultsWriter, write_parquet
from allreduce_bench.emulate import session  # noqa: F401  (sys.modules entries)

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_STEP_ID")

# ---- stored files: a good run, and ways to damage it --------------------------------------

HEADER = ("run_id,timestamp,tag,benchmark,algorithm,backend,device,dtype,world_size,nodes,"
          "ranks_per_node,size_bytes,count,iters,warmup,time_us_median,time_us_mean,time_us_p95,"
          "time_us_min,time_us_max,algbw_GBps,busbw_GBps,wrong")


def good_rows(run_id: str = "r1", dtype: str = "float32") -> list[str]:
    rows = []
    for algo in ("native", "ring"):
        for world in (2, 4):
            for size in (4096, 65536, 1048576, 4194304):
                t = 10 + size / 1e3 * world
                rows.append(f"{run_id},2026-01-01T00:00:00,,allreduce,{algo},gloo,cpu,{dtype},"
                            f"{world},1,{world},{size},{size // 4},5,1,{t},{t},{t},{t},{t},"
                            f"{size / t / 1e3:.4f},{size / t / 1e3:.4f},0")
    return rows


GOOD_CSV = "\n".join([HEADER, *good_rows()]) + "\n"
GOOD_META = {"run_id": "r1", "schema_version": 2,
             "config": {"dtype": "float32", "sampling": asdict(Sampling()),
                                        "backend": "gloo", "device": "cpu",
                                        "ranks_per_node": None, "tag": ""}}


def write_run(directory: Path, csv_text: str | bytes = GOOD_CSV, meta=GOOD_META) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = csv_text.encode() if isinstance(csv_text, str) else csv_text
    (directory / "results.csv").write_bytes(data)
    meta_data = meta if isinstance(meta, (str, bytes)) else json.dumps(meta)
    (directory / "meta.json").write_bytes(meta_data.encode() if isinstance(meta_data, str)
                                          else meta_data)
    return directory


# ---- in-process invocation -------------------------------------------------------------------

class Stub:
    """Stands in for the measuring: records the validated config, starts nothing."""

    def __init__(self):
        self.configs, self.out_dir_made = [], []

    def __call__(self, run, *args, **kwargs):
        self.configs.append(run.config)
        self.out_dir_made.append(Path(run.launch.out_dir).is_dir())  # removed again as it holds nothing
        return 0


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """invoke(args) -> (exit code, stderr, stdout), with nothing started and cwd a temp dir."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    stub = Stub()
    modules = sys.modules  # cli/__init__ binds `ddp` and `emulate` to commands: go by module
    import allreduce_bench.core.launch.driver  # noqa: F401  (finish imports drive from it when called)
    monkeypatch.setattr(modules["allreduce_bench.core.launch.driver"], "drive", stub)

    def no_namespaces():  # emulate validated everything: stop before building namespaces
        raise SystemExit(0)

    monkeypatch.setattr(modules["allreduce_bench.emulate.session"], "check_can_emulate", no_namespaces)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(args):
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{args}: escaped as {result.exception!r}") from result.exception
        return result.exit_code, result.stderr, result.stdout

    invoke.stub = stub
    return invoke


def assert_clean(args, code: int, stderr: str, allowed=(0, 2)) -> None:
    """Exit 0, or exit 2 with at most two lines on stderr naming the problem, no traceback."""
    assert "Traceback" not in stderr, (args, stderr)
    assert code in allowed, (args, code, stderr)
    if code == 2:
        lines = [line for line in stderr.strip().splitlines()
                 if not line.startswith("allreduce-bench: note:")]
        assert 1 <= len(lines) <= 2, (args, stderr)
        assert lines[-1].startswith("allreduce-bench: error: "), (args, stderr)


# ---- the property: random option values to every command ---------------------------------

HOSTILE = ["nan", "inf", "-inf", "1e400", "1e-400", "0", "-1", "", " ", "1.5", "0x10", "abc",
           "1T", "1P", "9" * 30, "4K", "64M", "2", "4", "1,,2", ",", "\udcff", "a\nb", "0s",
           "10us", "25GB/s", "7B", "1.00001"]
VALUES = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=8),
                   st.integers(-3, 5000).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.tuples(st.integers(0, 4096), st.sampled_from(["", "K", "M", "G", "T", "X"]))
                   .map(lambda t: f"{t[0]}{t[1]}"))

OPTIONS = {
    ("run",): ["--algos", "--world-sizes", "--sizes", "--min-bytes", "--max-bytes", "--factor",
               "--dtype", "--loops", "--samples", "--budget", "--iters", "--warmup", "--backend",
               "--device", "--ranks-per-node", "--tag", "--timeout", "--out"],
    ("links",): ["--world-sizes", "--sizes", "--ranks-per-node", "--timeout", "--tag", "--out",
                 "--max-bytes"],
    ("ddp",): ["--params", "--layers", "--batch-size", "--bucket-mb", "--accum", "--world-sizes",
               "--iters", "--warmup", "--ranks-per-node", "--tag", "--timeout", "--out"],
    ("model", "predict"): ["--algo", "--world-size", "--ranks-per-node", "--size", "--intra-bw",
                           "--inter-bw", "--intra-latency", "--inter-latency"],
    ("model", "ddp"): ["--params", "--dtype", "--compute", "--bandwidth", "--gpus",
                       "--ranks-per-node", "--bucket", "--backward-share", "--overlappable"],
    ("emulate",): ["--nodes", "--ranks-per-node", "--inter-bandwidth", "--inter-ratio",
                   "--inter-latency", "--benchmarks", "--sizes", "--iters"],
}
BASE = {("run",): ["--world-sizes", "2", "--sizes", "4K", "--no-plot"],
        ("links",): ["--world-sizes", "2", "--ranks-per-node", "1", "--sizes", "4K"],
        ("ddp",): ["--world-sizes", "2", "--params", "1M", "--no-plot"],
        ("model", "predict"): ["--world-size", "8", "--intra-bw", "900GB/s", "--inter-bw", "25GB/s"],
        ("model", "ddp"): ["--params", "7B", "--compute", "0.5s", "--bandwidth", "25GB/s"],
        ("emulate",): []}


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    chosen = draw(st.lists(st.sampled_from(OPTIONS[command]), min_size=1, max_size=3,
                           unique=True))
    args = list(command) + list(BASE[command])
    for option in chosen:
        value = draw(VALUES)
        if option in ("--out",) and value.strip() and not value.startswith("-"):
            value = f"out/{value}"  # stay inside the temporary directory
        args += [option, value]
    return args


def check_valid_config(config) -> None:
    """What an exit 0 promises: a config that can be measured."""
    if hasattr(config, "settings"):  # ddp
        assert config.settings.params >= 2 and config.settings.batch_size >= 1
        assert all(math.isfinite(b) and b > 0 for b in config.settings.bucket_mbs)
    else:
        assert config.sizes and min(config.sizes) >= DTYPES[config.dtype]
        assert len(config.sizes) <= 200
        sampling = config.sampling
        assert sampling.warmup >= 0 and 0 < sampling.budget_s < 3600
        assert (sampling.loops or 1) >= 1 and (sampling.samples or 1) >= 1
    launch = config.launch
    assert launch.world_sizes and min(launch.world_sizes) >= 1
    assert math.isfinite(launch.timeout_s) and launch.timeout_s > 0
    assert launch.ranks_per_node is None or launch.ranks_per_node >= 1
    assert str(launch.out_dir) not in ("", ".")


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(args=command_lines())
def test_random_options_are_valid_or_one_line(cli, args):
    before = len(cli.stub.configs)
    code, stderr, _ = cli(args)
    assert_clean(args, code, stderr)
    if code == 0 and len(cli.stub.configs) > before:
        check_valid_config(cli.stub.configs[-1])
        assert cli.stub.out_dir_made[-1]


# ---- the property: random damage to stored files -----------------------------------------

@st.composite
def damaged_runs(draw):
    """(results.csv bytes, meta.json bytes) of a good run, cut, spliced with garbage or edited."""
    csv_data, meta_data = GOOD_CSV.encode(), json.dumps(GOOD_META).encode()
    target = draw(st.sampled_from(["csv", "meta", "both"]))
    damage = draw(st.sampled_from(["truncate", "insert", "replace-field", "empty", "append-line"]))

    def hurt(data: bytes) -> bytes:
        if damage == "truncate":
            return data[:draw(st.integers(0, len(data)))]
        if damage == "insert":
            at = draw(st.integers(0, len(data)))
            return data[:at] + draw(st.binary(min_size=1, max_size=20)) + data[at:]
        if damage == "replace-field":
            fields = data.split(b",")
            i = draw(st.integers(0, len(fields) - 1))
            fields[i] = draw(st.sampled_from([b"nan", b"abc", b"", b"-1", b"1e400", b"\xff",
                                              b"4K", b"0"]))
            return b",".join(fields)
        if damage == "empty":
            return b""
        return data + draw(st.sampled_from([b"hello world\n", b"\x00\x01\xff\n", b",,,,\n",
                                            b"1,2,3\n"]))

    if target in ("csv", "both"):
        csv_data = hurt(csv_data)
    if target in ("meta", "both"):
        meta_data = hurt(meta_data)
    return csv_data, meta_data


def whole_good_rows(csv_data: bytes) -> int:
    return max(0, csv_data.count(b"\n") - 1)


@pytest.mark.slow
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damaged=damaged_runs(),
       command=st.sampled_from(["report", "plot", "fit", "resume", "load"]))
def test_damaged_files_are_read_or_refused_in_one_line(cli, tmp_path, damaged, command):
    csv_data, meta_data = damaged
    run = write_run(tmp_path / f"run-{time.monotonic_ns()}", csv_data, meta_data)
    if command == "load":  # the library: a UsageError, or rows that are all whole
        try:
            frame = load_results(run)
        except UsageError as error:
            assert "\n" not in str(error)
            return
        assert len(frame) <= whole_good_rows(csv_data)
        assert not frame[["world_size", "size_bytes", "time_us_median"]].isna().any().any()
        return
    args = {"report": ["report", run, "--out-dir", tmp_path / "plots"],
            "plot": ["plot", run, "--out-dir", tmp_path / "plots"],
            "fit": ["model", "fit", run, "--no-plot", "--out", tmp_path / "model"],
            "resume": ["run", "--resume", run, "--world-sizes", "2", "--sizes", "4K"]}[command]
    code, stderr, _ = cli(args)
    assert_clean(args, code, stderr)


# ---- class 1: output paths -------------------------------------------------------------

def _a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


@pytest.mark.parametrize("where", ["proc", "file", "under-file"])
@pytest.mark.parametrize("command", ["run", "ddp", "links", "emulate", "report", "plot",
                                     "fit", "model-ddp"])
def test_unwritable_outputs_are_one_line(cli, tmp_path, where, command):
    good = write_run(tmp_path / "good")
    path = {"proc": Path("/proc/allreduce-bench-x"), "file": _a_file(tmp_path),
            "under-file": _a_file(tmp_path) / "sub"}[where]
    args = {"run": ["run", "--world-sizes", "2", "--out", path],
            "ddp": ["ddp", "--world-sizes", "2", "--out", path],
            "links": ["links", "--world-sizes", "2", "--ranks-per-node", "1", "--out", path],
            "emulate": ["emulate", "--out", path, "--sizes", "4K"],
            "report": ["report", good, "--out-dir", path],
            "plot": ["plot", good, "--out-dir", path],
            "fit": ["model", "fit", good, "--out", path],
            "model-ddp": ["model", "ddp", "--params", "7B", "--compute", "0.5s", "--gpus", "8,16",
                          "--intra-bw", "900GB/s", "--inter-bw", "25GB/s",
                          "--plot", path / "x.png"]}[command]
    code, stderr, _ = cli(args)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, (args, stderr)
    assert str(path) in stderr, stderr


def test_a_command_that_wrote_nothing_leaves_only_the_folders_that_existed(cli, tmp_path):
    (tmp_path / "mine").mkdir()
    for out in ([], ["--out", "new"], ["--out", "mine"]):  # drive is stubbed: no meta.json, no row
        code, stderr, _ = cli(["run", "--world-sizes", "2", "--sizes", "4K", *out])
        assert code == 0, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_a_long_tag_never_makes_a_too_long_directory_name(cli):
    code, stderr, _ = cli(["run", "--world-sizes", "2", "--sizes", "4K", "--tag", "x" * 100])
    assert code == 0, stderr
    assert len(cli.stub.configs[-1].launch.out_dir.name) < 100
    code, stderr, _ = cli(["run", "--world-sizes", "2", "--tag", "x" * 300])
    assert code == 2 and "--tag is 300 characters" in stderr


# ---- class 2: corrupt or foreign stored files ---------------------------------------------

CORRUPT = {
    "empty meta": (GOOD_CSV, "", "meta.json is empty"),
    "truncated meta": (GOOD_CSV, json.dumps(GOOD_META)[:15], "meta.json is not valid JSON"),
    "non-numeric": (GOOD_CSV.replace(",4096,1024,", ",4K,1024,", 1), GOOD_META,
                    "size_bytes is '4K', not a number"),
    "infinite world": (GOOD_CSV.replace(",float32,2,", ",float32,1e400,", 1), GOOD_META,
                       "world_size is inf, not a finite number"),
    "garbage line": (GOOD_CSV + "hello world\n", GOOD_META, "row 17 has no algorithm"),
    "binary line": (GOOD_CSV.encode() + b"\xff\xfe\x00\x01\n", GOOD_META, "results.csv"),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
@pytest.mark.parametrize("command", ["report", "plot", "resume"])
def test_corrupt_files_name_the_file(cli, tmp_path, case, command):
    csv_text, meta, message = CORRUPT[case]
    run = write_run(tmp_path / "run", csv_text, meta)
    if command == "resume" and "meta" not in case:
        return  # resume reads meta.json and skips rows it cannot read: covered by the property
    if command != "resume" and "meta" in case:
        return  # report and plot read results.csv only
    args = {"report": ["report", run, "--out-dir", tmp_path / "p"],
            "plot": ["plot", run, "--out-dir", tmp_path / "p"],
            "resume": ["run", "--resume", run]}[command]
    code, stderr, _ = cli(args)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("kind", ["ddp", "links", "emulated"])
def test_run_refuses_to_resume_another_benchmarks_run(cli, tmp_path, kind):
    csv_text = GOOD_CSV.replace(",allreduce,", f",{kind},") if kind != "emulated" else GOOD_CSV
    meta = {**GOOD_META, **({"ddp": {}} if kind == "ddp" else {}),
            **({"emulation": {"nodes": 2}} if kind == "emulated" else {})}
    run = write_run(tmp_path / "run", csv_text, meta)
    code, stderr, _ = cli(["run", "--resume", run])
    assert code == 2, stderr
    assert (f"is a `{kind}` run" in stderr) if kind != "emulated" else "emulate --resume" in stderr


def test_run_refuses_a_ddp_run_before_its_first_row(cli, tmp_path):
    """Its meta.json's `ddp` block alone marks it (ddp lends Rows(meta_block=True))."""
    run = write_run(tmp_path / "run", GOOD_CSV.splitlines()[0] + "\n", {**GOOD_META, "ddp": {}})
    code, stderr, _ = cli(["run", "--resume", run])
    assert code == 2 and "is a `ddp` run" in stderr, stderr


def test_the_features_rows_are_read_as_they_lend_them(cli, tmp_path, capsys):
    """ddp's rows need their measure column (report and the library refuse them without it);
    ddp's and links' rows are no rows the analyses skip, an unknown benchmark's are."""
    import allreduce_bench

    frame = pd.read_csv(io.StringIO(GOOD_CSV))
    frame["benchmark"] = ["ddp", "links", "foo", "allreduce"] * (len(frame) // 4)
    frame["measure"] = "step"
    write_run(tmp_path / "run", frame.to_csv(index=False))
    rows = allreduce_bench.load_results(tmp_path / "run")
    assert len(rows) == len(frame)
    note = capsys.readouterr().err
    assert "foo rows" in note and "ddp rows" not in note and "links rows" not in note, note
    write_run(tmp_path / "bad", frame.drop(columns="measure").to_csv(index=False))
    with pytest.raises(UsageError, match="benchmark=ddp rows but no measure column"):
        allreduce_bench.load_results(tmp_path / "bad")
    code, stderr, _ = cli(["report", tmp_path / "bad", "--out-dir", tmp_path / "p"])
    assert code == 2 and "benchmark=ddp rows but no measure column" in stderr, stderr


# ---- class 3: numbers that are not numbers -----------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["run", "--timeout", "nan"], "--timeout must be a finite number"),
    (["run", "--timeout", "inf"], "--timeout must be a finite number"),
    (["ddp", "--bucket-mb", "nan"], "--bucket-mb must be a finite number"),
    (["ddp", "--bucket-mb", "1,inf"], "--bucket-mb must be a finite number"),
    (["ddp", "--params", "1.5"], "not a whole number"),
    (["model", "predict", "--world-size", "8", "--intra-bw", "1e400GB/s"], "too large"),
    (["model", "ddp", "--params", "7B", "--compute", "0s", "--bandwidth", "25GB/s"],
     "--compute must be greater than zero"),
    (["model", "ddp", "--params", "1.5", "--compute", "1s", "--bandwidth", "25GB/s"],
     "not a whole number"),
    (["model", "predict", "--world-size", "8", "--size", "0", "--intra-bw", "1GB/s"],
     "--size entry must be at least 1 byte"),
    (["emulate", "--inter-ratio", "nan"], "--inter-ratio must be a finite number"),
])
def test_numbers_that_are_not_numbers(cli, args, message):
    code, stderr, _ = cli(args)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1, stderr


# ---- class 4: zero or empty is an error, never the default --------------------------------

@pytest.mark.parametrize("args,message", [
    (["run", "--ranks-per-node", "0"], "--ranks-per-node must be at least 1"),
    (["ddp", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["run", "--sizes", ""], "--sizes is empty"),
    (["run", "--world-sizes", ""], "--world-sizes"),
    (["run", "--min-bytes", ""], "--min-bytes"),
    (["model", "predict", "--world-size", "8", "--ranks-per-node", "0", "--intra-bw", "1GB/s"],
     "--ranks-per-node must be at least 1"),
])
def test_zero_or_empty_is_an_error(cli, args, message):
    code, stderr, _ = cli(args)
    assert code == 2 and message in stderr, stderr


# ---- class 5: impossible sizes and worlds ---------------------------------------------------

def test_impossible_worlds_and_sizes_are_refused_with_what_they_need(cli):
    code, stderr, _ = cli(["run", "--world-sizes", "99999"])
    assert code == 2 and "open files" in stderr, stderr
    code, stderr, _ = cli(["run", "--world-sizes", "2", "--max-bytes", "1T"])
    assert code == 2 and "of memory on this host" in stderr and "available" in stderr, stderr
    code, stderr, _ = cli(["ddp", "--world-sizes", "2", "--params", "1T"])
    assert code == 2 and "--params 1T needs" in stderr, stderr


def test_naive_root_memory_counts_every_peer_buffer():
    from allreduce_bench.core.config.checks import allreduce_bytes_per_rank
    size = 1 << 20
    assert allreduce_bytes_per_rank("naive", size, 8) == 4 * size + 7 * size
    assert allreduce_bytes_per_rank("ring", size, 8) == 4 * size + size // 8


def test_out_of_memory_in_a_rank_is_named(tmp_path):
    """A rank that runs out of memory leaves "out of memory" for the driver's line, exit 1."""
    code = ("import os, sys; sys.path.insert(0, %r)\n"
            "from allreduce_bench.core.launch.reasons import guarded\n"
            "from allreduce_bench.core.measure.context import LocalRun\n"
            "def entry(run, env, local):\n    raise MemoryError('cannot allocate 1 TB')\n"
            "guarded(LocalRun(%r, os.getppid()), entry, None)\n") % (str(ROOT), str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == reasons.FAILED_EXIT and "Traceback" not in done.stderr
    rank, line = reasons.first_reason(tmp_path)
    assert rank == 0 and line.startswith("out of memory"), line
    assert errors.is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory"))


# ---- class 6: the rank's real reason, and never a torn row ---------------------------------

def test_a_full_disk_never_leaves_a_torn_row(tmp_path, monkeypatch):
    writer = ResultsWriter(tmp_path)
    row = {c: 1 for c in writer.columns} | {"algorithm": "ring", "run_id": "r"}
    writer.append(row)
    before = (tmp_path / "results.csv").read_bytes()
    real_write = os.write

    def half_then_full(fd, data):
        if len(data) > 10:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("allreduce_bench.core.results.store.os.write", half_then_full)
    with pytest.raises(DiskFullError) as caught:
        writer.append(row)
    assert caught.value.filename == str(tmp_path / "results.csv")
    assert (tmp_path / "results.csv").read_bytes() == before
    assert "disk full writing" in reasons.reason(caught.value)


def test_a_torn_row_is_never_counted_or_reported(tmp_path):
    run = write_run(tmp_path / "run", GOOD_CSV + good_rows()[0][:30])
    assert resume.count_rows(run) == len(good_rows())
    assert len(load_results(run)) == len(good_rows())


@pytest.mark.parametrize("run_id", ["1234e5678901", "123456789012", "000000000e01"])
def test_a_run_id_or_tag_that_looks_like_a_number_stays_text(tmp_path, run_id):
    """uuid4().hex[:12] reads as a number 0.7% of the time; read as one, the finished run found
    none of its own rows (`no rows of a collective`, a CI failure)."""
    rows = [row.replace("r1,2026-01-01T00:00:00,,", f"{run_id},2026-01-01T00:00:00,2024,")
            for row in good_rows()]
    run = write_run(tmp_path / "run", "\n".join([HEADER, *rows]) + "\n")
    for frame in (load_results(run), load_results(write_parquet(run))):
        assert (frame["run_id"] == run_id).all() and (frame["tag"] == "2024").all()


def test_a_non_utf8_tag_is_refused(cli):
    code, stderr, _ = cli(["run", "--tag", b"caf\xe9".decode("utf-8", "surrogateescape")])
    assert code == 2 and "not UTF-8" in stderr, stderr


def test_a_non_numeric_master_port_is_one_line(cli, monkeypatch):
    for name, value in {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
                        "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                        "MASTER_PORT": "abc"}.items():
        monkeypatch.setenv(name, value)
    code, stderr, _ = cli(["run", "--sizes", "4K"])
    assert code == 2 and "MASTER_PORT='abc'" in stderr, stderr


@pytest.mark.slow
def test_stdout_to_dev_full_is_one_line():
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "allreduce_bench", "model", "ddp", "--params",
                               "7B", "--compute", "0.5s", "--bandwidth", "25GB/s"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "no space left" in done.stderr


# ---- class 7: Ctrl-C while ranks start -------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_while_ranks_start_is_one_line(tmp_path):
    """SIGINT to the whole process group (as a terminal sends it) while the ranks import torch."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in LAUNCHER_VARS:
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "allreduce_bench", "run", "--quick",
                             "--world-sizes", "2", "--no-plot"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob("results/*/meta.json")):
        time.sleep(0.05)  # meta.json is written just before the ranks are spawned
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = [line for line in stderr.strip().splitlines()  # less the start line, wrapped or not
             if "->" not in line and not line.startswith(" ")]
    assert proc.returncode in (0, 130) and len(lines) <= 1, stderr
    left = list(tmp_path.glob("results/*"))  # the folder it claimed, only where it holds rows
    assert all((run / "results.csv").exists() for run in left), (left, stderr)


# ---- class 8: promises that exist -----------------------------------------------------------

def test_only_resumable_commands_promise_resume(tmp_path):

    from allreduce_bench.core.results.resume import kept
    assert kept(tmp_path, f"--resume {tmp_path}") == f"no rows were written to {tmp_path}"
    write_run(tmp_path)
    assert "--resume" in kept(tmp_path, f"--resume {tmp_path}")
    assert "--resume" not in kept(tmp_path, None)


def test_messages_name_the_options_the_command_has(cli, tmp_path):
    code, stderr, _ = cli(["model", "predict", "--world-size", "8", "--size", "0",
                           "--intra-bw", "1GB/s"])
    assert code == 2 and "--size entry" in stderr and "--sizes" not in stderr
    small = write_run(tmp_path / "small", "\n".join([HEADER, *[r for r in good_rows()
                                                               if ",4096," in r]]) + "\n")
    code, stderr, stdout = cli(["model", "fit", small, "--no-plot"])  # fits, and says what is missing
    assert code == 0 and "no size of 1M or more was measured" in stdout, (stderr, stdout)
    assert "--min-size" in stdout and "--min-bytes" not in stdout


# ---- class 9: two runs, one directory --------------------------------------------------------

def test_a_directory_in_use_is_locked(tmp_path):
    with DirectoryLock(tmp_path):
        with pytest.raises(UsageError, match=f"in use by pid {os.getpid()}"):
            DirectoryLock(tmp_path).acquire()
    DirectoryLock(tmp_path).acquire().release()  # free again once the holder is done
    assert not (tmp_path / ".lock").exists()  # and a finished run leaves no lock file


def test_a_lock_file_removed_between_open_and_lock_is_taken_again(tmp_path, monkeypatch):
    """A holder that finishes removes its file while it still holds it; a writer that opened
    the file just before then locks an inode no longer at the path: it must open it anew, or
    two writers would hold the one directory."""
    from allreduce_bench.core.results import lock as locking

    real, calls = locking.fcntl.flock, []

    def flock(fd, operation):
        if not calls:
            os.unlink(tmp_path / ".lock")  # the holder finished between our open and our lock
        calls.append(fd)
        return real(fd, operation)

    monkeypatch.setattr(locking.fcntl, "flock", flock)
    held = DirectoryLock(tmp_path).acquire()
    assert len(calls) == 2 and os.stat(tmp_path / ".lock").st_ino == os.fstat(held._fd).st_ino
    held.release()


def test_default_directories_are_unique(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    first, second = default_out_dir("t", now, claim=True), default_out_dir("t", now, claim=True)
    assert first != second and first.is_dir() and second.is_dir()


# ---- class 10: no silent surprises -----------------------------------------------------------

def test_silent_surprises_are_said_or_refused(cli, tmp_path):
    good = write_run(tmp_path / "good")
    code, stderr, _ = cli(["run", "--world-sizes", "2", "--sizes", "4K", "--out", good])
    assert code == 0 and "already holds 16 row(s)" in " ".join(stderr.split()) and "--resume" in stderr
    code, stderr, _ = cli(["run", "--out", ""])
    assert code == 2 and "empty" in stderr
    code, stderr, _ = cli(["run", "--factor", "1.00001"])
    assert code == 2 and "sizes, more than 200" in stderr


def test_emulate_resume_keeps_its_links(tmp_path):
    from allreduce_bench.emulate.rates import resumed_dir, same_emulation
    run = write_run(tmp_path / "e", meta={**GOOD_META, "emulation": {
        "nodes": 2, "ranks_per_node": 2, "inter_rate_bps": 2e7, "inter_latency_s": 0.0,
        "label": "2x2@20Mbit"}})
    assert resumed_dir(["--sizes", "4K", "--resume", str(run)]) == run
    assert same_emulation(run, 2, 2, None, 0.0) == 2e7  # auto: the stored rate, not a new one
    with pytest.raises(UsageError, match="2x2@20Mbit"):
        same_emulation(run, 2, 2, 2e8, 0.0)


def test_report_tells_runs_of_different_dtypes_apart(tmp_path):
    from allreduce_bench.core.analysis.tables import label_runs
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", "\n".join([HEADER, *good_rows("r2", "float64")]) + "\n",
                  {**GOOD_META, "run_id": "r2"})
    runs = set(label_runs(pd.concat([load_results(a), load_results(b)]))["run"])
    assert any("float32" in r for r in runs) and any("float64" in r for r in runs), runs
