#!/usr/bin/env python
"""The health check's targets on the emulated cluster (root): figures printed, not a test.

For each layout (hosts x ranks per host) and kind of trial, `emulate --benchmarks health` runs
with a fault put in on purpose on one random host, and the verdicts are scored:

- rate:   that host's link at 1/4 of the others' (--host-bandwidth); target: that host and only
          it named slow/bad in >= 9 of 10 trials;
- cpu:    that host at 25% of one CPU (--host-cpu); target >= 9 of 10;
- clean:  no fault; target: 0 hosts flagged (exit 0) in 10 trials;
- freeze: one rank of that host (not the coordinator's) SIGSTOPped as round 1 is announced;
          target: named unreachable, the others get verdicts, exit 3, health.json final within
          --timeout + 10 s of the freeze.
- startup: the last rank of that host (any host, node0's rank 0 included) SIGSTOPped 2 s after
          its process appears, while torch starts, before the world forms; target: named
          unreachable ("never joined"), the others judged among themselves, exit 3,
          health.json final within --timeout + 30 s of the freeze.
- matrix: the fault matrix of doc/health.md: kind (kill: SIGKILL; stop: SIGSTOP; cut: the host's
          link set down in its namespace) x role (rank0: node0, the coordinator's and the
          store's host; middle: node1; last: the last host) x phase (startup: 2 s after its
          process appeared; round1 / later: as `health: round 1` / `round 2` is announced;
          writing: once health.json is complete, while the verdict is written); target: the
          faulted host named dead or unreachable, nobody else flagged, exit 3, health.json
          written within --timeout + 15 s of the fault, no traceback on the console.
A hit names the faulty host; a miss does not; a false alarm is any other host flagged. Also
printed: the quick check's wall time on 4 x 1 (target <= 60 s) against the dry-run plan's
estimate (target within 25%). The link rate is the emulator's default (1/36 of the intra-node
p2p measured here by a first clean run), then given explicitly so every trial has the same.

Usage: sudo python scripts/perf_health.py [--layouts 4x1,8x1,4x2] [--trials 10]
                                          [--kinds rate,cpu,clean,freeze,startup] [--timeout 20]
       sudo python scripts/perf_health.py --kinds matrix --layouts 4x1 [--faults kill,stop,cut]
                                          [--roles rank0,middle,last]
                                          [--phases startup,round1,later,writing]
The machine may be shared: say `uptime` beside the figures; CPU contention is noise here.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI = [sys.executable, "-m", "allreduce_bench"]


def emulate(layout: str, out: Path, rate: str | None, extra: list[str], timeout_s: float,
            background: bool = False):
    nodes, per_node = layout.split("x")
    command = [*CLI, "emulate", "--nodes", nodes, "--ranks-per-node", per_node, "--benchmarks", "health",
               "--timeout", f"{timeout_s:g}", "--out", str(out), *(["--inter-bandwidth", rate] if rate else []),
               *extra]
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(command, capture_output=True, text=True)
    out.with_suffix(".log").write_text(done.stdout + done.stderr)  # why a trial had no result
    return done


def flagged(out: Path) -> tuple[set[str] | None, dict]:
    """The hosts not ok, or None when the run left no health.json (scored as a miss)."""
    try:
        doc = json.loads((out / "health.json").read_text())
    except (OSError, ValueError):
        return None, {"hosts": []}
    return {h["host"] for h in doc["hosts"] if h["verdict"] != "ok"}, doc


def ended(out: Path, reader: threading.Thread, lines: list[str], what: str):
    """A background trial's end: its output read to the end and kept beside it (`what` first),
    then (the output, the hosts not ok or None, each host's verdict)."""
    reader.join(timeout=5)
    output = "".join(lines)
    out.with_suffix(".log").write_text(f"{what}\n{output}")
    bad, doc = flagged(out)
    return output, bad, {h["host"]: h["verdict"] for h in doc["hosts"]}


def default_rate(work: Path, layout: str, timeout_s: float) -> tuple[str, float]:
    """The emulator's default link (auto: 1/36 of intra p2p measured here), from a clean run."""
    out = work / "probe"
    emulate(layout, out, None, [], timeout_s)
    bits = json.loads((out / "meta.json").read_text())["emulation"]["inter_rate_bps"]
    return f"{int(bits)}bit", bits


def worker_pids(driver: int, host: int) -> list[int]:
    """The rank processes of emulated host `host` of the emulate process `driver` (namespaces
    arb-<driver pid>-<token>-h<i>), not its torchrun agent."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    ns = next(n for n in names if n.startswith(f"arb-{driver}-") and n.endswith(f"-h{host}"))
    found = []
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"allreduce_bench" in cmd and b"torch.distributed.run" not in cmd and b"sh" != cmd[0]:
            found.append(int(pid))
    return sorted(found)


def final_verdict_at(proc, out: Path) -> float:
    """When health.json first said `finished` (or the run ended without it), waiting for the
    run to end."""
    final_at = None
    while proc.poll() is None:
        doc = out / "health.json"
        if final_at is None and doc.exists() and "finished" in doc.read_text():
            final_at = time.monotonic()
        time.sleep(0.2)
    return final_at or time.monotonic()


def freeze_trial(layout: str, out: Path, rate: str, timeout_s: float, host: int) -> dict:
    # the check's own sampling: the later rounds then cost what they cost a user (with
    # --samples 50 each re-pairing round took 2.9 s instead of 0.7). Frozen as round 1 is
    # announced, the rank is in its group's creation or first measurement; a freeze that
    # landed after its part of round 1 would show as a miss (nothing left to notice it)
    proc = emulate(layout, out, rate, [], timeout_s, background=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "health: round 1" in line:
            break
    pids = worker_pids(proc.pid, host)
    frozen_at = time.monotonic()
    os.kill(pids[-1], signal.SIGSTOP)
    # the rest of its output read as it comes (a full pipe would stall the run) and kept
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    final_at = final_verdict_at(proc, out)
    _, _, verdicts = ended(out, reader, lines, f"froze node{host}'s pid {pids[-1]}")
    return {"code": proc.returncode, "seconds": final_at - frozen_at, "verdicts": verdicts,
            "hit": verdicts.get(f"node{host}") == "unreachable"
                   and sum(v == "unreachable" for v in verdicts.values()) == 1}


def startup_trial(layout: str, out: Path, rate: str, timeout_s: float, host: int) -> dict:
    """Freeze host `host`'s last rank 2 s after its process appears (torch is still starting)."""
    proc = emulate(layout, out, rate, [], timeout_s, background=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    pids: list[int] = []
    while proc.poll() is None and len(pids) < int(layout.split("x")[1]):
        try:
            pids = worker_pids(proc.pid, host)
        except StopIteration:  # its namespace is not made yet
            pass
        time.sleep(0.05)
    time.sleep(2.0)
    os.kill(pids[-1], signal.SIGSTOP)
    frozen_at = time.monotonic()
    final_at = final_verdict_at(proc, out)
    output, bad, verdicts = ended(out, reader, lines, f"froze node{host}'s pid {pids[-1]}")
    target = f"node{host}"
    return {"code": proc.returncode, "seconds": final_at - frozen_at, "verdicts": verdicts,
            "joined_before_freeze": "never joined" not in output,
            "traceback": "Traceback" in output,
            "hit": verdicts.get(target) == "unreachable" and proc.returncode == 3,
            "miss": verdicts.get(target) != "unreachable",
            "false": len((bad or set()) - {target})}


def namespace_of(driver: int, host: int) -> str:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return next(n for n in names if n.startswith(f"arb-{driver}-") and n.endswith(f"-h{host}"))


def put_fault(kind: str, driver: int, host: int) -> bool:
    """SIGKILL or SIGSTOP the host's last rank, or set its link down; False when it has no
    rank left to fault (its part had ended)."""
    if kind == "cut":
        return subprocess.run(["ip", "-n", namespace_of(driver, host), "link", "set", f"node{host}",
                               "down"]).returncode == 0
    try:
        pid = worker_pids(driver, host)[-1]
        os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    except (IndexError, StopIteration, ProcessLookupError):
        return False
    return True


def matrix_trial(layout: str, out: Path, rate: str, timeout_s: float, kind: str, role: str,
                 phase: str) -> dict:
    """One case of the fault matrix (see the module's text), scored."""
    nodes = int(layout.split("x")[0])
    host = {"rank0": 0, "middle": 1, "last": nodes - 1}[role]
    proc = emulate(layout, out, rate, [], timeout_s, background=True)
    lines: list[str] = []
    said = threading.Event()
    announce = {"round1": "health: round 1:", "later": "health: round 2:"}.get(phase)

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if announce and line.startswith(announce):
                said.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if phase == "startup":
        while proc.poll() is None:
            try:
                if worker_pids(proc.pid, host):
                    break
            except StopIteration:  # its namespace is not made yet
                pass
            time.sleep(0.05)
        time.sleep(2.0)
    elif phase == "writing":
        doc = out / "health.json"
        while proc.poll() is None and not (doc.exists() and '"complete": true' in doc.read_text()):
            time.sleep(0.02)
    else:
        while proc.poll() is None and not said.wait(0.05):
            pass
    landed = proc.poll() is None and put_fault(kind, proc.pid, host)
    faulted_at = time.monotonic()
    try:
        proc.wait(timeout=timeout_s * 3 + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    seconds = time.monotonic() - faulted_at
    output, bad, verdicts = ended(out, reader, lines, f"{kind} node{host} at {phase} (landed: {landed})")
    target = f"node{host}"
    return {"kind": kind, "role": role, "phase": phase, "host": host, "landed": landed,
            "code": proc.returncode, "seconds": seconds, "verdicts": verdicts, "written": bad is not None,
            "hit": verdicts.get(target) in ("dead", "unreachable"),
            "false_ok": verdicts.get(target) == "ok",
            "false": len((bad or set()) - {target} - {h for h, v in verdicts.items() if v == "not judged"}),
            "traceback": "Traceback" in output or "ChildFailedError" in output}


def report_matrix(layout: str, trials: list[dict], timeout_s: float) -> None:
    """The matrix as doc/health.md's table, then the totals against the targets."""
    print(f"\n{layout}: | kind | role | phase | verdict of the faulted host | others | exit | s after "
          f"the fault | traceback |\n|---|---|---|---|---|---|---|---|")
    for t in trials:
        others = sorted({v for h, v in t["verdicts"].items() if h != f"node{t['host']}"})
        print(f"| {t['kind']} | {t['role']} (node{t['host']}) | {t['phase']} | "
              f"{t['verdicts'].get('node%d' % t['host'], '(no health.json)')}"
              f"{'' if t['landed'] else ' (the fault found no rank: its part had ended)'} | "
              f"{', '.join(others) or '-'} | {t['code']} | {t['seconds']:.1f} | "
              f"{'yes' if t['traceback'] else 'no'} |", flush=True)
    landed = [t for t in trials if t["landed"]]
    n = len(landed)
    print(f"{layout} matrix: {n} of {len(trials)} faults landed; hits {sum(t['hit'] for t in landed)}/{n}, "
          f"false ok {sum(t['false_ok'] for t in landed)}, false alarms {sum(t['false'] for t in trials)}, "
          f"exit 3 {sum(t['code'] == 3 for t in landed)}/{n}, health.json {sum(t['written'] for t in trials)}/"
          f"{len(trials)}, within --timeout + 15 s {sum(t['seconds'] <= timeout_s + 15 for t in trials)}/"
          f"{len(trials)} (max {max(t['seconds'] for t in trials):.1f} s), tracebacks "
          f"{sum(t['traceback'] for t in trials)}", flush=True)


def one_trial(kind: str, layout: str, out: Path, rate: str, bits: float, timeout_s: float, rng) -> dict:
    nodes = int(layout.split("x")[0])
    host = rng.randrange(1 if kind == "freeze" else 0, nodes)
    if kind == "freeze":
        return {"host": host, **freeze_trial(layout, out, rate, timeout_s, host)}
    if kind == "startup":
        return {"host": host, **startup_trial(layout, out, rate, timeout_s, host)}
    extra = {"rate": ["--host-bandwidth", f"node{host}={int(bits / 4)}bit"],
             "cpu": ["--host-cpu", f"node{host}=25%"], "clean": []}[kind]
    started = time.monotonic()
    done = emulate(layout, out, rate, extra, timeout_s)
    seconds = time.monotonic() - started
    bad, _ = flagged(out)
    target = set() if kind == "clean" else {f"node{host}"}
    if bad is None:  # the check did not complete
        return {"host": host, "code": done.returncode, "seconds": seconds, "flagged": ["(no result)"],
                "hit": False, "miss": True, "false": 0}
    return {"host": host, "code": done.returncode, "seconds": seconds, "flagged": sorted(bad),
            "hit": bad == target and done.returncode == (0 if kind == "clean" else 3),
            "miss": bool(target - bad), "false": len(bad - target)}


def plan_estimate(layout: str, bits: float) -> float:
    nodes, per_node = layout.split("x")
    done = subprocess.run([*CLI, "health", "--dry-run", "--hosts", nodes, "--ranks-per-node", per_node,
                           "--expect", f"inter={bits / 8e9:.6f}GB/s"], capture_output=True, text=True)
    return float(re.search(r"estimated wall time: (\d+) s when healthy", done.stdout).group(1))


def report(kind: str, layout: str, trials: list[dict]) -> None:
    n = len(trials)
    if kind == "freeze":
        ok = [t for t in trials if t["hit"] and t["code"] == 3]
        seconds = ", ".join(f"{t['seconds']:.1f}" for t in trials)
        others = sum(all(v != "unreachable" for h, v in t["verdicts"].items() if h != f"node{t['host']}")
                     for t in trials)
        print(f"{layout:>4} freeze: unreachable named with exit 3 in {len(ok)}/{n}, the others got "
              f"verdicts in {others}/{n}; freeze to final verdict (s): {seconds}", flush=True)
        return
    if kind == "startup":
        hits = sum(t["hit"] for t in trials)
        seconds = sorted(t["seconds"] for t in trials)
        print(f"{layout:>4} startup: hits {hits}/{n}, misses {sum(t['miss'] for t in trials)}, false alarms "
              f"{sum(t['false'] for t in trials)}, tracebacks {sum(t['traceback'] for t in trials)}, frozen "
              f"after joining {sum(t['joined_before_freeze'] for t in trials)}; hosts frozen "
              f"{[t['host'] for t in trials]}; freeze to final verdict (s): min {seconds[0]:.1f}, median "
              f"{seconds[n // 2]:.1f}, max {seconds[-1]:.1f} (target <= --timeout + 30)", flush=True)
        return
    hits = sum(t["hit"] for t in trials)
    misses = sum(t.get("miss", False) for t in trials)
    false = sum(t.get("false", 0) for t in trials)
    print(f"{layout:>4} {kind:>6}: hits {hits}/{n}, misses {misses}, false alarms {false} "
          f"(hosts flagged: {[t['flagged'] for t in trials]})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default="4x1,8x1,4x2")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--kinds", default="rate,cpu,clean,freeze,startup")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--faults", default="kill,stop,cut", help="matrix: the kinds of fault")
    parser.add_argument("--roles", default="rank0,middle,last", help="matrix: whose host")
    parser.add_argument("--phases", default="startup,round1,later,writing", help="matrix: when")
    parser.add_argument("--rate", help="The inter-node link (e.g. 400mbit) instead of measuring the default.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", help="Write the trials here (kept) instead of a temporary folder.")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"# {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="perf-health-") as tmp:
        work = Path(args.keep or tmp)
        rate, bits = (args.rate, 0.0) if args.rate else default_rate(work, "4x1", args.timeout)
        print(f"# the emulator's default link here: {rate} ({bits / 8e6:.1f} MB/s)", flush=True)
        for layout in args.layouts.split(","):
            if args.kinds == "matrix":
                cases = [(f, r, ph) for f in args.faults.split(",") for r in args.roles.split(",")
                         for ph in args.phases.split(",")]
                report_matrix(layout, [matrix_trial(layout, work / f"{layout}-{f}-{r}-{ph}-{i}", rate,
                                                    args.timeout, f, r, ph)
                                       for f, r, ph in cases for i in range(args.trials)], args.timeout)
                continue
            for kind in args.kinds.split(","):
                trials = [one_trial(kind, layout, work / f"{layout}-{kind}-{i}", rate, bits, args.timeout, rng)
                          for i in range(args.trials)]
                report(kind, layout, trials)
                if kind == "clean" and layout == "4x1":
                    wall = sorted(t["seconds"] for t in trials)[len(trials) // 2]
                    estimate = plan_estimate(layout, bits)
                    print(f"4x1 quick check wall time (median, emulate end to end): {wall:.1f} s "
                          f"(target <= 60); plan estimate {estimate:.0f} s, off by "
                          f"{100 * (estimate - wall) / wall:+.0f}% (target within 25%)", flush=True)
        print(f"# {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
