"""Which rank hung, and on what: per process group the collectives are lined up by sequence
number, and the first where the members part ways is where the job hung (doc/hang.md names the
reasons). Pure: Dumps in, a Verdict out; no torch."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the dumps as hang/dumps.py reads them
    from allreduce_bench.hang.dumps import Dump, Entry

# collectives whose every member passes the same input sizes (not uneven alltoall, gather, scatter)
SAME_SIZES = {"all_reduce", "allreduce", "allreduce_coalesced", "broadcast", "_broadcast_oop",
              "reduce", "_reduce_oop", "all_gather", "_allgather_base", "allgather",
              "all_gather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "barrier"}
LIBRARY_FRAMES = ("/torch/", "/multiprocessing/", "<string>", "/runpy.py", "/threading.py")
_DESC = re.compile(r"ranks (\d+(?:,\d+)*)$")
SHOWN = 3  # agreed collectives shown before the one where the members part ways


@dataclass(frozen=True)
class Culprit:
    rank: int
    host: str | None
    collective: str | None
    seq: int | None
    group: str | None
    reason: str  # never_entered | mismatch | no_dump
    detail: str
    input_sizes: list | None = None
    input_dtypes: list | None = None
    stack: list[str] = field(default_factory=list)  # the Python stack of `stack_of`'s call
    stack_of: str = ""  # 'rank R' (the culprit's own call) or 'ranks ...' (where the others wait)
    group_desc: str = ""  # the group's description ('default_pg', 'ranks 2,3')


@dataclass
class Verdict:
    ranks: list[int]  # every rank expected (the groups' members and the dumps')
    dumped: list[int]
    culprits: list[Culprit]
    missing_dumps: list[int]
    groups: list[dict]  # per group: members, and its last collectives rank by rank
    notes: list[str]

    @property
    def exit_code(self) -> int:
        return 3 if self.culprits else 0

    def as_dict(self) -> dict:
        return {"verdict": "culprit" if self.culprits else "agree",
                "culprits": [asdict(c) for c in self.culprits], "ranks": self.ranks,
                "dumped": self.dumped, "missing_dumps": self.missing_dumps,
                "groups": self.groups, "notes": self.notes}


def signature(entry: Entry) -> tuple:
    sizes = entry.input_sizes if entry.collective in SAME_SIZES else None
    return entry.collective, sizes, entry.input_dtypes


def describe(entry: Entry | None) -> str:
    if entry is None:
        return "?"
    dtypes = ",".join(entry.input_dtypes) or "?"
    return f"{entry.collective} sizes {list(map(list, entry.input_sizes))} {dtypes}"


@dataclass
class Group:
    name: str
    desc: str
    members: tuple[int, ...]
    calls: dict[int, dict[int, Entry]]  # rank -> seq -> entry (the ranks that dumped)

    def last(self, rank: int) -> int:
        return max(self.calls[rank], default=0)


def groups_of(dumps: list[Dump]) -> list[Group]:
    """Every process group the dumps name, each member's collectives by seq (split groups apart)."""
    found: dict[tuple, Group] = {}
    for dump in dumps:
        for name in sorted({e.group for e in dump.entries}):
            desc, ranks = dump.groups.get(name, ("", ()))
            desc = desc or next((e.desc for e in dump.entries if e.group == name and e.desc), "")
            group = found.setdefault((name, ranks), Group(name, desc, ranks, {}))
            calls = {e.seq: e for e in dump.entries if e.group == name and not e.is_p2p}
            if calls and (dump.rank in ranks or not ranks):  # point-to-point only: no collective
                group.calls[dump.rank] = calls
    return [g for _, g in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1]))]


def members_from_desc(desc: str) -> tuple[int, ...]:
    found = _DESC.search(desc or "")
    return tuple(int(r) for r in found.group(1).split(",")) if found else ()


def _members(groups: list[Group], world: set[int]) -> None:
    """A group no pg_config lists: its description's ranks, the world (default group), its dumps'."""
    for group in groups:
        if not group.members:
            default = group.name == "0" or group.desc == "default_pg"
            group.members = (members_from_desc(group.desc) or
                             (tuple(sorted(world)) if default else tuple(sorted(group.calls))))


def _majority(entries: dict[int, Entry], before: list[dict[int, Entry]]) -> tuple | None:
    """The expected signature at one seq: the most common, a tie to the one last agreed on."""
    counts = Counter(signature(e) for e in entries.values()).most_common()
    if len(counts) == 1 or counts[0][1] > counts[1][1]:
        return counts[0][0]
    tied = {sig for sig, n in counts if n == counts[0][1]}
    for earlier in reversed(before):
        agreed = {signature(e) for e in earlier.values()}
        if len(agreed) == 1 and agreed & tied:
            return agreed.pop()
    return None


def _late(entries: dict[int, Entry]) -> dict[int, float]:
    """Members that called only after the first caller's timeout had passed (seconds late)."""
    times = {r: e.time_created_ns for r, e in entries.items() if e.time_created_ns}
    if len(times) < 2:
        return {}
    first = min(times.values())
    timeout_ms = min((e.timeout_ms for e in entries.values() if e.timeout_ms), default=None)
    if not timeout_ms:
        return {}
    return {r: (t - first) / 1e9 for r, t in times.items() if (t - first) / 1e6 > timeout_ms}


def diverged(group: Group) -> tuple[int, list[tuple[int, str, str]]] | None:
    """(seq, [(rank, reason, detail)]) where the members first part ways, or None."""
    ranks = sorted(group.calls)
    held = [r for r in ranks if group.calls[r]]
    if not held:
        return None
    # entries older than a rank's ring buffer are gone: start where every member still has them
    start = max(min(group.calls[r]) for r in held)
    seqs = sorted({s for r in held for s in group.calls[r] if s >= start})
    before: list[dict[int, Entry]] = []
    for seq in seqs:
        entries = {r: group.calls[r][seq] for r in ranks if seq in group.calls[r]}
        behind = [r for r in ranks if group.last(r) < seq]
        found = _parted(entries, behind, before)
        if found:
            return seq, found
        before.append(entries)
    return None


def _parted(entries: dict[int, Entry], behind: list[int], before) -> list[tuple[int, str, str]]:
    if behind and len(entries) < len(behind):
        # the few ran ahead into a call the many never made: they called something else
        callers = ",".join(map(str, sorted(entries)))
        return [(r, "mismatch", f"called {describe(e)} that ranks "
                 f"{','.join(map(str, behind))} never called (only rank(s) {callers} did)")
                for r, e in sorted(entries.items())]
    found = []
    expected = _majority(entries, before) if entries else None
    for rank, entry in sorted(entries.items()):
        if expected is None or signature(entry) != expected:
            others = sorted(r for r, e in entries.items() if signature(e) != signature(entry))
            found.append((rank, "mismatch", f"called {describe(entry)} where rank(s) "
                          f"{','.join(map(str, others))} called "
                          f"{describe(entries[others[0]]) if others else '?'}"))
    for rank in behind:
        found.append((rank, "never_entered", "its dump ends before this collective"))
    if not found:
        for rank, late_s in sorted(_late(entries).items()):
            found.append((rank, "never_entered", f"called it {late_s:.1f} s after the first rank, "
                          "past the timeout (the others had given up)"))
    return found


def _culprit(group: Group, seq: int, rank: int, reason: str, detail: str, hosts: dict) -> Culprit:
    own = group.calls.get(rank, {}).get(seq)
    theirs = [e for r, calls in group.calls.items() if r != rank and (e := calls.get(seq))]
    shown = own or (theirs[0] if theirs else None)
    waiting = sorted(r for r, calls in group.calls.items() if r != rank and seq in calls)
    return Culprit(rank=rank, host=hosts.get(rank), collective=shown.collective if shown else None,
                   seq=seq, group=group.name, reason=reason, detail=detail,
                   input_sizes=[list(s) for s in shown.input_sizes] if shown else None,
                   input_dtypes=list(shown.input_dtypes) if shown else None,
                   stack=user_frames(shown.stack) if shown else [],
                   stack_of=f"rank {rank}" if own else f"ranks {ranges(waiting)}" if shown else "",
                   group_desc=group.desc)


def group_label(name: str | None, desc: str = "") -> str:
    """'group 0 (default_pg)', 'group 804ea4b75856 (ranks 2,3)': a hash's first 12 characters."""
    short = name if name is None or len(name) <= 12 else name[:12]
    return f"group {short}" + (f" ({desc})" if desc else "")


def user_frames(stack: tuple[str, ...]) -> list[str]:
    """The frames of the program itself (all of them where nothing else is left)."""
    mine = [f for f in stack if not any(part in f for part in LIBRARY_FRAMES)]
    return mine or list(stack)


def _waited(entry: Entry, times: list[int]) -> bool:
    """Whether a rank hung in `entry`: nothing called after, or only a timeout later (not its state)."""
    if not entry.time_created_ns:
        return True
    later = [t for t in times if t > entry.time_created_ns]
    return not later or (min(later) - entry.time_created_ns) / 1e6 >= (entry.timeout_ms or 0) > 0


def _no_dump(groups: list[Group], missing: list[int], hosts: dict,
             times: dict[int, list[int]]) -> list[Culprit]:
    """Each missing rank at the latest collective of its groups that all who entered hung in."""
    found = []
    for rank in missing:
        best = None
        for group in groups:
            if rank not in group.members:
                continue
            last = max((max(calls) for calls in group.calls.values() if calls), default=None)
            entered = {r: calls[last] for r, calls in group.calls.items() if last in calls}
            # a hung collective holds every member that entered it: all of them waited
            if entered and all(_waited(e, times.get(r, [])) for r, e in entered.items()):
                entry = min(entered.values(), key=lambda e: e.time_created_ns or 0)
                key = (entry.time_created_ns or 0, entry.seq)
                if best is None or key > best[0]:
                    best = (key, group, entry)
        if best is None:
            found.append(Culprit(rank, hosts.get(rank), None, None, None, "no_dump",
                                 "no dump, and no member of its groups hung in a collective with "
                                 "it: it stopped outside one (e.g. while a group was being created)"))
            continue
        _, group, entry = best
        waiting = sorted(r for r, calls in group.calls.items() if calls.get(entry.seq))
        found.append(_culprit(group, entry.seq, rank, "no_dump",
                              f"no dump; rank(s) {','.join(map(str, waiting))} entered this "
                              "collective and waited on it (dead, frozen or killed before it dumped)",
                              hosts))
    return found


def verdict(dumps: list[Dump], hosts: list[str] | dict | None = None,
            world_size: int | None = None) -> Verdict:
    """One job's verdict; `hosts` and `world_size` where the dumps do not say."""
    names = dict(enumerate(hosts)) if isinstance(hosts, list) else dict(hosts or {})
    names.update({d.rank: d.host for d in dumps if d.host})
    groups = groups_of(dumps)
    expected = {r for d in dumps for _, ranks in d.groups.values() for r in ranks}
    expected |= {r for g in groups for r in g.members} | {d.rank for d in dumps}
    # a gap is a rank without a dump (those above the highest only `world_size` or hosts tell)
    expected |= set(range(max(expected, default=-1) + 1)) | set(range(world_size or len(names)))
    _members(groups, expected)
    dumped = sorted(d.rank for d in dumps)
    missing = sorted(expected - set(dumped))
    culprits: dict[int, Culprit] = {}
    tables = []
    for group in groups:
        found = diverged(group)
        tables.append(table(group, found[0] if found else None, missing))
        seq, parted = found or (0, [])
        for rank, reason, detail in parted:
            culprits.setdefault(rank, _culprit(group, seq, rank, reason, detail, names))
    if not culprits and missing:
        times = {d.rank: sorted(e.time_created_ns for e in d.entries if e.time_created_ns) for d in dumps}
        culprits = {c.rank: c for c in _no_dump(groups, missing, names, times)}
    notes = sorted({f"rank {d.rank}: {n}" if len(dumps) == 1 else n for d in dumps for n in d.notes})
    versions = sorted({d.version for d in dumps})
    if len(versions) > 1:
        notes.append(f"the dumps come from Flight Recorder versions {', '.join(versions)}")
    return Verdict(ranks=sorted(expected), dumped=dumped, culprits=list(culprits.values()),
                   missing_dumps=missing, groups=tables, notes=notes)


def table(group: Group, parted_at: int | None, missing: list[int]) -> dict:
    """A group's members and last collectives: per seq who entered, completed and never reached it."""
    ranks = sorted(group.calls)
    seqs = sorted({s for calls in group.calls.values() for s in calls})
    end = parted_at if parted_at is not None else (seqs[-1] if seqs else 0)
    shown = [s for s in seqs if s <= end][-(SHOWN + 1):]
    rows = []
    for seq in shown:
        entries = {r: group.calls[r][seq] for r in ranks if seq in group.calls[r]}
        common = Counter(describe(e) for e in entries.values()).most_common(1)
        rows.append({"seq": seq, "collective": common[0][0] if common else "?",
                     "entered": sorted(entries),
                     "completed": sorted(r for r, e in entries.items() if e.state == "completed"),
                     "never_reached": [r for r in ranks if group.last(r) < seq],
                     "other_call": {str(r): describe(e) for r, e in entries.items()
                                    if describe(e) != common[0][0]},
                     "state": sorted({e.state for e in entries.values()})})
    return {"group": group.name, "desc": group.desc, "members": list(group.members),
            "no_dump": [r for r in group.members if r in missing], "parted_at": parted_at,
            "collectives": rows}


def ranges(ranks: list[int]) -> str:
    out: list[str] = []
    run: list[int] = []
    for r in sorted(ranks):
        if run and r != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
            run = []
        run.append(r)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out) or "-"


def culprit_line(c: Culprit) -> str:
    """'rank 2 (node1) never_entered all_reduce #2 of group 0: ...'."""
    where = f" ({c.host})" if c.host else ""
    what = f"{c.collective} #{c.seq} of {group_label(c.group, c.group_desc)}" if c.collective \
        else "no collective known"
    return f"rank {c.rank}{where} {c.reason} {what}: {c.detail}"


def summary(v: Verdict) -> str:
    if not v.culprits:
        lines = [f"hang: all {len(v.dumped)} dumps agree (ranks {ranges(v.dumped)}): no rank "
                 "diverged; a collective every rank entered that never completed is the network's "
                 "or a device's, not a rank's"]
    else:
        lines = [f"hang: culprit rank(s) {ranges([c.rank for c in v.culprits])} "
                 f"({', '.join(sorted({c.reason for c in v.culprits}))})"]
        lines += [f"  {culprit_line(c)}" for c in v.culprits]
        for c in v.culprits:
            if c.stack:
                lines.append(f"  where {c.stack_of} called {c.collective} #{c.seq}:")
                lines += [f"    {frame}" for frame in c.stack[:8]]
    if v.missing_dumps and any(c.reason != "no_dump" for c in v.culprits):
        lines.append(f"  no dump from rank(s) {ranges(v.missing_dumps)} (not needed for the verdict)")
    lines += [f"  note: {n}" for n in v.notes]
    return "\n".join(lines)


def annotate_unreachable(doc: dict, found: Verdict) -> dict:
    """health.json with each `unreachable` host's verdict naming the collective its rank hung in."""
    by_host: dict[str | None, Culprit] = {}
    for culprit in found.culprits:
        by_host.setdefault(culprit.host, culprit)
    hosts = []
    for verdict_of in doc.get("hosts", []):
        c = by_host.get(verdict_of.get("host")) if verdict_of.get("verdict") == "unreachable" else None
        if c is not None:
            said = (f"hung in {c.collective} #{c.seq} of {group_label(c.group, c.group_desc)} "
                    f"(rank {c.rank}: {c.reason}, flight recorder)" if c.collective else
                    f"flight recorder: rank {c.rank} hung outside a collective (its partners waited "
                    "on it while making a group)")
            verdict_of = {**verdict_of, "why": f"{verdict_of.get('why', '')}; {said}",
                          "collective": {"collective": c.collective, "seq": c.seq, "group": c.group,
                                         "rank": c.rank, "reason": c.reason}}
        hosts.append(verdict_of)
    return {**doc, "hosts": hosts, "flight_recorder": [asdict(c) for c in found.culprits]}
