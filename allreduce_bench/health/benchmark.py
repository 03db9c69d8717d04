"""`allreduce-bench health` on every rank: rounds of sub-group checks coordinated through the store
by rank 0, with no world collective, so a frozen rank blocks only its own group (doc/health.md)."""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from allreduce_bench.core.algorithms import native
from allreduce_bench.core.environment import launcher_hosts
from allreduce_bench.core.host import cgroups, gpus
from allreduce_bench.core.measure import meta as run_meta
from allreduce_bench.core.measure.collective import Payload, measure
from allreduce_bench.core.measure.context import Benchmark
from allreduce_bench.core.measure.device import torch_dtype
from allreduce_bench.core.measure.progress import Board, Liveness
from allreduce_bench.core.measure.rank import Session
from allreduce_bench.core.measure.timing import Measured, Together
from allreduce_bench.core.measure.world import CommGroup, World
from allreduce_bench.core.results.schema import samples_frame
from allreduce_bench.core.results.store import start_meta_unless_launched
from allreduce_bench.core.sweep.rows import Point, make_row
from allreduce_bench.core.text import wrapped
from allreduce_bench.health import ending, pairing
from allreduce_bench.health.config import HealthConfig
from allreduce_bench.health.coordination import POLL_S, Groups, assemble
from allreduce_bench.health.decide import Measurement
from allreduce_bench.health.journal import Journal
from allreduce_bench.health.reference import MEDIAN_SE
from allreduce_bench.health.salvage import after_local_failure, survivor_writes
from allreduce_bench.health.verdicts import BAD_INPUT

NODELIST_ENV = "ALLREDUCE_BENCH_NODELIST"
# beyond --timeout before a silent rank is unreachable: one stuck on a frozen peer may not beat meanwhile
MARGIN_S = 2.0


class CoordinatorLost(RuntimeError):
    """Rank 0 stopped beating: nobody publishes the next round."""


@dataclass(frozen=True)
class Group:
    check: str  # intra | rail | pair | bisect
    rail: int | None
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]


def round_slots(kind: str, groups: list[list[str]], ranks_of: dict[str, list[int]],
                ranks_per_node: int) -> list[list[Group]]:
    """The slots of one round, each a list of disjoint groups measured side by side."""
    if kind == "intra":
        return [[Group("intra", None, (h,), tuple(ranks_of[h])) for (h,) in groups]]
    if kind == "bisect":
        return [[Group("bisect", None, tuple(g), tuple(r for h in g for r in ranks_of[h]))
                 for g in groups]]
    rails = [[Group("rail", i, (a, b), (ranks_of[a][i], ranks_of[b][i]))
              for a, b in groups for i in range(ranks_per_node)]] if ranks_per_node > 1 else []
    # the whole pair first: its group then keeps a pair's rails in lockstep (Rank._measure)
    return [[Group("pair", None, (a, b), tuple(ranks_of[a] + ranks_of[b])) for a, b in groups]] + rails


def _key(k: int, group: Group) -> str:
    return f"r{k}/{group.check}/{group.rail}/{group.ranks[0]}"


class Rank:
    """This rank's part in the rounds: make its groups, measure, report."""

    def __init__(self, session: Session, board: Board, liveness: Liveness, ranks_of: dict[str, list[int]],
                 ranks_per_node: int, hosts: list[str] | None = None, journal: Journal | None = None):
        self.session, self.board, self.liveness, self.ranks_of = session, board, liveness, ranks_of
        self.journal, self.ranks_per_node = journal, ranks_per_node
        # every launched host in launch order: those of ranks_of, and those that never came
        self.hosts = hosts or list(ranks_of)
        self.me = session.env.rank
        self.groups = Groups(session.config.launch.timeout_s)
        self.cpu_at_start = cgroups.cpu_throttle()

    def held_back(self) -> dict:
        """What held this rank back since the check began: CPU quota throttling, GPU clock events."""
        found = cgroups.throttled_since(self.cpu_at_start, cgroups.cpu_throttle())
        device = self.session.device
        if device.kind == "cuda":
            found["gpu_events"] = gpus.clock_events(device.physical_id)
        return found

    def take_part(self, k: int, plan: dict) -> None:
        """Measure every slot this rank is in; a lost member ends its part of the round, reported, not raised."""
        slots = round_slots(plan["kind"], plan["groups"], self.ranks_of, self.ranks_per_node)
        error, pairs = None, {}
        for index, slot in enumerate(slots):
            mine = next((g for g in slot if self.me in g.ranks), None)
            if mine is None:
                continue
            slot_number = plan["slot_base"] + index
            where = f"health round {k} ({mine.check} {'+'.join(mine.hosts)})"
            self.session.progress.at(k, index, where, mine.ranks)  # the phase a failure line names
            if self.journal:
                self.journal.note("round", k=k, where=where)
            try:
                assemble(self.board, self.liveness, slot_number, mine.ranks, self.me, self.liveness.timeout_s)
                pg = self.groups.new(mine.ranks, slot_number)
                if mine.check == "pair":
                    pairs[mine.hosts] = pg
                result = self._measure(mine, pg, pairs.get(mine.hosts) if mine.check == "rail" else None)
            except RuntimeError as failed:  # Absent, DistBackendError, DistStoreError: a lost member
                error = (str(failed).strip().splitlines() or [type(failed).__name__])[0][:300]
                break
            if self.me == mine.ranks[0]:
                self.board.put(_key(k, mine), result)
        self.groups.close(failed=error is not None)
        self.board.put(f"r{k}/done/{self.me}", {"error": error, "held_back": self.held_back()})
        self.board.add(f"r{k}/reported")

    def _measure(self, group: Group, pg, lockstep=None) -> dict:
        """Every size on this rank's group; a rail samples in lockstep with its pair's rails (shared links)."""
        config, device = self.session.config, self.session.device
        comm = CommGroup(pg, group.ranks, group.ranks.index(self.me))
        view = World(comm, comm, comm, len(group.ranks), device)
        sizes = []
        for size in config.sizes:
            count = size // config.itemsize
            measured, wrong = measure(native.ALGORITHM, view, Payload(count, torch_dtype(config.dtype)),
                                      config.sampling, together=Together(lockstep=lockstep))
            sizes.append({"count": count, "per_rank_us": measured.per_rank_us, "loops": measured.loops,
                          "samples": measured.samples, "wrong": wrong})
        return {"sizes": sizes}

    def follow(self) -> None:
        """Every rank: the rounds as published, until the end."""
        k = 1
        while not (plan := self._wait_plan(k)).get("end"):
            self.take_part(k, plan)
            k += 1

    def _wait_plan(self, k: int) -> dict:
        self.session.progress.at(k, 0, f"health: waiting for round {k}", (0,))
        checked = time.monotonic()
        while not self.board.has(f"r{k}/plan"):
            time.sleep(POLL_S)
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                if self.liveness.silent(0):
                    raise CoordinatorLost(f"the coordinator (rank 0 on {self.host_of(0)}) stopped "
                                          f"answering before round {k}")
                if self.board.has("failed"):
                    raise CoordinatorLost(f"the coordinator failed before round {k}: "
                                          f"{self.board.get('failed')}")
        return self.board.get(f"r{k}/plan")

    def host_of(self, rank: int) -> str:
        return next(h for h, ranks in self.ranks_of.items() if rank in ranks)


def wait_round(board: Board, liveness: Liveness, k: int, members: list[int],
               mates: dict[int, set[int]]) -> set[int]:
    """The silent ranks, once every member reported or stopped beating; a silent rank's mates are stuck on
    it and not waited for. Light (one counter read per poll), as it runs beside rank 0's measuring."""
    silent: set[int] = set()
    pending, reported, checked = set(members), -1, time.monotonic()
    while pending:
        if (count := board.add(f"r{k}/reported", 0)) != reported:
            reported = count
            pending -= {rank for rank in pending if board.has(f"r{k}/done/{rank}")}
        if pending and time.monotonic() - checked >= 1.0:
            checked = time.monotonic()
            for rank in sorted(pending):
                if rank in pending and liveness.silent(rank):
                    silent.add(rank)
                    pending -= {rank, *mates.get(rank, ())}
        if pending:
            time.sleep(POLL_S)
    return silent


def rows_of(session: Session, k: int, group: Group, result: dict):
    """(row, raw samples) per size of one group's result, in the schema of every benchmark."""
    config = session.config
    comm = CommGroup(None, group.ranks, 0)
    view = World(comm, comm, comm, len(group.ranks) // len(group.hosts), session.device)
    for size in result["sizes"]:
        measured = Measured(size["per_rank_us"], size["loops"], size["samples"])
        row = make_row(config, view, Point("native", size["count"]), measured, size["wrong"])
        row.update(benchmark="health", link="intra" if group.check == "intra" else "inter",
                   operation="allreduce", nodes=len(group.hosts),
                   measure=f"{group.check} round {k} {'+'.join(group.hosts)}"
                           + (f" rail {group.rail}" if group.rail is not None else ""),
                   health_check=group.check, health_round=k, hosts="+".join(group.hosts),
                   rail=group.rail)
        yield row, samples_frame(row, measured.per_rank_us, group.ranks, session.hosts)


def say(line: str) -> None:
    print(wrapped(line), file=sys.stderr, flush=True)


def collect(session: Session, board: Board, k: int, slots: list[list[Group]]) -> list:
    """Every group result of round k that came: rows and samples recorded, Measurements back."""
    found = []
    for slot in slots:
        for group in slot:
            if not board.has(_key(k, group)):
                continue  # a member was lost: the group measured nothing
            for row, samples in rows_of(session, k, group, board.get(_key(k, group))):
                session.record(row, samples)
                # a wrong result is a broken path, whatever its speed
                busbw = 0.0 if row["wrong"] else row["busbw_GBps"]
                found.append(Measurement(k, group.check, group.hosts, group.rail, row["size_bytes"],
                                         busbw, row["time_us_median"], median_noise(row)))
    return found


def median_noise(row: dict) -> float:
    """The relative standard error of a row's median time, from its samples' cv and count."""
    cv, samples = row.get("time_cv"), row.get("samples") or 0
    if cv is None or cv != cv or samples < 1:  # no spread known (NaN: a zero mean)
        return 0.0
    return MEDIAN_SE * float(cv) / samples ** 0.5


def coordinate(session: Session, rank: Rank, board: Board, liveness: Liveness, settings) -> None:
    """Rank 0: every round from plan to verdicts; health.json after each (complete at the end)."""
    from allreduce_bench.health.outputs import document
    from allreduce_bench.health.reference import Reference
    from allreduce_bench.health.rounds import HealthCheck
    from allreduce_bench.health.store import write_health

    config, L, hosts = session.config, rank.ranks_per_node, rank.hosts
    check = HealthCheck(hosts, L, Reference(config.sizes, settings.expect, settings.baseline),
                        settings.pairs, settings.bisect)
    absent = [h for h in hosts if h not in rank.ranks_of]
    layout = {"hosts": len(hosts), "ranks_per_node": L, "sizes": list(config.sizes),
              "pairs": settings.pairs, "bisect": settings.bisect, "backend": config.launch.backend,
              "device": session.device.kind, "timeout_s": config.launch.timeout_s}
    if absent:
        check.never_came(absent)
        layout["never_joined"] = absent
        say(f"health: {', '.join(absent)} never joined (not every rank of {'it' if len(absent) == 1 else 'them'} "
            f"came within --timeout {config.launch.timeout_s:g} s): unreachable; the {len(rank.ranks_of)} "
            f"host(s) that came are checked among themselves")
    slot_base = k = 0
    write_health(config.launch.out_dir, document(check, layout, complete=False, note="in progress: no round yet"))
    while (planned := check.next_round()) is not None:
        k += 1
        groups = [list(g) for g in planned.groups]
        slots = round_slots(planned.kind, groups, rank.ranks_of, L)
        say(f"health: round {k}: {planned.kind}, {len(groups)} group(s) side by side ({planned.why})")
        started = time.monotonic()
        board.put(f"r{k}/plan", {"kind": planned.kind, "groups": groups, "slot_base": slot_base})
        members = sorted({r for slot in slots for g in slot for r in g.ranks})
        for member in members:  # the timeout of silence runs from the round's start
            liveness.silent(member)
        mates: dict[int, set[int]] = {}
        for group in (g for slot in slots for g in slot):
            for member in group.ranks:
                mates.setdefault(member, set()).update(group.ranks)
        silent = wait_round(board, liveness, k, members, mates)
        lost = sorted({rank.host_of(r) for r in silent})
        if lost:
            say(f"health: round {k}: {', '.join(lost)} stopped answering (no heartbeat for "
                f"{config.launch.timeout_s + MARGIN_S:g} s): unreachable")
        check.record(planned, collect(session, board, k, slots), lost)
        for member in members:
            if member not in silent and board.has(f"r{k}/done/{member}"):
                check.held_back(rank.host_of(member), member,
                                board.get(f"r{k}/done/{member}").get("held_back"))
        check.seconds[planned.index] = round(time.monotonic() - started, 3)
        slot_base += len(slots)
        write_health(config.launch.out_dir, document(check, layout, complete=False,
                                              note=f"in progress: {k} round(s) measured"))
    board.put(f"r{k + 1}/plan", {"end": True})
    write_health(config.launch.out_dir, document(check, layout, note=_note(check)))


def run_rounds(session: Session, rank: Rank, board: Board) -> None:
    """Rank 0: coordinate on a thread, take part like every rank on this one; the coordinator's
    failure is raised here, after every rank was told to stop."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            coordinate(session, rank, board, Liveness(board, rank.liveness.timeout_s), session.config.settings)
        except BaseException as error:  # raised again on the main thread
            failed.append(error)
            board.put("failed", f"{type(error).__name__}: {error}"[:300])

    thread = threading.Thread(target=run, name="coordinator", daemon=True)
    thread.start()
    try:
        rank.follow()
    except CoordinatorLost:
        if not failed:
            raise
    thread.join()
    if failed:
        raise failed[0]


def _note(check) -> str:
    if len(check.hosts) == 1:
        return "a world of one host: only the intra check ran (pairs need two hosts)"
    if check.ranks_per_node == 1:
        return "one rank per host: no intra check and no rails (the pair check is the rail)"
    return ""


def measure_health(session: Session) -> int:
    """Every rank: the hosts from the gathered hostnames, then coordinate (rank 0) or follow."""
    config, env, end = session.config, session.env, session.progress.end
    L = config.launch.ranks_per_node or env.local_world_size
    came = session.presence  # health's world: the ranks that came (measure/world.py)
    assert came is not None  # a benchmark that joins_present has one
    launched = pairing.launched_host_names(came.hostnames, L, launcher_hosts(NODELIST_ENV),
                                           local=session.local)
    names = [launched[r] for r in came.members]
    ranks_of = pairing.host_ranks(names)
    problem = pairing.layout_problem(ranks_of, L)
    if problem:  # the same on every rank; rank 0 says it
        if session.writer:
            end.exit(f"allreduce-bench health: error: {problem}", code=BAD_INPUT)
        os._exit(BAD_INPUT)
    session.hosts = names
    journal = Journal(config.launch.out_dir, came.members[env.rank], host=names[env.rank], world_rank=env.rank,
                      coordinator=names[0])
    board, limit_s = Board("health", env.rank), config.launch.timeout_s + MARGIN_S
    hosts = list(dict.fromkeys(launched))  # every launched host, in launch order
    rank = Rank(session, board, Liveness(board, limit_s), ranks_of, L, hosts, journal)

    def lost(said: str) -> None:
        journal.note("lost", host=names[0], why=said)
        code = None
        if not (session.local or config.launch.emulation):  # no process of ours outlives the ranks
            code = survivor_writes(config, hosts, journal.started - config.launch.timeout_s)
        end.exit(f"allreduce-bench health: rank {env.rank}: {said}; what it measured is kept in "
                 f"{config.launch.out_dir}", code=1 if code is None else code)

    threading.Thread(target=_watch_store, args=(board, session.progress, names[0], lost, limit_s),
                     daemon=True, name="store-watch").start()
    if env.rank != 0:
        threading.Thread(target=_watch_coordinator, args=(board, session.progress, names[0], lost, limit_s),
                         daemon=True, name="coordinator-watch").start()
    held = False
    try:
        if session.writer:
            run_rounds(session, rank, board)
        else:
            rank.follow()
        if not session.local:  # the confirmation at the end of the check (health/ending.py)
            session.progress.at(0, 0, "the end of the check (confirming it is still there)", (0,))
            journal.note("ending")
            if session.writer:
                ending.hold(session.run, board, ranks_of)
            else:
                ending.answer(board)
            held = session.writer
    except (CoordinatorLost, RuntimeError) as error:  # RuntimeError: the store (its host) is gone
        lost(str(error) if isinstance(error, CoordinatorLost) else
             f"lost the coordinator (rank 0 on {names[0]}) and the launcher's store at {session.progress.where}: "
             f"{(str(error).strip().splitlines() or [type(error).__name__])[0][:200]}")
    finally:
        if not held:
            board.close()
    journal.note("end")
    return 0


def _watch_coordinator(board: Board, progress, coordinator: str, lost, limit_s: float) -> None:
    """A coordinator that stopped beating ends this rank with its one line, whatever the rank is blocked in."""
    liveness = Liveness(board, limit_s)
    while not board.closed:
        try:
            if liveness.silent(0):
                lost(f"the coordinator (rank 0 on {coordinator}) stopped answering at {progress.where}")
        except RuntimeError:  # the store is gone: the main thread says so
            return
        time.sleep(1.0)


def _watch_store(board: Board, progress, coordinator: str, lost, limit_s: float) -> None:
    """A store that stopped answering (its calls hang rather than fail) ends this rank with its one line."""
    while board.unanswered_s() <= limit_s:
        if board.closed:
            return
        time.sleep(1.0)
    lost(f"the launcher's store (with the coordinator on {coordinator}) did not answer for "
         f"{limit_s:g} s at {progress.where}")


def prepare(config: HealthConfig) -> None:
    start_meta_unless_launched(config, run_meta.host_meta)


def whole_world(config: HealthConfig) -> list[int]:
    return [max(config.launch.world_sizes)]


BENCHMARK = Benchmark("health", run_meta.host_meta, measure_health, prepare=prepare,
                      world_sizes=whole_world, joins_present=True, salvage=after_local_failure)
