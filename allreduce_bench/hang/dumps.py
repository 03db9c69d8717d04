"""PyTorch's Flight Recorder dumps (pickle or JSON, one per rank, the rank from the file name's
trailing digits) read without torch; the pickle by an unpickler that refuses every class, so a
file that is not a dump cannot run code."""
from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

from allreduce_bench.core.errors import UsageError

_RANK = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")
_SUFFIXES = (".json", ".pkl", ".pickle")


@dataclass(frozen=True)
class Entry:
    group: str  # the process group's name (pg_config's key)
    desc: str  # its description ('default_pg', or what new_group(group_desc=) said)
    seq: int  # collective_seq_id within the group (p2p_seq_id for a point-to-point call)
    collective: str  # 'all_reduce' (the profiling name without its 'gloo:' / 'nccl:' prefix)
    backend: str
    input_sizes: tuple
    input_dtypes: tuple
    state: str  # scheduled | started | completed
    time_created_ns: int | None
    timeout_ms: int | None
    is_p2p: bool
    stack: tuple[str, ...]  # 'file:line function', innermost first, as torch recorded it


@dataclass
class Dump:
    rank: int
    path: str
    version: str
    groups: dict[str, tuple[str, tuple[int, ...]]]  # name -> (description, global ranks)
    entries: list[Entry]
    host: str | None = None
    notes: list[str] = field(default_factory=list)


class _PlainOnly(pickle.Unpickler):
    """A Flight Recorder pickle holds plain types only: any class it names is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it names the Python object {module}.{name}")


def rank_of(path: Path) -> int | None:
    """The rank in a dump's file name: `rank3`, `nccl_trace_rank_3`, `dump_3.json` -> 3."""
    found = _RANK.search(path.name)
    return int(found.group(1)) if found else None


def load(data: bytes, source: str) -> dict:
    stripped = data.lstrip()
    try:
        if stripped.startswith(b"{"):
            loaded = json.loads(stripped.decode("utf-8"))
        else:
            loaded = _PlainOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, UnicodeDecodeError, IndexError,
            TypeError, AttributeError) as error:
        raise UsageError(f"{source}: not a Flight Recorder dump ({str(error)[:120] or 'unreadable'}); "
                         "give the files torch wrote (TORCH_FR_DUMP_TEMP_FILE or _dump_fr_trace)") from None
    if not isinstance(loaded, dict) or "version" not in loaded:
        raise UsageError(f"{source}: not a Flight Recorder dump (no `version` key); give the files "
                         "torch wrote (TORCH_FR_DUMP_TEMP_FILE or _dump_fr_trace)")
    return loaded


def parse_ranks(text) -> tuple[int, ...]:
    """pg_config's `ranks`: '[0, 1, 2]' (a string, as torch writes it) or a list."""
    if isinstance(text, (list, tuple)):
        return tuple(int(r) for r in text)
    try:
        return tuple(int(r) for r in json.loads(str(text)))
    except (ValueError, TypeError):
        return ()


def _stack(frames) -> tuple[str, ...]:
    return tuple(f"{frame.get('filename', '?')}:{frame.get('line', '?')} {frame.get('name', '?')}"
                 for frame in frames or () if isinstance(frame, dict))


def _entry(raw: dict, notes: set[str]) -> Entry:
    name = str(raw.get("profiling_name", "?"))
    backend, _, collective = name.rpartition(":")
    is_p2p = bool(raw.get("is_p2p", False))
    if "collective_seq_id" in raw:
        seq = raw.get("p2p_seq_id") if is_p2p else raw.get("collective_seq_id")
    else:
        notes.add("no `collective_seq_id` (older dump): its `seq_id` is used")
        seq = raw.get("seq_id", -1)
    if "input_dtypes" not in raw:
        notes.add("no `input_dtypes` (older dump): dtypes are not compared")
    if "frames" not in raw:
        notes.add("no `frames` (a JSON dump or a dump without stack traces): no Python stack")
    dtypes = raw.get("input_dtypes", ())
    sizes = raw.get("input_sizes") or ()
    created = raw.get("time_created_ns")
    group = tuple(raw.get("process_group") or ("?", ""))
    return Entry(group=str(group[0]), desc=str(group[1]) if len(group) > 1 else "", seq=int(seq or 0),
                 collective=collective or name, backend=backend,
                 input_sizes=tuple(tuple(int(d) for d in s) for s in sizes),
                 input_dtypes=tuple(dtypes) if isinstance(dtypes, (list, tuple)) else (str(dtypes),),
                 state=str(raw.get("state", "?")),
                 time_created_ns=int(created) if created else None,
                 timeout_ms=int(raw["timeout_ms"]) if raw.get("timeout_ms") else None,
                 is_p2p=is_p2p, stack=_stack(raw.get("frames")))


def parse(data: bytes, source: str, rank: int) -> Dump:
    raw = load(data, source)
    notes: set[str] = set()
    entries = []
    for item in raw.get("entries") or ():
        if isinstance(item, dict):
            try:
                entries.append(_entry(item, notes))
            except (TypeError, ValueError) as error:
                raise UsageError(f"{source}: an entry of this Flight Recorder dump is malformed "
                                 f"({error}); give the files as torch wrote them") from None
    groups = {str(name): (str(info.get("desc", "")), parse_ranks(info.get("ranks", "[]")))
              for name, info in (raw.get("pg_config") or {}).items() if isinstance(info, dict)}
    if not groups and entries:
        notes.add("no `pg_config`: each group's members are the ranks whose dumps name it")
    host = raw.get("hostname") or raw.get("host")
    return Dump(rank=rank, path=source, version=str(raw.get("version", "?")), groups=groups,
                entries=entries, host=str(host) if host else None, notes=sorted(notes))


def dump_files(paths: list[Path]) -> list[Path]:
    """The dump files among `paths` (a folder: its files whose names end in a rank)."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.is_file() and rank_of(p) is not None
                            and (p.suffix in _SUFFIXES or not p.suffix))
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or folder; give Flight Recorder dumps (one per "
                             "rank) or the folder holding them")
    return found


def read(paths: list[Path]) -> list[Dump]:
    files = dump_files(paths)
    if not files:
        raise UsageError(f"no Flight Recorder dumps in {', '.join(map(str, paths))} (files named "
                         "<prefix><rank>, e.g. rank0 or nccl_trace_rank_0)")
    dumps: dict[int, Dump] = {}
    for path in files:
        rank = rank_of(path)
        if rank is None:
            raise UsageError(f"{path}: the file name holds no rank (torch names dumps "
                             "<prefix><rank>, e.g. rank3); rename it so")
        if rank in dumps:
            raise UsageError(f"{path} and {dumps[rank].path} are both rank {rank}'s dump; give one "
                             "per rank")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise UsageError(f"{path}: cannot read ({error.strerror})") from None
        dumps[rank] = parse(data, str(path), rank)
    return [dumps[r] for r in sorted(dumps)]


def hosts_beside(paths: list[Path]) -> list[str]:
    """Every rank's hostname from a run's meta.json beside the dumps or a folder up, else []."""
    for path in paths:
        here = path if path.is_dir() else path.parent
        for meta in (here / "meta.json", here.parent / "meta.json"):
            try:
                names = json.loads(meta.read_text()).get("hostnames") if meta.is_file() else None
            except (OSError, ValueError, AttributeError):
                names = None
            if isinstance(names, list):
                return [str(n) for n in names]
    return []
