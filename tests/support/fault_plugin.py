"""The tests' fault injection, a plugin of the core's hooks (allreduce_bench/core/hooks.py): ranks
that fail on purpose, loaded in every process of a run by ALLREDUCE_BENCH_PLUGINS=fault_plugin.

FAULT_ENV='rank=1,after_rows=2,action=kill|stall|stop|delay[,seconds=600][,at=row|start]':
global rank `rank` SIGKILLs itself, sleeps `seconds`, or SIGSTOPs itself (frozen, as a debugger
or a hung kernel would leave it) after it has finished `after_rows` measurements, between two
measurements (never inside the timed region), or with `at=start` before it joins the world (a
host that hangs while it starts: no rank has heard of it); `delay` makes the rank start every
sample `seconds` late (after the alignment, before its clock starts): a straggler the
slowest-rank analysis must name."""
from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from allreduce_bench.core.hooks import PLUGINS_ENV, hookimpl

FAULT_ENV = "ALLREDUCE_BENCH_TEST_FAULT"
SUPPORT = Path(__file__).parent


def fault_env(spec: str, environ=None) -> dict[str, str]:
    """The variables that put `spec` into a run started with `environ` (default os.environ)."""
    environ = dict(os.environ if environ is None else environ)
    path = os.pathsep.join(p for p in (str(SUPPORT), environ.get("PYTHONPATH", "")) if p)
    return {**environ, PLUGINS_ENV: "fault_plugin", FAULT_ENV: spec, "PYTHONPATH": path}


@dataclass(frozen=True)
class Fault:
    rank: int
    after_rows: int
    action: str
    seconds: float = 600.0
    at: str = "row"  # row: after `after_rows` measurements; start: before the rank joins the world

    @classmethod
    def from_env(cls, environ=None) -> Fault | None:
        text = (os.environ if environ is None else environ).get(FAULT_ENV)
        if not text:
            return None
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        fault = cls(int(fields["rank"]), int(fields.get("after_rows", 0)), fields["action"],
                    float(fields.get("seconds", 600)), fields.get("at", "row"))
        if fault.action not in ("kill", "stall", "stop", "delay"):
            raise ValueError(f"{FAULT_ENV}: action must be kill, stall, stop or delay, not "
                             f"{fault.action!r}")
        if fault.at not in ("row", "start") or (fault.at == "start" and fault.action == "delay"):
            raise ValueError(f"{FAULT_ENV}: at must be row or start (start: kill, stall or stop), "
                             f"not {fault.at!r}")
        return fault

    def act(self, rank: int, when: str) -> None:
        print(f"allreduce-bench: test fault: rank {rank} {self.action}s {when} "
              f"at t={time.time():.3f}", file=sys.stderr, flush=True)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(self.seconds)


def _rows_on_disk(out_dir: Path) -> int:
    """Rows in results.csv now (header and a half-written row not counted)."""
    path = Path(out_dir) / "results.csv"
    return max(0, path.read_bytes().count(b"\n") - 1) if path.exists() else 0


@hookimpl
def rank_starting(rank: int) -> None:
    fault = Fault.from_env()
    if fault and fault.at == "start" and rank == fault.rank:
        fault.act(rank, "as it starts")


@hookimpl
def row_recorded(session) -> None:
    """The writer records the same row at about the same time as this rank; waiting (10 s at
    most) until it has lets a test count the rows kept exactly."""
    fault, rank = Fault.from_env(), session.env.rank
    if not fault or fault.at != "row" or rank != fault.rank or fault.action == "delay" \
            or session.rows_done != fault.after_rows:
        return
    deadline = time.monotonic() + 10
    while _rows_on_disk(session.launch.out_dir) < session.rows_done and time.monotonic() < deadline:
        time.sleep(0.01)
    fault.act(rank, f"after {session.rows_done} rows")


@hookimpl
def before_sample(rank: int):
    fault = Fault.from_env()
    if not fault or fault.action != "delay" or rank != fault.rank:
        return None
    return lambda: time.sleep(fault.seconds)
