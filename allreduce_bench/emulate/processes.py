"""The processes of an emulated run: one torchrun per emulated host, started together, stopped
together (SIGTERM, then SIGKILL), and ended with the driver even when it is killed."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from contextlib import contextmanager


def namespace_pids(name: str) -> list[str]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return done.stdout.split()


def run_on_hosts(cluster, module_args: list[str], emulation, cgroup_procs=lambda i: None,
                 outcome=lambda: None, module: str = "allreduce_bench") -> int:
    """Launch on every host at once; the first failure stops the others. Returns an exit code:
    `outcome()` once it gives one (a benchmark whose result is final while a frozen host's
    launch would wait on; the others are then stopped), else the first failure's, else 0.
    `cgroup_procs(i)`: the cgroup host i joins, or None; `module` what torchrun runs."""
    procs = []
    try:
        for i in range(cluster.nodes):
            procs.append(subprocess.Popen(cluster.torchrun(i, module_args, cgroup_procs(i), module),
                                          env=cluster.host_env(i, emulation),
                                          start_new_session=True, preexec_fn=die_with_parent))
        while True:
            final = outcome()
            if final is not None:  # the rest only waits (on a frozen host): stop it quietly
                kill_quietly(cluster, procs)
                return final
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.2)
    except (KeyboardInterrupt, SystemExit):
        kill_quietly(cluster, procs)
        raise
    finally:
        _stop(procs)


def kill_quietly(cluster, procs: list[subprocess.Popen]) -> None:
    """On Ctrl-C/SIGTERM stop every launch at once with SIGKILL (torchrun stopped by SIGTERM
    prints tracebacks). Rows are appended whole, so a killed writer leaves at most a torn
    last line that resume and every reader drop."""
    for p in procs:
        _signal_group(p, signal.SIGKILL)
    for name in cluster.hosts:  # the ranks run in sessions of their own, inside our namespaces
        for pid in namespace_pids(name):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for p in procs:
        p.wait()


def die_with_parent() -> None:
    """In the child: get SIGTERM when the driver dies, even by SIGKILL (torchrun then stops its
    workers); prctl(PR_SET_PDEATHSIG) survives exec of non-setuid programs such as `ip`."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


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
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
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
