"""NCCL Inspector's records of a real job (NCCL 2.28+'s profiler plugin, JSON Lines per process):
v4 records nested or flat, Send/Recv as `sendrecv`, `.gz` too; a line cut short is skipped and
counted, another format version refused (doc/interop.md, "A training job against the benchmark")."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.interop.lines import ParseError

TOOL = "NCCL Inspector"
SUFFIXES = (".log", ".jsonl", ".json", ".log.gz", ".jsonl.gz", ".json.gz")
# Inspector's collective names (ncclFuncToString) -> nccl-tests' names
COLLECTIVES = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "alltoall", "All2All": "alltoall",
               "AlltoAll": "alltoall", "Send": "sendrecv", "Recv": "sendrecv"}
PER_RANK_SIZE = ("all_gather", "reduce_scatter", "alltoall")  # msg size is one rank's part
PAYLOADS = ("coll_perf", "p2p_perf", "dump_stats", "proxy_trace")
COLUMNS = ["file", "line", "comm", "comm_name", "rank", "n_ranks", "nnodes", "host", "pid",
           "op", "collective", "peer", "sn", "msg_bytes", "size_bytes", "time_us", "timing_source", "algo",
           "proto", "channels", "version", "dumped_us"]


@dataclass
class Records:
    """Every collective record read (COLUMNS), the lines skipped and the other kinds counted."""

    frame: pd.DataFrame
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    other: Counter = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)


def _open_text(path: Path) -> str:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as error:  # a .gz cut short is an EOFError
        raise UsageError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    return data.decode("utf-8", errors="replace")


def _first_record(text: str) -> dict | None:
    for line in text.splitlines()[:20]:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def is_record(value: dict) -> bool:
    return any(isinstance(value.get(k), dict) for k in PAYLOADS) or any(
        {f"{kind}", f"{kind}_exec_time_us"} <= set(value) for kind in ("coll", "p2p"))


def looks_like(path: Path) -> bool:
    if path.is_dir():
        return any(looks_like(p) for p in _candidates(path))
    if not path.is_file():
        return False
    try:
        head = gzip.open(path).read(65536) if path.suffix == ".gz" else path.open("rb").read(65536)
    except (OSError, EOFError):
        return False
    first = _first_record(head.decode("utf-8", errors="replace"))
    return first is not None and is_record(first)


def _candidates(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))


def files_of(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found += [p for p in _candidates(path) if looks_like(p)] if path.is_dir() else [path]
    return found


class _Unread(Exception):
    """A record of a kind counted but not read (AllGatherV, ...)."""


def _as_coll(perf: dict) -> dict:
    return {("coll" + k[3:] if k.startswith("p2p") else k): v for k, v in perf.items()}


def _parts(value: dict, context: dict) -> tuple[dict, dict, dict] | None:
    """(header, metadata, coll_perf) of a record, nested or flat, or payload-only (v4.3: `context`)."""
    for kind in ("coll", "p2p"):
        perf = value.get(f"{kind}_perf")
        if isinstance(perf, dict):
            header, metadata = value.get("header"), value.get("metadata")
            return (header if isinstance(header, dict) else context.get("header", {}),
                    metadata if isinstance(metadata, dict) else context.get("metadata", {}),
                    _as_coll(perf) if kind == "p2p" else perf)
        if kind in value and f"{kind}_exec_time_us" in value:  # flat: every key at the top
            return value, value, _as_coll(value) if kind == "p2p" else value
    return None


def check_version(metadata: dict, source: str, number: int) -> str | None:
    version = metadata.get("inspector_output_format_version")
    if version is not None and not str(version).startswith("v4"):
        raise ParseError(source, number, f"NCCL Inspector output format version {version!r}; this reader "
                         "knows v4.x (v4.0 to v4.3)", "convert the records to v4, or update allreduce-bench")
    return None if version is None else str(version)


def _channels(perf: dict) -> int | None:
    if perf.get("coll_n_channels") is not None:
        return int(perf["coll_n_channels"])
    trace = perf.get("event_trace_ts")
    events = trace.get("kernel_events") if isinstance(trace, dict) else None
    return len(events) if isinstance(events, list) and events else None


def record(header: dict, metadata: dict, perf: dict) -> dict:
    """One record's fields (COLUMNS); ValueError, KeyError or TypeError: not usable."""
    collective = COLLECTIVES.get(str(perf["coll"]))
    if collective is None:
        raise _Unread(f"{perf['coll']} records")
    n_ranks, msg_bytes = int(header["n_ranks"]), int(perf["coll_msg_size_bytes"])
    time_us = float(perf["coll_exec_time_us"])
    if n_ranks < 1 or time_us < 0 or msg_bytes < 0:
        raise ValueError("n_ranks, coll_msg_size_bytes or coll_exec_time_us out of range")
    if msg_bytes >= 1 << 63:
        raise ValueError("coll_msg_size_bytes wrapped around (Inspector sizes uint8 collectives as -1 bytes "
                         "per element)")
    return {"comm": str(header.get("id", "")), "comm_name": str(header.get("comm_name") or ""),
            "rank": int(header["rank"]), "n_ranks": n_ranks, "nnodes": int(header.get("nnodes") or 0) or None,
            "host": str(metadata.get("hostname") or ""), "pid": int(metadata.get("pid") or 0),
            "op": str(perf["coll"]), "collective": collective,
            "peer": int(perf["coll_peer"]) if perf.get("coll_peer") is not None else None,
            "sn": int(perf["coll_sn"]) if perf.get("coll_sn") is not None else None,
            "msg_bytes": msg_bytes, "size_bytes": msg_bytes * n_ranks if collective in PER_RANK_SIZE else msg_bytes,
            "time_us": time_us, "timing_source": str(perf.get("coll_timing_source") or ""),
            "algo": str(perf.get("coll_algo") or ""), "proto": str(perf.get("coll_proto") or ""),
            "channels": _channels(perf), "version": metadata.get("inspector_output_format_version"),
            "dumped_us": metadata.get("dump_timestamp_us")}


def read_text(text: str, source: str, into: Records) -> list[dict]:
    """The records of one file's text; skipped lines and other kinds into `into`."""
    found, context = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            into.skipped.append((source, number, "not a whole JSON record (a line cut short?)"))
            continue
        if not isinstance(value, dict) or not is_record(value):
            into.skipped.append((source, number, "not an NCCL Inspector record"))
            continue
        if isinstance(value.get("header"), dict) and isinstance(value.get("metadata"), dict):
            context = {"header": value["header"], "metadata": value["metadata"]}
        parts = _parts(value, context)
        check_version(parts[1] if parts else context.get("metadata", {}), source, number)
        if parts is None:
            into.other[next((f"{k} records" for k in PAYLOADS if k in value), "other records")] += 1
            continue
        try:
            found.append({"file": source, "line": number, **record(*parts)})
        except _Unread as kind:
            into.other[str(kind)] += 1
        except (KeyError, TypeError, ValueError) as error:
            why = f"no {error}" if isinstance(error, KeyError) else str(error)
            into.skipped.append((source, number, f"not a usable record: {why}"))
    return found


def read(paths: list[Path]) -> Records:
    """Every record of the Inspector files (and folders) given, as one job."""
    files = files_of(paths)
    if not files:
        raise UsageError(f"no NCCL Inspector files (*.log, *.jsonl[.gz]) in {', '.join(map(str, paths))}; "
                         "give the folder NCCL_INSPECTOR_DUMP_DIR names, or its files")
    into = Records(pd.DataFrame(columns=COLUMNS), files=[str(f) for f in files])
    rows = [r for f in files for r in read_text(_open_text(f), str(f), into)]
    if not rows:
        raise ParseError(str(files[0]), 1, f"no collective or Send/Recv records in {len(files)} NCCL Inspector file(s) "
                         f"({len(into.skipped)} line(s) skipped; {dict(into.other) or 'nothing else'})",
                         "give the files a job's NCCL_INSPECTOR_DUMP_DIR holds")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    unnumbered = frame["sn"].isna()  # a flat record without coll_sn: its order in its file
    frame.loc[unnumbered, "sn"] = frame[unnumbered].groupby(["file", "comm", "rank", "collective"]).cumcount()
    frame["sn"] = frame["sn"].astype("int64")
    whole = frame.drop_duplicates(["comm", "rank", "op", "peer", "sn", "n_ranks"])
    if len(whole) < len(frame):
        into.other["duplicate records (the same call and rank twice)"] += len(frame) - len(whole)
    into.frame = whole.reset_index(drop=True)
    return into
