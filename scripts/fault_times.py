#!/usr/bin/env python
"""How fast a local run ends when a rank dies, stalls or gets Ctrl-C: prints the figures.

    python scripts/fault_times.py [--ranks 4] [--timeout 5]

Runs the real CLI three times with the tests' fault plugin (tests/support/fault_plugin.py):
  kill   rank 1 SIGKILLs itself after 2 rows     -> seconds from the kill to the run's exit
  stall  rank 1 sleeps after 2 rows (--timeout)  -> seconds from the stall to the run's exit
  ctrl-c SIGINT to the whole process group       -> seconds from the signal to the run's exit
and checks each time that the run exits non-zero, keeps its rows and leaves no process behind.
Timings depend on the machine's load: they are figures to read, not pass/fail thresholds.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(out: Path, ranks: int, timeout: float, fault: str | None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if fault:
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        from fault_plugin import fault_env
        env = fault_env(fault, env)
    return subprocess.Popen(
        [sys.executable, "-m", "allreduce_bench", "run", "--world-sizes", str(ranks),
         "--algos", "ring,native", "--sizes", "4K,8K,16K", "--iters", "1", "--warmup", "0",
         "--timeout", str(timeout), "--no-plot", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def group_gone(pgid: int, within: float = 15) -> float | None:
    """Seconds until no process of the group is left, None if some outlive `within`."""
    begin = time.time()
    while time.time() - begin < within:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return time.time() - begin
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)
    return None


def rows(out: Path) -> int:
    path = out / "results.csv"
    return max(0, len(path.read_text().splitlines()) - 1) if path.exists() else 0


def report(name: str, proc: subprocess.Popen, began: float, out: Path) -> None:
    stdout, stderr = proc.communicate(timeout=600)
    ended = time.time()
    lingering = group_gone(proc.pid)
    match = re.search(r"test fault: .* at t=([\d.]+)", stderr)
    cause = float(match.group(1)) if match and name != "ctrl-c" else began
    lines = [line for line in stderr.splitlines() if line.startswith("allreduce-bench:")
             and "test fault" not in line and "backend" not in line]
    print(f"{name:7s} exit code {proc.returncode}, {ended - cause:5.2f} s from the {name} to the "
          f"run's exit, {rows(out)} rows kept, "
          f"{'no process left' if lingering is not None else 'PROCESSES LEFT BEHIND'}")
    for line in lines:
        print(f"        {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args()
    print(f"{args.ranks} ranks, gloo on loopback, --timeout {args.timeout:g} s, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fault in (("kill", "rank=1,after_rows=2,action=kill"),
                            ("stall", "rank=1,after_rows=2,action=stall,seconds=600"),
                            ("ctrl-c", "rank=1,after_rows=2,action=stall,seconds=600")):
            out = Path(tmp) / name
            began = time.time()
            proc = start(out, args.ranks, args.timeout if name == "stall" else 300, fault)
            if name == "ctrl-c":
                while rows(out) < 2 and proc.poll() is None:
                    time.sleep(0.05)
                began = time.time()
                os.killpg(proc.pid, signal.SIGINT)
            report(name, proc, began, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
