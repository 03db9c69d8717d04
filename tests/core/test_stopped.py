"""A rank that its launcher ends with SIGTERM (srun --kill-on-bad-exit, mpirun, torchrun, a Slurm
time limit) says where it was and which rank it waited on (measure/stopped.py).

Two ranks are started as srun would start them: Slurm's variables only, rank 0 hosting the
store. The test plays the launcher and sends SIGTERM itself.
"""
from __future__ import annotations

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
from console_lines import unwrapped
from fault_plugin import FAULT_ENV, fault_env

from allreduce_bench.core.errors import TERMINATED_EXIT

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)
SMALL = ["--algos", "native,ring", "--sizes", "4K,8K", "--iters", "1", "--warmup", "0",
         "--no-plot"]  # 4 rows at world size 2; the fault comes after 2


def start_ranks(tmp_path: Path, fault: str, *options: str) -> list[tuple[subprocess.Popen, Path]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OMPI_", "PMI_", "RANK", "WORLD_", "LOCAL_", "MASTER_",
                                 "TORCHELASTIC_")) and k != FAULT_ENV}
    started = []
    for rank in range(2):
        log = tmp_path / f"rank{rank}.log"
        env = {**base, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "GLOO_SOCKET_IFNAME": "lo",
               "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "9", "SLURM_PROCID": str(rank),
               "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0",
               "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NODELIST": "localhost",
               "MASTER_PORT": str(port)}
        env = fault_env(fault, env)
        with open(log, "w") as out:
            started.append((subprocess.Popen(
                [sys.executable, "-m", "allreduce_bench", "run", "--world-sizes", "2", *SMALL,
                 *options, "--out", str(tmp_path / "out")],
                env=env, stdout=out, stderr=subprocess.STDOUT), log))
    return started


def wait_for(log: Path, text: str, within_s: float = 90) -> None:
    deadline = time.monotonic() + within_s
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"no {text!r} within {within_s} s:\n{log.read_text()}"
        time.sleep(0.05)


def stop_all(started) -> None:
    for process, _ in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@pytest.mark.slow
def test_a_rank_ended_by_its_launcher_names_where_it_was_and_the_frozen_rank(tmp_path):
    started = start_ranks(tmp_path, "rank=1,after_rows=2,action=stop", "--timeout", "90",
                          "--flight-recorder")
    (rank0, log0), (_, log1) = started
    try:
        wait_for(log1, "test fault:")
        time.sleep(1.0)  # rank 0 is inside the next collective, waiting on the frozen rank 1
        sent = time.monotonic()
        rank0.send_signal(signal.SIGTERM)
        rank0.wait(timeout=30)
        ended_s = time.monotonic() - sent
    finally:
        stop_all(started)
    output = unwrapped(log0.read_text())
    assert rank0.returncode == TERMINATED_EXIT, output
    assert ended_s < 10, output  # not the --timeout of 90 s
    assert re.search(r"rank 0: stopped at ring, world size 2, 4096 B: ended by its launcher "
                     r"\(SIGTERM\); missing rank 1 \(frozen\)", output), output
    assert len(pd.read_csv(tmp_path / "out" / "results.csv")) == 2  # the rows before, whole
    # a job ended at its time limit in a hang still leaves the dumps that `hang` reads
    assert (tmp_path / "out" / "flight-recorder" / "rank0").exists(), output


@pytest.mark.slow
def test_a_sigterm_after_the_rank_saw_its_peer_die_gives_one_line(tmp_path):
    """The launcher's SIGTERM follows a peer's death within milliseconds: whichever of the two
    reports first, rank 0 writes one line, naming rank 1."""
    started = start_ranks(tmp_path, "rank=1,after_rows=2,action=kill", "--timeout", "60")
    (rank0, log0), (_, log1) = started
    try:
        wait_for(log1, "test fault:")
        rank0.send_signal(signal.SIGTERM)
        rank0.wait(timeout=30)
    finally:
        stop_all(started)
    output = unwrapped(log0.read_text())
    lines = [line for line in output.splitlines() if "rank 0: stopped at" in line]
    assert len(lines) == 1, output
    assert "missing rank 1" in lines[0], output
    assert rank0.returncode in (TERMINATED_EXIT, 3), output


@pytest.mark.slow
def test_a_scancel_reaches_every_rank_and_none_blames_the_store_host(tmp_path):
    """Every rank gets SIGTERM at once (a time limit, scancel): rank 0, which serves the store,
    stays until the others have asked it, so none of them says rank 0 is gone."""
    started = start_ranks(tmp_path, "rank=1,after_rows=2,action=stall,seconds=600", "--timeout", "90")
    (rank0, log0), (rank1, log1) = started
    try:
        wait_for(log1, "test fault:")
        time.sleep(1.0)
        for process, _ in started:
            process.send_signal(signal.SIGTERM)
        for process, _ in started:
            process.wait(timeout=30)
    finally:
        stop_all(started)
    output = unwrapped(log0.read_text() + log1.read_text())
    assert [rank0.returncode, rank1.returncode] == [TERMINATED_EXIT] * 2, output
    assert "is gone" not in output, output
    assert re.search(r"rank 1: stopped at \S+, world size 2, 8192 B: ended by its launcher "
                     r"\(SIGTERM\)$", output, re.M), output  # stalled: nobody it waits on
    assert "rank 0: stopped at ring, world size 2, 4096 B: ended by its launcher (SIGTERM); " \
           "missing rank 1" in output, output


def test_one_end_line_per_process():
    """The watcher and the main thread never both write: the first to claim writes, and
    the other thread's exit waits for the process to end."""
    code = """if True:
        import threading, time
        from allreduce_bench.core.measure.progress import EndLine
        end = EndLine()
        def watcher():
            end.claim()
            time.sleep(0.3)
            end.exit("from the watcher", 5)
        threading.Thread(target=watcher).start()
        time.sleep(0.1)
        end.exit("from the main thread", 7)
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 5, done.stderr
    assert "from the watcher" in done.stderr and "from the main thread" not in done.stderr


def test_a_finished_rank_no_longer_catches_sigterm():
    """The watch is undone when the rank's measurements end: the signal's handling and the
    wakeup fd are restored, and the relay thread is gone."""
    import threading

    from allreduce_bench.core.measure import stopped

    class Quiet:
        where = "start-up"

    before = signal.getsignal(signal.SIGTERM)
    with stopped.watch(None, Quiet(), 1):
        assert signal.getsignal(signal.SIGTERM) is not before
        assert [t for t in threading.enumerate() if t.name == "allreduce-bench-signals"]
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.set_wakeup_fd(-1) == -1
    assert not [t for t in threading.enumerate() if t.name == "allreduce-bench-signals"]


def test_signals_reach_the_relay_while_the_main_thread_is_busy():
    """A signal with a Python handler is handed to the relay thread as it arrives, before the
    main thread runs any Python signal handler."""
    import threading

    from allreduce_bench.core.measure import stopped

    seen = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    try:
        with stopped.signals_seen(lambda signum: signum == signal.SIGUSR1 and seen.set()):
            os.kill(os.getpid(), signal.SIGUSR1)
            assert seen.wait(5)
    finally:
        signal.signal(signal.SIGUSR1, previous)
