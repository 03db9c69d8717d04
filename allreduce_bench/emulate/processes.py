"""The processes of an emulated run: one torchrun per emulated host, started together, stopped
together (SIGTERM, then SIGKILL), and ended with the driver even when it is killed."""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from allreduce_bench.core.host.processes import send


def namespace_pids(name: str) -> list[str]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return done.stdout.split()


class FirstFailure:
    """The default watch over a run's launches: done when all ended or one failed; `stopped` says which
    host's launch failed first, how and when (health brings its own watch, salvage.Watch)."""

    stopped: dict | None = None

    def done(self, codes: list[int | None], worker_exits: list[int | None]) -> bool:
        return all(c is not None for c in codes) or any(c not in (None, 0) for c in codes)

    def result(self, codes: list[int | None], worker_exits: list[int | None]) -> int:
        failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
        if not failed:
            return 0
        first = min(failed, key=lambda i: (not (worker_exits[i] or 0) < 0, i))  # a signal is the cause
        how = worker_exits[first]
        self.stopped = {"host": f"node{first}", "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "how": (f"its rank was killed by {signal.Signals(-how).name}" if how is not None and how < 0
                                else f"its rank exited with code {how}" if how is not None
                                else f"its launch exited with code {codes[first]}")}
        return codes[first] or 0  # not None, not 0: it failed


# torchrun's own lines: its log records, and its tracebacks (ChildFailedError's block)
_TORCH_LOG = re.compile(r"^\[?[IWE]\d{4} \d\d:\d\d:\d\d")
_WORKER_EXIT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank")


class LauncherOutput:
    """A host's launch output, all into the launcher log, and to the console without torchrun's log
    records and tracebacks; `worker_exit`: the exit code torchrun reported for a failed rank."""

    def __init__(self, host: str, log, console):
        self.host, self.log, self.console = host, log, console
        self.worker_exit: int | None = None
        self._skipping: str | None = None
        self._rules = 0

    def pump(self, stream) -> None:
        for line in stream:
            if self.log is not None:
                self.log.write(f"{self.host}: {line}")
                self.log.flush()
            if (found := _WORKER_EXIT.search(line)) and self.worker_exit is None:
                self.worker_exit = int(found.group(1))
            if self._keep(line):
                self.console.write(line)
                self.console.flush()

    def _keep(self, line: str) -> bool:
        if self._skipping == "traceback":
            if line[:1] in (" ", "\t") or not line.strip():
                return False
            self._skipping = "failure" if "ChildFailedError" in line else None
            self._rules = 0
            return False
        if self._skipping == "failure":  # between two ===== rules
            self._rules += line.startswith("=====")
            self._skipping = None if self._rules >= 2 else "failure"
            return False
        if line.startswith("Traceback (most recent call last)"):
            self._skipping = "traceback"
            return False
        return not (_TORCH_LOG.match(line) or line.startswith(("During handling of the above",
                                                               "The above exception")))


def run_on_hosts(cluster, module_args: list[str], emulation, cgroup_procs=lambda i: None,
                 watch=None, log_path: Path | None = None, module: str = "allreduce_bench") -> int:
    """Launch on every host at once until `watch` (default FirstFailure) is done, then stop the rest quietly;
    `watch.result` is the exit code. `cgroup_procs(i)`: the cgroup host i joins, or None."""
    watch = watch or FirstFailure()
    procs, pumps = [], []
    log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
    try:
        for i in range(cluster.nodes):
            procs.append(subprocess.Popen(cluster.torchrun(i, module_args, cgroup_procs(i), module),
                                          env=cluster.host_env(i, emulation), text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True, preexec_fn=die_with_parent))
            for stream, console in ((procs[-1].stdout, sys.stdout), (procs[-1].stderr, sys.stderr)):
                pump = LauncherOutput(f"node{i}", log, console)
                pumps.append((i, pump, threading.Thread(target=pump.pump, args=(stream,), daemon=True)))
                pumps[-1][2].start()
        while True:
            codes = [p.poll() for p in procs]
            exits = [next((pump.worker_exit for j, pump, _ in pumps if j == i and pump.worker_exit is not None),
                          None) for i in range(cluster.nodes)]
            if watch.done(codes, exits):
                final = watch.result(codes, exits)
                kill_quietly(cluster, procs)
                return final
            time.sleep(0.2)
    except (KeyboardInterrupt, SystemExit):
        kill_quietly(cluster, procs)
        raise
    finally:
        _stop(procs)
        for _, _, thread in pumps:
            thread.join(timeout=2)
        if log is not None:
            log.close()


def kill_quietly(cluster, procs: list[subprocess.Popen]) -> None:
    """Stop every launch at once with SIGKILL (torchrun stopped by SIGTERM prints tracebacks); rows are
    appended whole, so a killed writer leaves at most a torn last line that every reader drops."""
    for p in procs:
        _signal_group(p, signal.SIGKILL)
    for name in cluster.hosts:  # the ranks run in sessions of their own, inside our namespaces
        send(map(int, namespace_pids(name)), signal.SIGKILL)
    for p in procs:
        p.wait()


def die_with_parent() -> None:
    """In the child: SIGTERM when the driver dies, even by SIGKILL (PR_SET_PDEATHSIG survives exec of `ip`)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def _stop(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    """SIGTERM each launch's process group (torchrun stops its workers), SIGKILL if it lingers."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, sig)


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM/SIGHUP leave through the same `finally` clean-up as Ctrl-C."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
