"""Other tools' results (nccl-tests, PARAM comms, all_reduce_bench.py) as the project's runs:
one module per format; here the format is detected and a run becomes rows and a meta.json."""
from __future__ import annotations

import datetime as _dt
import hashlib
import math
import uuid
from pathlib import Path

import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.metrics import benchmark_of
from allreduce_bench.core.results.schema import COLUMNS, IMPORTED_COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION
from allreduce_bench.interop import nccl_tests_json, nccl_tests_text, param_comms, pybench
from allreduce_bench.interop.collective_names import FACTORS, TYPES, count_ratio, factor_of, world_size_from_factor
from allreduce_bench.interop.lines import ParseError
from allreduce_bench.interop.run import ImportedRun
from allreduce_bench.nccl_log import parse as nccl_log
from allreduce_bench.nccl_log.lines import LogLines, read_lines

FORMATS = (nccl_tests_json, nccl_tests_text, param_comms, pybench)  # detection order
IMPORT_COLUMNS = COLUMNS + IMPORTED_COLUMNS
_BACKEND = {"nccl-tests": ("nccl", "cuda"), "all_reduce_bench.py": ("nccl", "cuda"),
            "param-comms": ("", "")}

__all__ = ["ImportedRun", "ParseError", "read_text", "read_file", "run_frame", "run_meta", "samples_frame"]


def read_text(text: str, source: str) -> list[ImportedRun]:
    """Every run in `text`, each with what NCCL's own lines around it said (meta `nccl`)."""
    for module in FORMATS:
        if module.looks_like(text):
            runs = module.parse(text, source)
            if not runs:
                raise ParseError(source, 1, f"looks like {module.TOOL} output but holds no result rows",
                                 "a table needs its header line and at least one row")
            attach_nccl(runs, text, source)
            return runs
    first = next((i for i, line in enumerate(text.splitlines(), 1) if line.strip()), 1)
    raise ParseError(source, first, "no nccl-tests (text or -J JSON), PARAM comms COMMS-RES or "
                     "all_reduce_bench.py table found", "give one of those tools' output as it printed it")


def attach_nccl(runs: list[ImportedRun], text: str, source: str) -> None:
    """Each run's NCCL lines (up to the next run's) as meta `nccl`, agreed NCCL_* its `environment`."""
    log = read_lines(text, source)
    if not (log.messages or log.banners):
        return
    starts = sorted(run.first_line for run in runs)
    for run in runs:
        low = 1 if run.first_line == starts[0] else run.first_line
        high = min((s for s in starts if s > run.last_line), default=math.inf)
        part = LogLines([m for m in log.messages if low <= m.number < high],
                        [b for b in log.banners if low <= b[1] < high])
        block = nccl_log.read_log([part], [source])
        if not nccl_log.said_anything(block):
            continue
        run.meta["nccl"] = block
        agreed = {name: next(iter(values)) for name, values in block["environment"].items()
                  if len(values) == 1}
        if agreed and not run.meta.get("environment"):
            run.meta["environment"] = agreed


def read_file(path: Path | str) -> list[ImportedRun]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ParseError(str(path), data[:error.start].count(b"\n") + 1,
                         "not text (bytes that are not UTF-8)") from None
    return read_text(text, str(path))


def settle(run: ImportedRun, source: str, collective: str | None = None,
           world_size: int | None = None) -> ImportedRun:
    """Fill the collective and world size the output did not print (or the user overrides)."""
    if collective:
        if collective not in FACTORS:
            raise UsageError(f"unknown collective {collective!r}; use one of {', '.join(FACTORS)}")
        run.collective, run.why = collective, "given with --collective"
    if run.collective is None:
        raise ParseError(source, run.first_line, f"cannot tell which collective this table measured "
                         f"({run.why}); give it with --collective, e.g. --collective all_reduce", None)
    if world_size:
        run.world_size = world_size
    if run.world_size is None:
        element = {TYPES[r["type"]][1] for r in run.rows if r.get("type") in TYPES}
        ratio = count_ratio(run.rows, element.pop()) if len(element) == 1 else None
        if ratio and ratio > 1:
            run.world_size = ratio
        else:
            run.world_size = world_size_from_factor(run.collective, factor_of(run.rows))
    if run.world_size is None:
        raise ParseError(source, run.first_line, "the world size is neither printed nor readable from "
                         "busbw/algbw; give it with --world-size N", None)
    return run


def run_id_of(source: str, run: ImportedRun, text_digest: str) -> str:
    """Stable: importing the same table again gives the same run id."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"{text_digest}:{run.first_line}:{run.last_line}").hex


def _benchmark(run: ImportedRun, in_place: bool) -> str:
    """`-in-place` marks the in-place half of a table with both: analyses read out-of-place."""
    both = {bool(r["in_place"]) for r in run.rows} == {False, True}
    return benchmark_of(str(run.collective), both and in_place)  # as `run --in-place` names its rows


def _timing(run: ImportedRun, row: dict, settings: dict) -> dict:
    if run.source_tool != "nccl-tests":
        return {"timing": run.source_tool}
    samples = run.samples
    if samples is not None:
        samples = samples[(samples["size_bytes"] == row["size_bytes"]) & (samples["in_place"] == row["in_place"])]
    if samples is not None and len(samples):  # iterations (a list per process), of `loops` calls (-m)
        return {"timing": "nccl-tests -J per-iteration", "samples": int(samples["sample"].nunique()),
                "loops": int(samples["loops"].iloc[0])}
    return {"timing": "nccl-tests average", "samples": 1, "loops": settings.get("iters")}


def run_frame(run: ImportedRun, run_id: str, tag: str, source: str) -> pd.DataFrame:
    hosts = run.meta.get("hostnames") or []
    nodes = len(dict.fromkeys(hosts)) or None
    world = run.world_size
    backend, device = _BACKEND.get(run.source_tool, ("", ""))
    settings = run.meta.get("settings", {})
    rows = [{"run_id": run_id, "timestamp": run.meta.get("start_time") or "", "tag": tag,
             "benchmark": _benchmark(run, r["in_place"]), "algorithm": run.algorithm,
             "backend": backend, "device": device, "world_size": world, "nodes": nodes,
             "ranks_per_node": world // nodes if nodes and world is not None and world % nodes == 0 else None,
             "iters": settings.get("iters"), "warmup": settings.get("warmup_iters"),
             **_timing(run, r, settings),  # a printed time: one sample of `iters` calls
             "source_tool": run.source_tool, "collective": run.collective, "source_file": source,
             **{k: v for k, v in r.items() if k not in ("type", "redop", "root")}} for r in run.rows]
    frame = pd.DataFrame(rows)
    for column in IMPORT_COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    return frame[IMPORT_COLUMNS]


def run_meta(run: ImportedRun, run_id: str, tag: str, source: str) -> dict:
    backend, device = _BACKEND.get(run.source_tool, ("", ""))
    meta = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "tag": tag,
            "benchmark": "allreduce" if run.collective == "all_reduce" else run.collective,
            "collective": run.collective, "backend": backend, "device": device,
            "world_size": run.world_size,
            "imported": {"tool": run.source_tool, "file": str(Path(source).resolve()),
                         "lines": [run.first_line, run.last_line], "how": run.why,
                         "notes": run.notes,
                         "skipped": [{"line": line, "why": why} for line, why in run.skipped],
                         "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")},
            "dtype": sorted({r["dtype"] for r in run.rows if r.get("dtype")}),
            **run.meta}
    if meta.get("hostnames"):
        meta["nodes_seen"] = len(dict.fromkeys(meta["hostnames"]))
    return meta


def samples_frame(run: ImportedRun, run_id: str) -> pd.DataFrame | None:
    """Per-iteration times (nccl-tests -J version 2+) as raw samples."""
    if run.samples is None or run.samples.empty:
        return None
    frame = run.samples.copy()
    frame["run_id"], frame["algorithm"], frame["world_size"] = run_id, run.algorithm, run.world_size
    frame["benchmark"] = [_benchmark(run, bool(p)) for p in frame["in_place"]]
    for column in SAMPLE_COLUMNS:
        if column not in frame.columns:
            frame[column] = "" if column in ("link", "operation", "measure", "host") else None
    frame["bucket_mb"] = frame["bucket_mb"].astype("float64")
    return frame[SAMPLE_COLUMNS]


def digest(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
