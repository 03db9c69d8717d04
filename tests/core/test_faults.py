"""Never hang, never lose: real local runs where a rank is SIGKILLed, stalls, or gets Ctrl-C.

Each test starts the real CLI in its own session (process group), so after it ends we can check
that no rank outlived it. Bounds are generous (a loaded 2-core machine); the measured
kill-to-exit, stall-to-exit and Ctrl-C-to-exit times are printed by scripts/fault_times.py
(which also exercises Ctrl-C, kept out of the suite to keep its process launches few).
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from console_lines import unwrapped
from fault_plugin import FAULT_ENV, fault_env

from allreduce_bench.cli import main
from allreduce_bench.core.results.resume import repair_tail

ROOT = Path(__file__).resolve().parents[2]
ALGOS, SIZES = ["ring", "native"], [4096, 8192]
SWEEP = ["--algos", ",".join(ALGOS), "--sizes", "4K,8K", "--iters", "1", "--warmup", "0",
         "--no-plot"]


def start(out: Path, world_sizes: str, *extra: str, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAULT_ENV, None)
    if fault:
        env = fault_env(fault, env)
    return subprocess.Popen([sys.executable, "-m", "allreduce_bench", "run", "--world-sizes",
                             world_sizes, "--out", str(out), *SWEEP, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 150) -> tuple[int, str, float]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"run did not end within {timeout}s: a hang") from None
    return proc.returncode, unwrapped(out + err), time.time()


def assert_no_orphans(pgid: int, within: float = 15) -> None:
    """Every process of the run's group is gone (the launcher's helpers may take a moment)."""
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)
    raise AssertionError(f"processes of the run outlived it by {within}s")


def fault_time(output: str) -> float:
    return float(re.search(r"test fault: .* at t=([\d.]+)", output).group(1))


def read_rows(out: Path) -> pd.DataFrame:
    data = (out / "results.csv").read_bytes()
    assert data.endswith(b"\n")  # no half-written row
    return pd.read_csv(out / "results.csv")


def keys(frame: pd.DataFrame) -> list[tuple]:
    return sorted(zip(frame["algorithm"], frame["world_size"], frame["size_bytes"]))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_writer_sigkilled_in_two_ranks_then_resume_gives_every_row_once(tmp_path):
    out = tmp_path / "run"
    proc = start(out, "2", fault="rank=0,after_rows=1,action=kill")  # rank 0 writes the rows
    code, output, ended = finish(proc)
    assert code == 1, output
    said = " ".join(output.split())  # the stopped line wrapped to 120 columns
    assert re.search(r"run stopped: rank 0 \(pid \d+\) was killed by SIGKILL; 1 row", said), output
    assert f"--resume {out}" in said
    assert ended - fault_time(output) < 60
    assert_no_orphans(proc.pid)
    first = read_rows(out)
    assert keys(first) == [("ring", 2, 4096)]

    proc = start(out, "2", "--resume", str(out))
    code, output, _ = finish(proc)
    assert code == 0, output
    rows = read_rows(out)
    assert keys(rows) == sorted((a, 2, s) for a in ALGOS for s in SIZES)  # each once
    assert rows["run_id"].nunique() == 1
    pd.testing.assert_frame_equal(rows.iloc[:1], first)  # the old row untouched
    assert rows["wrong"].sum() == 0
    assert json.loads((out / "meta.json").read_text())["resumed"][0]["command"].endswith(str(out))


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_sigkill_in_four_ranks(tmp_path):
    out = tmp_path / "run"
    proc = start(out, "4", fault="rank=2,after_rows=3,action=kill")
    code, output, ended = finish(proc)
    assert code == 1, output
    assert re.search(r"run stopped: rank 2 \(pid \d+\) was killed by SIGKILL; 3 row", output), output
    assert ended - fault_time(output) < 60
    assert_no_orphans(proc.pid)
    assert keys(read_rows(out)) == [("native", 4, 4096), ("ring", 4, 4096), ("ring", 4, 8192)]
    stopped = json.loads((out / "meta.json").read_text())["stopped"]  # before: only under emulate
    assert stopped["rank"] == 2 and stopped["how"] == "was killed by SIGKILL"
    assert stopped["host"] == socket.gethostname() and stopped["at"].startswith(time.strftime("%Y-%m-%d"))


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_stalled_rank_trips_the_timeout(tmp_path):
    out = tmp_path / "run"
    proc = start(out, "2", "--timeout", "5", fault="rank=1,after_rows=2,action=stall,seconds=300")
    code, output, ended = finish(proc)
    assert code != 0, output
    # rank 0 names the step it was at and the rank that stopped answering
    assert re.search(r"rank 0: stopped at native, world size 2, 4096 B: no answer within "
                     r"--timeout 5 s; missing rank 1", output), output
    assert ended - fault_time(output) < 5 + 60
    assert_no_orphans(proc.pid)
    assert keys(read_rows(out)) == [("ring", 2, 4096), ("ring", 2, 8192)]
    # the rank the others gave up on, not the one that gave up (before: no `stopped` at all)
    stopped = json.loads((out / "meta.json").read_text())["stopped"]
    assert stopped["rank"] == 1 and stopped["how"] == "stopped answering at native, world size 2, 4096 B"
    assert "run stopped: rank 1 stopped answering at native" in output


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("command", "fault", "rank", "how"), [
    (["ddp", "--params", "40K", "--layers", "4", "--iters", "2", "--warmup", "0"],
     "rank=1,after_rows=3,action=stop", 1, "stopped answering (frozen) at "),
    (["links", "--ranks-per-node", "2", "--sizes", "4K", "--iters", "1", "--warmup", "0"],
     "rank=3,after_rows=2,action=kill", 3, "was killed by SIGKILL"),
])
def test_ddp_and_links_say_which_rank_stopped(tmp_path, command, fault, rank, how):
    """The local driver's `stopped` for every command it runs: meta.json has the rank, its host,
    how and when; one line says so, the rows before are kept, and no summary table follows."""
    out = tmp_path / "run"
    env = fault_env(fault, {**os.environ, "PYTHONPATH": str(ROOT)})
    proc = subprocess.Popen([sys.executable, "-m", "allreduce_bench", *command, "--world-sizes", "4",
                             "--timeout", "5", "--no-plot", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    code, output, _ = finish(proc)
    assert code == 1, output
    stopped = json.loads((out / "meta.json").read_text())["stopped"]
    assert stopped["rank"] == rank and stopped["how"].startswith(how), stopped
    assert len(re.findall(r"run stopped: rank \d", output)) == 1 and f"run stopped: rank {rank} " in output, output
    assert len(read_rows(out)) >= 2 and "results:" not in output, output  # no finish after it
    assert_no_orphans(proc.pid)


def test_resume_refuses_another_measurement(tmp_path):
    sampling = {"loops": None, "samples": 20, "budget_s": 0.2, "min_sample_s": 0.002,
                "max_skew_share": 0.01, "max_sample_s": 0.02,
                "min_samples": 5, "max_samples": 100, "max_loops": 10000, "warmup": 1,
                "host_launch": False}
    (tmp_path / "meta.json").write_text(json.dumps(
        {"run_id": "abc", "config": {"dtype": "float32", "sampling": sampling, "tag": "nvlink"}}))
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path), "--samples", "10",
                                       "--tag", "ib"])
    assert result.exit_code == 2
    assert "'samples': 20" in result.output and "'samples': 10" in result.output
    assert "--tag 'nvlink' but this run has" in result.output and "--tag 'ib'" in result.output
    before_skew = {k: v for k, v in sampling.items() if k not in ("max_skew_share", "max_sample_s")}
    (tmp_path / "meta.json").write_text(json.dumps(
        {"run_id": "abc", "config": {"dtype": "float32", "sampling": before_skew, "tag": "nvlink"}}))
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path), "--samples", "20"])
    assert result.exit_code == 2 and "before schema 4" in result.output
    assert len(result.output.strip().splitlines()) == 1
    (tmp_path / "meta.json").write_text('{"run_id": "abc", "config": {"dtype": "float32", '
                                        '"iters": 20, "warmup": 5, "tag": "nvlink"}}')
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path), "--tag", "nvlink"])
    assert result.exit_code == 2 and "older allreduce-bench" in result.output
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no meta.json" in result.output
    result = CliRunner().invoke(main, ["run", "--resume", str(tmp_path), "--out", "elsewhere"])
    assert result.exit_code == 2 and "drop --out" in result.output


def test_repair_tail_drops_half_a_row(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n3,")
    assert repair_tail(tmp_path) and path.read_text() == "a,b\n1,2\n"
    assert not repair_tail(tmp_path) and path.read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("message,expected", [
    ("[gloo/transport/tcp/pair.cc:534] Timed out waiting 5000ms for recv operation to complete",
     "no answer within --timeout 5 s"),
    ("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41234",
     "a peer's connection closed"),
    ("Read error [127.0.0.1]:5000: Connection reset by peer", "a peer's connection closed"),
    ("shape mismatch: [4] vs [8]\nmore", "shape mismatch: [4] vs [8]"),
])
def test_failures_are_explained_in_words(message, expected):
    from allreduce_bench.core.measure.progress import explain
    assert explain(RuntimeError(message), 5) == expected


def test_fault_hook_and_failure_description():
    from types import SimpleNamespace

    from fault_plugin import Fault

    from allreduce_bench.core.launch.local import describe_failure
    assert Fault.from_env({}) is None
    assert Fault.from_env({FAULT_ENV: "rank=1,after_rows=2,action=stall,seconds=9"}) == \
        Fault(1, 2, "stall", 9.0)
    with pytest.raises(ValueError, match="kill, stall, stop or delay"):
        Fault.from_env({FAULT_ENV: "rank=1,after_rows=2,action=explode"})
    error = SimpleNamespace(failures={
        0: SimpleNamespace(exitcode=3, pid=10, timestamp=5),
        2: SimpleNamespace(exitcode=-9, pid=12, timestamp=6)})
    assert describe_failure(error) == ("rank 2 (pid 12) was killed by SIGKILL; rank(s) 0 "
                                       "stopped after it")
