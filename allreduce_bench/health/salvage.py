"""The verdict when hosts died or froze, written by a process that is still alive: the one that
launched the hosts (`emulate`, the local driver), which outlives every rank, the coordinator
and the launcher's store; under srun, mpirun or torchrun across hosts, the first survivor
that lost the coordinator (`survivor_writes`).

It reads the coordinator's last health.json (written after every round), every rank's journal
(health/journal.py) and how each host's launch ended, and names:

- `dead`: a host whose rank died (its launcher reports the signal, e.g. SIGKILL);
- `unreachable`: a host whose launch still ran, silent, when the others had ended or given up
  (frozen, or its link cut); and of the hosts that lost contact with each other, the smaller
  side: the hosts that say they lost the coordinator (its host, the store's) when they
  outnumber the hosts that stayed with it to the end, else those that say so;
- everyone else keeps the coordinator's verdict, or is `not judged` when it had none, or when
  the coordinator named it unreachable from the side cut off.
"""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from allreduce_bench.health.journal import CLAIM, JOURNAL_DIR, read_journals
from allreduce_bench.health.store import HEALTH_FILE, outcome, write_health
from allreduce_bench.health.verdicts import NOT_JUDGED, UNHEALTHY

if TYPE_CHECKING:
    from allreduce_bench.core.measure.context import Run
    from allreduce_bench.health.config import HealthConfig

FINAL_GRACE_S = 5.0  # beyond --timeout after the verdict, for the others to end or give up
LOST_GRACE_S = 12.0  # beyond --timeout after a launch failed and the check stopped moving


def _fates(codes: list[int | None], worker_exits: list[int | None]) -> dict[str, str]:
    return {f"node{i}": _ended_how(c, w) for i, (c, w) in enumerate(zip(codes, worker_exits))}


STOPPED = "stopped by its launcher"  # a local world's rank ended by torch's launcher (SIGTERM)


def after_local_failure(run: Run, exits: dict[int, int], since: float) -> int:
    """The local driver's verdict once torch's launcher stopped a local world because a rank
    died or gave up: `exits`, launched rank -> exit code of each rank failed by then (the
    launcher stopped the others: their journals say whether they had ended their part). The
    simulated hosts are node0, node1, ... of --ranks-per-node ranks each."""
    config = run.config
    per_node = config.launch.ranks_per_node or 1
    worst = ("ended", STOPPED, "lost")  # then a signal: dead
    fates: dict[str, str] = {}
    for rank in range(max(config.launch.world_sizes)):
        code = exits.get(rank, -signal.SIGTERM)
        fate = STOPPED if code == -signal.SIGTERM else _ended_how(None, code) if code < 0 else "lost"
        host = f"node{rank // per_node}"
        was = fates.get(host, "ended")
        fates[host] = fate if fate not in worst or was in worst and worst.index(fate) > worst.index(was) else was
    out_dir = config.launch.out_dir
    return conclude(out_dir, fates, read_journals(out_dir, since), since, config.settings.prometheus)


SURVIVOR_WAIT_S = 3.0  # for the other survivors' journals to say they lost the coordinator too


def survivor_writes(config: HealthConfig, hosts: list[str], since: float) -> int | None:
    """Under srun, mpirun or torchrun across hosts no process of ours outlives the ranks: the
    first survivor that lost the coordinator claims the verdict (a file created exclusively
    beside the journals, on the shared results folder) and writes it from the journals alone;
    a host nobody heard end is `unreachable` where the others lost it (the coordinator's), else
    `not judged`. The exit code, or None where another survivor claimed it."""
    import os

    claim = Path(config.launch.out_dir) / JOURNAL_DIR / CLAIM
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:
        return None
    time.sleep(SURVIVOR_WAIT_S)
    journals = read_journals(config.launch.out_dir, since)
    by_host = _by_host(journals)
    lost = {h for h, ranks in by_host.items() if any(e["event"] == "lost" for events in ranks for e in events)}
    fates = {h: "lost" if h in lost else "ended" if _finished_part(by_host.get(h, []), False) else STOPPED
             for h in hosts}
    return conclude(config.launch.out_dir, fates, journals, since, config.settings.prometheus)


def _ended_how(code: int | None, worker_exit: int | None) -> str:
    """A host's launch as salvage reads it: running, ended (0, or health's verdict 3), dead
    (its rank died by a signal: 'SIGKILL'), or lost (it gave up by itself, with its line)."""
    if worker_exit is not None and worker_exit < 0:
        try:
            return signal.Signals(-worker_exit).name
        except ValueError:
            return f"signal {-worker_exit}"
    return "running" if code is None else "ended" if code in (0, UNHEALTHY) else "lost"


def _by_host(journals: dict[int, list[dict]]) -> dict[str, list[list[dict]]]:
    """Each host's ranks' journals."""
    found: dict[str, list[list[dict]]] = {}
    for rank in sorted(journals):
        events = journals[rank]
        if events and events[0]["event"] == "joined":
            found.setdefault(events[0]["host"], []).append(events)
    return found


def _finished_part(ranks: list[list[dict]], finished: bool) -> bool:
    """Every rank of a host ended its part (its launcher may still wait on the others'; it may
    wait for the writer's request to confirm: `ending`), and the writer (world rank 0) wrote
    the verdict (`finished`)."""
    return bool(ranks) and all(events[-1]["event"] in ("end", "ending") and (finished or events[0].get("world_rank"))
                               for events in ranks)


def _settled(fates: dict[str, str], by_host: dict[str, list[list[dict]]], finished: bool) -> dict[str, str]:
    """A launch whose ranks all ended their part has ended, whatever torchrun says: it still
    runs while its exit barrier waits for a host that died, and exits 1 for health's 3."""
    return {h: "ended" if fate in ("running", "lost", STOPPED) and _finished_part(by_host.get(h, []), finished)
            else fate for h, fate in fates.items()}


def _accused(by_host: dict[str, list[list[dict]]]) -> set[str]:
    """The hosts some rank said it lost (the coordinator's, the store's)."""
    return {e["host"] for ranks in by_host.values() for events in ranks for e in events
            if e["event"] == "lost" and e.get("host") is not None}


class Watch:
    """emulate's watch over a health check's launches (emulate/processes.py calls `done` each
    poll and `result` once): it waits while the check can still end by itself, and writes the
    verdict from what survived when it cannot. The launcher's store lives in `store_host`'s
    launch (emulate's static rendezvous: host 0's torchrun)."""

    def __init__(self, out_dir, since: float, config: HealthConfig, store_host: str = "node0"):
        self.out_dir, self.since, self.store_host = Path(out_dir), since, store_host
        self.timeout_s, self.prometheus = config.launch.timeout_s, config.settings.prometheus
        self._first: dict[str, float] = {}  # when each state was first seen: failed, final, complete

    def _seen(self, what: str) -> float:
        return time.monotonic() - self._first.setdefault(what, time.monotonic())

    def _fates(self, codes, worker_exits, by_host) -> dict[str, str]:
        final = outcome(self.out_dir, self.since) is not None
        return _settled({f"node{i}": _ended_how(c, w) for i, (c, w) in enumerate(zip(codes, worker_exits))},
                        by_host, final)

    def done(self, codes: list[int | None], worker_exits: list[int | None]) -> bool:
        by_host = _by_host(read_journals(self.out_dir, self.since))
        fates = self._fates(codes, worker_exits, by_host)
        running = {h for h, fate in fates.items() if fate == "running"}
        lost = {h for h, fate in fates.items() if fate not in ("running", "ended")}
        if not running:
            return True
        doc = _last_document(self.out_dir, self.since) or {}
        if doc.get("finished"):  # the rest: named by a verdict of the majority, or past their timeout
            named = _named_in(doc)
            return (self.store_host in named  # its writer found itself cut off: the rest hang on its store
                    or running <= named | _accused(by_host) and 2 * len(named) < len(fates)
                    or self._seen("final") > self.timeout_s + FINAL_GRACE_S)
        if self.store_host in lost:
            return True  # nobody goes on without the launcher's store
        accused, accusers = _accused(by_host), {h for h in fates if _accused({h: by_host.get(h, [])})}
        if lost and (running <= accused and set(fates) - accused <= accusers or
                     min(self._seen("failed"), self._quiet_s()) > self.timeout_s + LOST_GRACE_S):
            return True  # every other host lost the ones left, or the check stopped moving
        return bool(doc.get("complete")) and self._seen("complete") > self.timeout_s

    def _quiet_s(self) -> float:
        """Seconds since the check last moved: a round written, a journal line."""
        paths = [self.out_dir / HEALTH_FILE, *(self.out_dir / JOURNAL_DIR).glob("rank-*.jsonl")]
        times = []
        for path in paths:
            try:
                times.append(path.stat().st_mtime)
            except OSError:
                continue
        return time.time() - max(times, default=self.since)

    def result(self, codes: list[int | None], worker_exits: list[int | None]) -> int:
        journals = read_journals(self.out_dir, self.since)
        fates = self._fates(codes, worker_exits, _by_host(journals))
        final = outcome(self.out_dir, self.since)
        if final is not None and (not _accused(_by_host(journals)) and all(f == "ended" for f in fates.values())
                                  or self.store_host in _named_in(_last_document(self.out_dir, self.since))):
            return final  # the check ended by itself (its writer found itself cut off), nothing to add
        if final is None and fates.get(self.store_host) != "running":  # the others lost the store
            fates = {h: "lost" if fate == "running" else fate for h, fate in fates.items()}
        return conclude(self.out_dir, fates, journals, self.since, self.prometheus)


def _named_in(doc: dict | None) -> set[str]:
    return {h["host"] for h in (doc or {}).get("hosts", []) if h["verdict"] in ("unreachable", "dead")}


def _last_document(out_dir: Path, since: float) -> dict | None:
    path = out_dir / HEALTH_FILE
    try:
        if path.stat().st_mtime < since:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _phase(events: list[dict]) -> str:
    """Where a host's rank was, from its journal: the round and group, or start-up."""
    if not events:
        return "at start-up (before the world formed)"
    if events[-1]["event"] == "end":
        return "after its part of the check had ended"
    if events[-1]["event"] == "ending":
        return "at the end of the check (its part measured)"
    rounds = [e for e in events if e["event"] == "round"]
    return f"in {rounds[-1]['where']}" if rounds else "after the world formed, before its first round"


def _name(fates: dict[str, str], by_host: dict[str, list[list[dict]]]) -> tuple[dict[str, tuple[str, str]], bool]:
    """The hosts named (host -> (verdict, why)), and whether the coordinator was among them or
    on the side cut off (its verdicts on the others are then void). See the module's text."""
    events_of = {h: sorted((e for events in ranks for e in events), key=lambda e: e["t"])
                 for h, ranks in by_host.items()}
    lost = {h for h, events in events_of.items() if any(e["event"] == "lost" for e in events)}
    lost |= {h for h, fate in fates.items() if fate == "lost"}
    stayed = {h for h, fate in fates.items() if fate == "ended" and h not in lost}
    coordinator = next((e.get("coordinator") for events in events_of.values() for e in events[:1]), None)
    named: dict[str, tuple[str, str]] = {}
    accused = _accused(by_host)
    for host, fate in fates.items():
        phase = _phase(events_of.get(host, []))
        if fate not in ("running", "ended", "lost", STOPPED):
            named[host] = ("dead", f"its rank died ({fate}, as its launcher reported) {phase}")
        elif host not in lost and (fate == "running" or fate == STOPPED and host in accused):
            named[host] = ("unreachable", f"silent {phase} while the others ended or gave up: frozen, "
                                          "or cut off from them")
    cut_off_side = stayed if len(lost) > len(stayed) else lost
    for host in cut_off_side - set(named):
        others = "the hosts that stayed with the coordinator" if cut_off_side is lost else \
            f"the {len(lost)} host(s) that lost the coordinator on it"
        named[host] = ("unreachable", f"cut off {_phase(events_of.get(host, []))}: {others} outnumber it")
    if not named and not stayed:  # every host lost someone (a frozen coordinator that woke, too):
        for host in fates:  # the host most of the others lost is the one cut off
            by = {h for h, events in events_of.items() if h != host and
                  any(e["event"] == "lost" and e.get("host") == host for e in events)}
            if len(by) > (len(fates) - 1) / 2:
                named[host] = ("unreachable", f"lost {_phase(events_of.get(host, []))} by {len(by)} of the "
                                              f"{len(fates) - 1} other host(s)")
    return named, coordinator in cut_off_side or coordinator in named


def conclude(out_dir, fates: dict[str, str], journals: dict[int, list[dict]], since: float = 0.0,
             prometheus: str | None = None) -> int:
    """Write health.json, kubectl.sh (and `prometheus`' gauges) from what survived (see the
    module's text), say it in one summary, and return the exit code. `fates`: host -> how its
    launch ended."""
    from allreduce_bench.core.results.store import read_meta
    from allreduce_bench.health.outputs import finish_document, summary, write_kubectl, write_prometheus

    out_dir = Path(out_dir)
    by_host = _by_host(journals)
    doc = _last_document(out_dir, since) or {"layout": {}, "hosts": [], "rails": [], "pairs": [],
                                             "rounds": [], "complete": False}
    named, cut_off = _name(_settled(fates, by_host, bool(doc.get("finished"))), by_host)
    known = {h["host"]: h for h in doc["hosts"]}
    hosts = []
    for host in sorted(set(fates) | set(known), key=lambda h: (len(h), h)):
        was = known.get(host, {"host": host, "partners": []})
        if host in named and was.get("verdict") != named[host][0]:
            verdict, why = named[host]
            hosts.append({**was, "verdict": verdict, "why": why})
        elif host in named:  # the coordinator named it so already, and said why
            hosts.append(was)
        elif host not in known or was["verdict"] in ("unreachable", "dead") or (
                was["verdict"] == NOT_JUDGED and not doc.get("complete")):
            # (a coordinator cut off from the others named them unreachable: void)
            hosts.append({**was, "verdict": NOT_JUDGED, "why": "not judged: the check stopped before it was measured"})
        else:
            hosts.append(was)
    if doc.get("finished") and hosts == doc["hosts"]:
        return int(doc["exit_code"])  # the check ended by itself and said it all
    rails = [{**r, "verdict": named[r["host"]][0], "why": named[r["host"]][1]} if r["host"] in named else r
             for r in doc.get("rails", [])]
    doc = finish_document({**doc, "hosts": hosts, "rails": rails, "salvaged": True,
                           "stopped": [{"host": h, "verdict": v, "why": why} for h, (v, why) in sorted(named.items())],
                           "complete": doc.get("complete", False) and not cut_off,
                           "note": "; ".join(f"{h} {v}: {why}" for h, (v, why) in sorted(named.items()))
                           or doc.get("note", "")})
    write_health(out_dir, doc)
    if prometheus:
        write_prometheus(Path(prometheus), doc)
    print(f"kubectl: {write_kubectl(out_dir, doc, read_meta(out_dir))}\n"
          f"health: {out_dir / HEALTH_FILE} (written from what survived)\n\n"
          f"{summary(doc)}", flush=True)
    write_health(out_dir, {**doc, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return int(doc["exit_code"])
